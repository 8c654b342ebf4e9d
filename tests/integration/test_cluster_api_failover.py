"""The API on a Redis Cluster while a primary fails over (contract section 10): reads of the runs that
live on that primary answer 503 with Retry-After while it is gone, never a 500, none past the client's
timeout, and answer again by themselves once its replica has taken over. The other primaries' runs are
refused for part of that time too: redis-py's cluster client drops every connection and reads the slot
map again after a connection fault, which the reads in flight on other nodes see (measured, printed).
A primary that hangs rather than dies is a 503 within a stated bound."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest
from redis.crc import key_slot

from service.core import domain
from service.store import keys
from service.store.connection import CLUSTER_ATTEMPTS, CLUSTER_SOCKET_TIMEOUT_S
from tests.conftest import StackFactory
from tests.redis_cluster import RedisCluster
from tests.redis_pair import stopped

pytestmark = pytest.mark.slow

TIMEOUT_S = 15.0


@dataclass
class Answer:
    at: float  # seconds after the kill
    status: int
    took_s: float
    retry_after: str | None


def _owner(cluster: RedisCluster, slot: int) -> int:
    for node in cluster.primaries_now():
        for first, last, (_, port, *_) in (
            (int(r[0]), int(r[1]), r[2]) for r in node.command("CLUSTER", "SLOTS")
        ):
            if first <= slot <= last:
                return int(port)
    raise AssertionError(f"slot {slot} has no owner")


async def test_reads_answer_503_during_a_failover_and_recover_by_themselves(make_stack: StackFactory) -> None:
    with RedisCluster() as cluster:
        seeds = ",".join(f"{h}:{p}" for h, p in cluster.seeds)
        stack = await make_stack(worker=False, HOOKBRIDGE_REDIS_URL="", HOOKBRIDGE_REDIS_CLUSTER_NODES=seeds)
        assert (await stack.api.get("/readyz")).status_code == 200
        ids = [domain.new_id("run") for _ in range(64)]
        # The primary of the first run's slot; a run's keys are in its shard (docs/shards.md), so the
        # other reader's runs live on the primaries that stay up.
        victim_port = _owner(cluster, key_slot(keys.run(ids[0]).encode()))
        victim = next(n for n in cluster.primaries_now() if n.port == victim_port)
        on_victim = [i for i in ids if _owner(cluster, key_slot(keys.run(i).encode())) == victim.port][:4]
        elsewhere = [i for i in ids if _owner(cluster, key_slot(keys.run(i).encode())) != victim.port][:4]
        assert on_victim
        kinds = ("victim", "elsewhere") if elsewhere else ("victim",)
        answers: dict[str, list[Answer]] = {"victim": [], "elsewhere": []}
        killed_at = time.monotonic()
        stop = asyncio.Event()

        async def read(kind: str, run_ids: list[str]) -> None:
            n = 0
            while not stop.is_set():
                run_id = run_ids[n % len(run_ids)]
                n += 1
                sent = time.monotonic()
                answer = await stack.api.get(f"/v1/runs/{run_id}", timeout=TIMEOUT_S)
                answers[kind].append(
                    Answer(
                        sent - killed_at,
                        answer.status_code,
                        time.monotonic() - sent,
                        answer.headers.get("retry-after"),
                    )
                )
                await asyncio.sleep(0.05)

        readers = [
            asyncio.create_task(read(k, v)) for k, v in (("victim", on_victim), ("elsewhere", elsewhere)) if v
        ]
        try:
            # Both readers answered before the kill: the figures have a before.
            deadline = time.monotonic() + 30
            while not all(len(answers[k]) >= 3 for k in kinds):
                assert time.monotonic() < deadline, "the readers got no answers before the kill"
                await asyncio.sleep(0.05)
            killed_at = time.monotonic()
            await asyncio.to_thread(cluster.fail_over, victim)
            failover_s = time.monotonic() - killed_at
            # Recovered by itself: the victim's runs answer (404: none exists) again.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                recent = [a.status for a in answers["victim"][-3:]]
                if len(recent) == 3 and recent == [404] * 3 and answers["victim"][-3].at > failover_s:
                    break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.gather(*readers)
        victim_answers = answers["victim"]
        statuses = {a.status for a in victim_answers}
        assert statuses <= {404, 503}, statuses  # never a 500
        unavailable = [a for a in victim_answers if a.status == 503]
        assert unavailable, "the killed primary's runs were never unavailable"
        assert all(a.retry_after and int(a.retry_after) >= 1 for a in unavailable)
        assert max(a.took_s for a in victim_answers) < TIMEOUT_S
        assert [a.status for a in victim_answers[-3:]] == [404] * 3
        assert {a.status for a in answers["elsewhere"]} <= {404, 503}
        print(
            f"failover {failover_s:.1f}s (kill to cluster_state:ok); 503s {len(unavailable)} of "
            f"{len(victim_answers)} reads of the killed primary's runs, from "
            f"{min(a.at for a in unavailable):.1f}s to {max(a.at for a in unavailable):.1f}s after the kill; "
            "slowest answer "
            f"{max(a.took_s for a in victim_answers):.2f}s; other primaries' runs: "
            f"{sum(a.status == 503 for a in answers['elsewhere'])} 503s of {len(answers['elsewhere'])}"
        )


async def test_a_hung_primary_is_a_503_within_the_bound_never_a_hang(make_stack: StackFactory) -> None:
    """A primary that stops answering (SIGSTOP: a hung process or a cut link) and is not failed over (a
    long node timeout): a read of a run on it answers 503 once the cluster client's attempts have each
    waited their socket timeout (service/store/connection.py), not later."""
    with RedisCluster(node_timeout_ms=60_000) as cluster:
        seeds = ",".join(f"{h}:{p}" for h, p in cluster.seeds)
        stack = await make_stack(worker=False, HOOKBRIDGE_REDIS_URL="", HOOKBRIDGE_REDIS_CLUSTER_NODES=seeds)
        victim = cluster.primaries_now()[0]
        run_id = next(
            i
            for i in (domain.new_id("run") for _ in range(256))
            if _owner(cluster, key_slot(keys.run(i).encode())) == victim.port
        )
        assert (await stack.api.get(f"/v1/runs/{run_id}")).status_code == 404
        bound_s = CLUSTER_ATTEMPTS * CLUSTER_SOCKET_TIMEOUT_S
        with stopped(victim.process):
            sent = time.monotonic()
            answer = await stack.api.get(f"/v1/runs/{run_id}", timeout=bound_s + 30)
            took = time.monotonic() - sent
        assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1, answer.text
        assert CLUSTER_SOCKET_TIMEOUT_S * 0.9 <= took <= bound_s + 3, took
        print(f"a hung primary: 503 after {took:.1f}s (bound {bound_s:.0f}s)")
        # Resumed: answered again.
        deadline = time.monotonic() + 20
        while (await stack.api.get(f"/v1/runs/{run_id}")).status_code != 404:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
