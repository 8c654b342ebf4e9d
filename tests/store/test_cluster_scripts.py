"""Every script on a real Redis Cluster (tests/redis_cluster.py, 3 primaries): each is ``#!lua`` and
touches only the keys it declares, so the server runs it as long as its keys share one slot. A run's keys
(its record, document, result, progress, outbox, index of deliveries, its events' bodies and pending
counts, and its idempotency record), a subscription's (its hash, log, in-flight, parked, rate budget and
chains) with its deliveries', and the per-shard indexes (due sets of runs and of deliveries, unfinished
runs and deliveries, outboxes, a client's deliveries in flight and parked) are under their shard's hash
tag (keys.shard_prefix), a vendor's budget and pause under the vendor's own, and the rest (a client's
directory, feed and relay marks) under the store's ``hb:{hb}:`` (keys.PREFIX). The whole of
tests/store/test_lua.py (with the outbox's tests and the races of test_two_phase.py) runs against
redis-py's cluster client: a key built inside a script, one left out of KEYS, or a script given keys of
two slots (a run's and its shard's indexes are in one; an event's body must be minted beside its run, a
delivery's id in its subscription's shard; the fan-out is one call per subscription shard, then the
client's feed, then the run's side) fails here with the server's "keys that do not hash to the same slot"
(or redis-py's "all keys must map to the same key slot")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio.cluster as aiocluster

from service.store import Store
from service.vendors.registry import load_settings
from tests.conftest import base_env
from tests.redis_cluster import RedisCluster
from tests.store import test_lua
from tests.store.test_lua import *  # noqa: F403  (the same tests, with the fixture below)
from tests.store.test_outbox import *  # noqa: F403  (the outbox and the relay)
from tests.store.test_two_phase import (  # noqa: F401  (the races between the read and the script)
    test_a_batch_relays_again_only_the_change_whose_subscriptions_changed,
    test_a_delivery_claimed_between_the_read_and_the_script_is_not_claimed_twice,
    test_a_record_that_names_other_keys_is_refused_then_read_again,
    test_a_run_claimed_between_the_read_and_the_script_is_not_claimed_twice,
    test_a_subscription_created_after_the_read_gets_the_event,
    test_an_idle_workers_vendors_look_at_their_shards_together_in_one_call,
    test_the_python_delivery_id_is_the_one_the_fanout_mints,
)


@pytest.fixture
async def store(redis_cluster: RedisCluster, redis_url: str) -> AsyncIterator[Store]:
    redis_cluster.flushall()
    settings = load_settings(
        base_env(
            redis_url,
            HOOKBRIDGE_RETENTION_S=str(test_lua.RETENTION_MS // 1000),
            HOOKBRIDGE_SUBSCRIPTION_MAX_IN_FLIGHT="2",
            HOOKBRIDGE_CLIENT_MAX_IN_FLIGHT="3",
            HOOKBRIDGE_SUBSCRIPTION_DISABLE_AFTER_S="60",
        )
    )
    client = aiocluster.RedisCluster.from_url(redis_cluster.url)
    await client.initialize()
    s = Store(client, settings)  # type: ignore[arg-type]
    try:
        yield s
    finally:
        await s.close()
