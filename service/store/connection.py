"""Connecting to Redis by URL or through Sentinel, with retries on connection faults."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError

from service.settings import Settings


def connect(settings: Settings, *, url: str | None = None) -> Redis:
    """A client that retries a command a few times on connection faults, then raises.

    Beyond those retries the caller decides: the API answers 503, the worker backs off.
    """
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3)
    options: dict[str, object] = {
        "retry": retry,
        "retry_on_error": [ConnectionError, TimeoutError],
        "socket_connect_timeout": 2.0,
        "socket_timeout": 10.0,
        "health_check_interval": 15,
        "max_connections": 200,
    }
    if settings.redis_sentinels and url is None:
        sentinel = Sentinel(list(settings.redis_sentinels), socket_connect_timeout=2.0)  # type: ignore[no-untyped-call]
        client: Redis = sentinel.master_for(settings.redis_sentinel_master, **options)  # type: ignore[arg-type]
        return client
    target = url or settings.redis_url
    if not target:
        raise ValueError("no Redis URL")
    client = Redis.from_url(target, **options)  # type: ignore[arg-type]
    return client
