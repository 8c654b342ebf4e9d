"""WAIT (``REDIS_WAIT_REPLICAS``, contract section 10) through ``connect(durable=True)``, against a real
primary and replica, and on the 6-node cluster: each of WAIT's traps has a test here.

- WAIT is per connection: on a connection that wrote nothing it returns at once, whatever the replicas
  hold. The durable client sends it behind the write, on the write's socket, in the same packet.
- WAIT is refused inside a script: it follows the script's EVALSHA, once for the script's writes.
- WAIT has no key: a cluster client sends it to some node. Riding the write's socket, it reaches the
  primary that took the write.

A replica is made to fall behind by SIGSTOP (its primary still counts it as connected, as it would a
replica on a congested link) and resumed by SIGCONT in a ``finally``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster as AsyncCluster

from service.config import settings as settings_mod
from service.store.connection import ReplicasBehind, connect, replicas_short
from service.store.scripts import Scripts
from tests.chart.redis_procs import RedisProcess
from tests.redis_cluster import Node, RedisCluster
from tests.redis_pair import Pair, command, stopped, until

TIMEOUT_MS = 1000  # long enough for a replica on this busy machine; the "behind" cases wait it out


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with Pair.started() as found:
        yield found


def _settings(**env: str) -> settings_mod.Settings:
    return settings_mod.load(
        {"HOOKBRIDGE_REDIS_WAIT_REPLICAS": "1", "HOOKBRIDGE_REDIS_WAIT_TIMEOUT_MS": str(TIMEOUT_MS), **env},
        vendors={},
    )


@pytest.fixture
async def clients(pair: Pair) -> AsyncIterator[tuple[Redis, Redis]]:
    """(durable, plain) over the pair's primary."""
    cfg = _settings(HOOKBRIDGE_REDIS_URL=pair.primary.url)
    durable, plain = connect(cfg, durable=True), connect(cfg)
    # A write both acknowledged: the replica has caught up before a test freezes it.
    await durable.set("warm", 1)
    try:
        yield durable, plain
    finally:
        await durable.aclose()
        await plain.aclose()


def _waits(port: int) -> int:
    stats = command(port, "INFO", "commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


async def test_a_write_returns_once_its_replica_has_it(pair: Pair, clients: tuple[Redis, Redis]) -> None:
    durable, _ = clients
    assert await durable.set("k", "v1") is True
    assert command(pair.replica.port, "GET", "k") == b"v1"  # no poll: WAIT returned after the ack


async def test_a_replica_behind_raises_and_a_fresh_connection_s_wait_would_have_lied(
    pair: Pair, clients: tuple[Redis, Redis]
) -> None:
    durable, plain = clients
    with stopped(pair.replica.process):
        started = time.monotonic()
        with pytest.raises(ReplicasBehind, match="0 of 1 replicas"):
            await durable.set("k", "v2")
        assert time.monotonic() - started >= TIMEOUT_MS / 1000 * 0.9  # it waited its timeout, no more
        assert time.monotonic() - started < 5
        # The write is on the primary (and may be lost with it): a 503 says "it may exist".
        assert await plain.get("k") == b"v2"
        # The trap: WAIT on another connection, which wrote nothing, counts the frozen replica at once.
        with redis.Redis(port=pair.primary.port, single_connection_client=True) as fresh:
            quick = time.monotonic()
            assert fresh.execute_command("WAIT", 1, TIMEOUT_MS) == 1
            assert time.monotonic() - quick < TIMEOUT_MS / 1000 / 2
        # The durable client's connection is still in step: the next reply is the next command's.
        assert await durable.get("k") == b"v2"
    # Resumed: the writes go through again on the same client.
    await durable.set("k", "v3")
    assert command(pair.replica.port, "GET", "k") == b"v3"


async def test_wait_cannot_run_inside_a_script(pair: Pair, clients: tuple[Redis, Redis]) -> None:
    """Redis refuses WAIT in a script; Valkey runs it without blocking (a script's writes reach the
    replicas only once it has ended, so it could not wait for them anyway). Either way it must follow the
    script, as the durable client sends it."""
    _, plain = clients
    script = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('WAIT', 1, ARGV[2])"
    with stopped(pair.replica.process):
        started = time.monotonic()
        try:
            acked = await plain.eval(script, 1, "in-lua", "x", TIMEOUT_MS)
        except redis.ResponseError as exc:
            assert "not allowed from script" in str(exc)  # Redis
        else:  # Valkey: it answered at once (1, as if the frozen replica had the write, or 0)
            assert time.monotonic() - started < TIMEOUT_MS / 1000 / 2
            assert acked in (0, 1)


async def test_one_wait_per_script_call_per_pipeline_and_none_for_reads(
    pair: Pair, clients: tuple[Redis, Redis]
) -> None:
    durable, _ = clients
    scripts = Scripts(durable)
    # Loaded by its first call (NOSCRIPT, SCRIPT LOAD, EVALSHA again: two WAITs, once per process).
    await scripts.rate_limit(keys=["hb:test:rate"], args=[100.0, 5, "take"])
    before = _waits(pair.primary.port)
    # A store script (its writes: several keys) is one EVALSHA, then one WAIT.
    await scripts.rate_limit(keys=["hb:test:rate"], args=[100.0, 5, "take"])
    assert _waits(pair.primary.port) == before + 1
    # A batch of writes in one pipeline: one WAIT behind the last; a transaction too.
    for transaction in (False, True):
        pipe = durable.pipeline(transaction=transaction)
        for i in range(5):
            pipe.set(f"batch:{i}", i)
        assert await pipe.execute() == [True] * 5
    assert _waits(pair.primary.port) == before + 3
    # Reads wait for nothing.
    assert await durable.get("batch:4") == b"4"
    assert await durable.mget(["batch:0", "batch:1"]) == [b"0", b"1"]
    assert _waits(pair.primary.port) == before + 3


async def test_an_error_reply_keeps_the_connection_in_step(clients: tuple[Redis, Redis]) -> None:
    durable, _ = clients
    await durable.set("a-string", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        await durable.lpush("a-string", "y")  # a write refused: its WAIT's reply is read and dropped
    assert await durable.get("a-string") == b"x"
    # A script not loaded yet: NOSCRIPT, then redis-py loads it and runs it again; both replies in step.
    script = durable.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert await script(keys=["noscript-first"], args=[2]) == 2
    assert await script(keys=["noscript-first"], args=[3]) == 5


async def test_replicas_short_names_the_primary_without_enough(
    pair: Pair, clients: tuple[Redis, Redis]
) -> None:
    _, plain = clients
    assert await replicas_short(plain, 0) == []
    assert await replicas_short(plain, 1) == []
    assert await replicas_short(plain, 2) == ["primary"]


# --- on the cluster -------------------------------------------------------------------------------


def _node(cluster: RedisCluster, port: int) -> Node:
    (node,) = [n for n in cluster.nodes if n.port == port]
    return node


async def test_on_a_cluster_the_wait_reaches_the_primary_that_took_the_write(
    redis_cluster: RedisCluster,
) -> None:
    seeds = ",".join(f"{h}:{p}" for h, p in redis_cluster.seeds)
    cfg = _settings(HOOKBRIDGE_REDIS_CLUSTER_NODES=seeds)
    durable, plain = connect(cfg, durable=True), connect(cfg)
    assert isinstance(durable, AsyncCluster) and isinstance(plain, AsyncCluster)
    try:
        await plain.initialize()
        keys = [f"wait-{i}" for i in range(32)]
        here = keys[0]
        owner = _node(redis_cluster, plain.get_node_from_key(here).port)
        elsewhere = next(k for k in keys if plain.get_node_from_key(k).port != owner.port)
        for key in (here, elsewhere):
            await durable.set(key, "before")  # both replicas caught up
        (replica,) = redis_cluster.replicas_of(owner)
        with stopped(replica.process):
            with pytest.raises(ReplicasBehind):
                await durable.set(here, "after")
            # Another primary's replica is fine: that write's WAIT went to that primary, not to a random
            # node, and not to the one behind.
            await durable.set(elsewhere, "after")
            # The trap: a WAIT of its own, with no key, goes to some node on a connection that wrote
            # nothing, and answers at once as if all were well.
            assert await plain.execute_command("WAIT", 1, TIMEOUT_MS) == 1
        assert await replicas_short(plain, 1) == []
        assert len(await replicas_short(plain, 2)) == 3  # each primary has one replica
    finally:
        await durable.aclose()
        await plain.aclose()


async def test_through_sentinel_the_master_s_writes_wait_too() -> None:
    """The durable client found through Sentinel (its pool's connections are Sentinel-managed): the same
    WAIT behind each write, the same ReplicasBehind."""
    master = RedisProcess().start()
    replica = RedisProcess().start()
    sentinel = RedisProcess(sentinel_of=master).start()
    durable: Redis | None = None
    try:
        command(replica.port, "REPLICAOF", "127.0.0.1", master.port)
        until(
            lambda: command(master.port, "INFO", "replication").get("slave0", {}).get("state") == "online",
            "up",
        )
        durable = connect(_settings(HOOKBRIDGE_REDIS_SENTINELS=f"127.0.0.1:{sentinel.port}"), durable=True)
        assert await durable.set("k", "1") is True
        assert command(replica.port, "GET", "k") == b"1"
        assert await replicas_short(durable, 1) == []
        with stopped(replica.process), pytest.raises(ReplicasBehind):
            await durable.set("k", "2")
        assert await durable.get("k") == b"2"
    finally:
        if durable is not None:
            await durable.aclose()
        for process in (sentinel, replica, master):
            process.stop()
