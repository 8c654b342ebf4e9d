"""The Redis Cluster helper (tests/redis_cluster.py) against real nodes of the server the suite runs:
it forms with 3 primaries and 3 connected replicas, redis-py's asyncio cluster client reads and writes
across slots, a ``#!lua`` script runs on keys of one hash tag, and a killed primary's replica takes over."""

from __future__ import annotations

import itertools
import time

import pytest
import redis
import redis.asyncio.cluster as aiocluster

from tests.redis_cluster import SLOTS, Node, RedisCluster, _slot_range


def test_slot_ranges_cover_every_slot_once() -> None:
    for count in (1, 2, 3, 5):
        ranges = [_slot_range(i, count) for i in range(count)]
        assert ranges[0][0] == 0 and ranges[-1][1] == SLOTS - 1
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))


def test_the_cluster_forms(redis_cluster: RedisCluster) -> None:
    assert len(redis_cluster.seeds) == 6
    primaries = redis_cluster.primaries_now()
    assert len(primaries) == 3
    for primary in primaries:
        assert len(redis_cluster.replicas_of(primary)) == 1
    info = primaries[0].command("CLUSTER", "INFO").decode()
    assert "cluster_state:ok" in info and "cluster_known_nodes:6" in info and "cluster_size:3" in info
    shards = {(s[0], s[1]) for s in primaries[0].command("CLUSTER", "SLOTS")}
    assert shards == {(0, 5460), (5461, 10921), (10922, 16383)}


async def test_the_asyncio_cluster_client_writes_and_reads_across_slots(redis_cluster: RedisCluster) -> None:
    client = aiocluster.RedisCluster(
        startup_nodes=[aiocluster.ClusterNode(host, port) for host, port in redis_cluster.seeds]
    )
    try:
        await client.initialize()
        keys = [f"key-{i}" for i in range(64)]
        slots = {client.keyslot(k) for k in keys}
        owners = {client.get_node_from_key(k).port for k in keys}
        assert len(owners) == 3, "the keys land on every primary"
        for key in keys:
            await client.set(key, key.upper())
        assert [await client.get(k) for k in keys] == [k.upper().encode() for k in keys]
        assert len(slots) > 3
    finally:
        await client.aclose()


async def test_a_lua_script_with_a_shebang_runs_on_one_hash_tag(redis_cluster: RedisCluster) -> None:
    """``#!lua`` (Redis >= 7.0, Valkey): the keys are declared and share the tag {run:1}, so one slot."""
    script = "#!lua\nredis.call('SET', KEYS[1], ARGV[1])\nreturn redis.call('INCRBY', KEYS[2], ARGV[2])\n"
    client = aiocluster.RedisCluster.from_url(redis_cluster.url)
    try:
        assert await client.eval(script, 2, "{run:1}:state", "{run:1}:count", "queued", 5) == 5
        assert await client.eval(script, 2, "{run:1}:state", "{run:1}:count", "running", 2) == 7
        assert await client.get("{run:1}:state") == b"running"
        # Keys of two slots in one script: the server refuses it (redis-py refuses before sending).
        node = redis_cluster.primaries_now()[0]
        with pytest.raises(redis.ResponseError, match="CROSSSLOT"):
            node.command("EVAL", script, 2, "{run:1}:state", "{run:2}:count", "x", 1)
    finally:
        await client.aclose()


async def test_a_killed_primary_is_replaced_by_its_replica() -> None:
    with RedisCluster() as cluster:
        client = aiocluster.RedisCluster.from_url(cluster.url)
        try:
            await client.initialize()
            key = "survives"
            await client.set(key, "1")
            owner_port = client.get_node_from_key(key).port
            (owner,) = [n for n in cluster.nodes if n.port == owner_port]
            (replica,) = cluster.replicas_of(owner)
            # The write reached the replica before the primary dies. (Not WAIT on a connection of its
            # own: that one wrote nothing and would answer at once; tests/store/test_wait.py.)
            assert _eventually_on(replica, key, b"1")
            promoted = cluster.fail_over(owner)
            assert promoted is replica and not owner.alive()
            assert len(cluster.primaries_now()) == 3
            assert replica.command("READONLY") and replica.command("GET", key) == b"1"
        finally:
            await client.aclose()
        # A client that starts now, from seeds that include the dead node, finds the new primary.
        fresh = aiocluster.RedisCluster(
            startup_nodes=[aiocluster.ClusterNode(h, p) for h, p in cluster.seeds if p != owner.port]
        )
        try:
            assert await fresh.get(key) == b"1"
            await fresh.set(key, "2")
            assert replica.command("GET", key) == b"2"
        finally:
            await fresh.aclose()


def _eventually_on(node: Node, key: str, value: bytes, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with node.client() as client:
            client.execute_command("READONLY")
            if client.get(key) == value:
                return True
        time.sleep(0.02)
    raise AssertionError(f"{key} never reached :{node.port}")


def test_a_killed_primary_restarted_rejoins_as_a_replica() -> None:
    with RedisCluster() as cluster:
        owner = cluster.primaries_now()[0]
        promoted = cluster.fail_over(owner)
        cluster.restart(owner)
        assert owner.alive() and owner.command("ROLE")[0] == b"slave"
        assert cluster.replicas_of(promoted) == [owner]
        assert len(cluster.primaries_now()) == 3
