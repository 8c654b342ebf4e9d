"""Connecting to Redis by URL or through Sentinel, with retries on connection faults.

One place builds every Redis client of the process: the store's and arq's (``redis_class=ArqRedis``), so
that passwords, usernames and TLS reach both alike, for the master and for the Sentinels.
"""

from __future__ import annotations

from typing import Any, TypeVar

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, DataError, TimeoutError

from service.settings import RedisAuth, Settings

R = TypeVar("R", bound=Redis)


def tls_options(auth: RedisAuth) -> dict[str, Any]:
    """redis-py's ssl_* keywords for a TLS connection under these settings."""
    # Strings: redis-py's asyncio SSL context ignores an ssl.VerifyMode here (and then fails on connect).
    options: dict[str, Any] = {"ssl_cert_reqs": "required" if auth.tls_verify else "none"}
    options["ssl_check_hostname"] = auth.tls_verify
    if auth.tls_ca_file:
        options["ssl_ca_certs"] = auth.tls_ca_file
    return options


def _credentials(username: str, password: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if username:
        options["username"] = username
    if password:
        options["password"] = password
    return options


class _HiredisPacking:
    """Packs a command with hiredis's packer (C), as redis-py's synchronous connections do when hiredis is
    installed; its asyncio connections pack in Python, which cost a worker's transition batch ~2.9 us a
    change against ~0.4 (docs/performance.md). The same bytes for every argument (str, bytes, int, float,
    memoryview); anything else is redis-py's ``DataError``, as before."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from None


_PACKED: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _packing(client: R) -> R:
    """``client`` with its pool's connections packing through hiredis (the pool makes them lazily, so no
    connection exists yet): plain, TLS, Unix socket or Sentinel-managed alike."""
    pool = client.connection_pool
    cls = pool.connection_class
    if not issubclass(cls, _HiredisPacking):
        if cls not in _PACKED:
            _PACKED[cls] = type(f"Packing{cls.__name__}", (_HiredisPacking, cls), {})
        pool.connection_class = _PACKED[cls]
    return client


class _SentinelPool(SentinelConnectionPool):
    """Closes the Sentinel clients with the pool: the client is the only owner of its Sentinel (which
    redis-py leaves open, one connection per Sentinel, when the master client is closed)."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        for sentinel in self.sentinel_manager.sentinels:
            await sentinel.aclose()


def connect(
    settings: Settings,
    *,
    url: str | None = None,
    redis_class: type[R] = Redis,  # type: ignore[assignment]
    for_arq: bool = False,
) -> R:
    """A client that retries a command a few times on connection faults, then raises.

    Beyond those retries the caller decides: the API answers 503, the worker backs off.

    ``for_arq``: the connection options arq gives its own pool (no socket timeout, no retries; arq's loop
    is restarted from outside on a Redis error), with the same credentials, TLS and Sentinel. arq's tasks
    are cancelled from outside, and redis-py wraps each read in a timeout scope in which, on Python 3.11,
    a cancellation can be swallowed: with a socket timeout the worker's exit waited forever on arq.
    """
    auth = settings.redis
    options: dict[str, Any] = {
        "socket_connect_timeout": 2.0,
        **_credentials(auth.username, auth.password),
    }
    if not for_arq:
        options |= {
            "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
            "retry_on_error": [ConnectionError, TimeoutError],
            "socket_timeout": 10.0,
            # No health_check_interval: with it, redis-py retries a refused AUTH (NOAUTH is a
            # ConnectionError) inside its own health check without end (a wrong or missing password hung
            # every command). The retries above reconnect a connection that went stale while idle.
            "max_connections": 200,
        }
    if settings.redis_sentinels and url is None:
        sentinel_options: dict[str, Any] = {
            "socket_connect_timeout": 2.0,
            "socket_timeout": None if for_arq else 5.0,
            **_credentials(auth.sentinel_username, auth.sentinel_password),
        }
        if auth.sentinel_tls:
            sentinel_options |= {"ssl": True, **tls_options(auth)}
        if auth.tls:
            options |= {"ssl": True, **tls_options(auth)}
        sentinel = Sentinel(list(settings.redis_sentinels), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
        client: R = sentinel.master_for(
            settings.redis_sentinel_master,
            redis_class=redis_class,
            connection_pool_class=_SentinelPool,
            **options,
        )
        return _packing(client)
    target = url or settings.redis_url
    if not target:
        raise ValueError("no Redis URL")
    if target.startswith("rediss://"):  # a URL says TLS by its scheme; REDIS_TLS is for Sentinel's master
        options |= tls_options(auth)
    client = redis_class.from_url(target, **options)
    return _packing(client)
