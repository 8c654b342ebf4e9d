"""The periodic jobs on a Redis Cluster and nothing else (contract section 10): arq, with every key it
touches in the slot of ``{arq:abort}`` (worker/queue.py), runs a job every second on its own 6-node
cluster, before and after the primary that owns that slot is killed and its replica takes over."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.crc import key_slot

from service.config import settings as settings_mod
from service.worker.queue import ARQ_FIXED_KEY, QUEUE_NAME, Periodic, Queue
from tests.conftest import eventually
from tests.redis_cluster import RedisCluster

pytestmark = pytest.mark.slow


def _keyslot(key: str) -> int:
    return int(key_slot(key.encode()))


async def test_a_periodic_job_runs_before_and_after_its_primary_fails_over() -> None:
    with RedisCluster() as cluster:
        seeds = ",".join(f"{h}:{p}" for h, p in cluster.seeds)
        settings = settings_mod.load({"HOOKBRIDGE_REDIS_CLUSTER_NODES": seeds}, vendors={})
        runs: list[float] = []

        async def tick(ctx: dict[str, Any]) -> None:
            runs.append(time.monotonic())

        stop = asyncio.Event()
        queue = Queue(settings, [Periodic("tick", tick, 1)])
        task = asyncio.create_task(queue.run(stop))
        try:
            await eventually(lambda: _at_least(runs, 2), timeout=30, what="two ticks before the failover")

            slot = _keyslot(ARQ_FIXED_KEY)
            primaries = cluster.primaries_now()
            (owner,) = [n for n in primaries if _owns(n.command("CLUSTER", "SLOTS"), n.port, slot)]
            # Every key arq wrote is in that one slot, on that primary.
            written = [k.decode() for k in owner.command("KEYS", "*")]
            arq_keys = [k for k in written if k.startswith(("arq:", QUEUE_NAME))]
            assert any(k.startswith("arq:in-progress:") for k in arq_keys), written
            assert {_keyslot(k) for k in arq_keys} == {slot}

            before = len(runs)
            killed_at = time.monotonic()
            cluster.fail_over(owner)
            await eventually(
                lambda: _at_least(runs, before + 2), timeout=60, what="two ticks after the failover"
            )
            after = [t for t in runs if t > killed_at]
            assert len(after) >= 2
            print(f"periodic job: first run {after[0] - killed_at:.1f}s after the primary was killed")
        finally:
            stop.set()
            await task


async def _at_least(runs: list[float], n: int) -> bool:
    return len(runs) >= n


def _owns(slots: Any, port: int, slot: int) -> bool:
    return any(int(r[0]) <= slot <= int(r[1]) and int(r[2][1]) == port for r in slots)
