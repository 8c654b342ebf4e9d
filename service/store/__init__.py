"""The Redis store: the only package that knows key names (``keys``) and changes state (``scripts``).

Every state change is one Lua script, so a change and the events and deliveries it implies are
written together or not at all. The store is split by aggregate, each a small class over the same
connection and scripts (``base.Part``):

- ``runs.py``: runs, their documents, results, events, listing and due sets;
- ``subscriptions.py``: subscriptions, their directory per client and their secrets at rest;
- ``deliveries.py``: deliveries, their attempts, logs, due set and in-flight limits;
- ``limits.py``: the client's API rate limits, the vendor's request budget and its pause after a 429;
- ``upkeep.py``: heartbeats, the sweeper's repair, the purge, the gauges' samples.

:class:`Store` holds one of each (``store.runs.get_run(...)``); a consumer that needs a few calls of one
aggregate is typed against a narrow protocol of ``ports.py`` instead of the whole store. See
``keys.py`` for the data layout, ``service/core/records.py`` for the records and ``codec.py`` for how a
reply becomes one.

redis-py types its hash and list commands as returning "Awaitable[T] | T" for its sync and async
clients alike; the ``type: ignore[misc]`` on some awaits are for that alone.
"""

from __future__ import annotations

from redis.asyncio import Redis

from service.config.settings import Settings
from service.store import keys
from service.store.codec import ClaimedDelivery, ClaimedRun
from service.store.connection import connect
from service.store.deliveries import Deliveries
from service.store.limits import Limits, OverRate
from service.store.outcomes import Applied, Busy, Conflict, Missing, Outcome, RetryOutcome
from service.store.pages import Listing
from service.store.runs import Runs
from service.store.scripts import Scripts
from service.store.secretbox import SecretUnavailable
from service.store.subscriptions import OWNER_DISABLED, Subscriptions
from service.store.upkeep import Observation, Upkeep

__all__ = [
    "OWNER_DISABLED",
    "Applied",
    "Busy",
    "ClaimedDelivery",
    "ClaimedRun",
    "Conflict",
    "Deliveries",
    "Limits",
    "Listing",
    "Missing",
    "Observation",
    "Outcome",
    "OverRate",
    "RetryOutcome",
    "Runs",
    "SecretUnavailable",
    "Store",
    "Subscriptions",
    "Upkeep",
    "connect",
    "keys",
]


class Store:
    """The aggregates over one connection; the scripts are loaded once and shared."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        scripts = Scripts(redis)
        self.runs = Runs(redis, scripts, settings)
        self.subscriptions = Subscriptions(redis, scripts, settings)
        self.deliveries = Deliveries(redis, scripts, settings)
        self.limits = Limits(redis, scripts, settings)
        self.upkeep = Upkeep(redis, scripts, settings)

    async def ping(self) -> bool:
        return bool(await self.redis.ping())

    async def close(self) -> None:
        await self.redis.aclose()
