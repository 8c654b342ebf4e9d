"""A primary's failover with runs in flight (contract section 10, issue 26): on a 6-node cluster of its
own, the API, two workers and the simulator run as processes; runs are submitted without pause; a worker
and a primary are SIGKILLed mid-way and the primary's replica takes over. Every run that got a 202 must
end and be called back; the API answers 503 with Retry-After meanwhile (never a 500, never a hang past
the client's timeout) and recovers by itself.

With ``REDIS_WAIT_REPLICAS=1`` no acknowledged run can be lost (WAIT: the replica had it before the 202).
Without it, replication is asynchronous and a 202 given in the last moments before the kill may be lost
with the primary: the test counts such runs and prints them rather than failing, as the contract allows.
It prints its figures (failover time, 503s, runs lost, submit latency) for the issue's report.
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.chaos import KEY, ChaosConfig, Proc, environment
from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.store import keys
from tests.redis_cluster import RedisCluster

pytestmark = pytest.mark.slow

SUBMIT_FOR_S = 14.0
KILL_AT_S = 5.0
SUBMIT_PER_S = 8.0
CLIENT_TIMEOUT_S = 15.0
TERMINAL = ("succeeded", "failed", "canceled")


@dataclass
class Figures:
    wait_replicas: int
    accepted: list[str] = field(default_factory=list)
    answers: Counter[int] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    killed_at: float = 0.0  # time.monotonic() of the primary's kill
    unavailable_at: list[float] = field(default_factory=list)  # when each 503'd submit was sent
    refused_outside: list[float] = field(default_factory=list)  # 503s sent outside the window
    hung: int = 0
    failover_s: float = 0.0
    replica_back_s: float = 0.0
    lost: list[str] = field(default_factory=list)
    not_called_back: list[str] = field(default_factory=list)

    def report(self) -> str:
        lat = sorted(self.latencies_ms)

        def p(q: float) -> float:
            return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0.0

        after = [t - self.killed_at for t in self.unavailable_at]
        window = f"sent {min(after):.1f}..{max(after):.1f}s after the kill" if after else "none"
        return (
            f"WAIT_REPLICAS={self.wait_replicas}: accepted {len(self.accepted)} runs; "
            f"answers {dict(self.answers)}; 503s {self.answers[503]} ({window}); hung {self.hung}; "
            f"failover {self.failover_s:.1f}s (kill to cluster_state:ok), "
            f"replica back {self.replica_back_s:.1f}s; runs lost {len(self.lost)}; "
            f"not called back {len(self.not_called_back)}; "
            f"submit latency p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, max {max(lat, default=0):.0f} ms"
        )


@pytest.mark.parametrize("wait_replicas", [0, 1])
async def test_every_accepted_run_ends_and_is_called_back_across_a_failover(wait_replicas: int) -> None:
    figures = await failover(wait_replicas)
    print(figures.report())
    assert figures.answers[500] == 0 and figures.hung == 0
    assert set(figures.answers) <= {202, 503}, figures.answers
    # A submit is refused only while its shard has no primary (kill to failover) or, with WAIT, no
    # replica either (kill to the dead node's return as a replica; one replica per primary here): every
    # submit sent outside that window, give or take one request's time, got its 202.
    assert figures.refused_outside == [], figures.refused_outside
    assert len(figures.accepted) >= SUBMIT_FOR_S * SUBMIT_PER_S * 0.25
    if wait_replicas:
        assert figures.lost == [] and figures.not_called_back == []
    else:
        # Asynchronous replication: what a failover may lose is at most what was acknowledged in the
        # last moments before the kill. Every run that exists ended and was called back.
        assert figures.not_called_back == []


async def failover(wait_replicas: int) -> Figures:
    figures = Figures(wait_replicas)
    logdir = Path(tempfile.mkdtemp(prefix="hb-failover-"))
    called_back: set[str] = set()
    servers = Servers()
    procs: list[Proc] = []
    with RedisCluster() as cluster:
        sim_port, api_port, receiver_port = free_port(), free_port(), free_port()
        env = environment("", f"http://127.0.0.1:{sim_port}", ChaosConfig(sim_duration="1,2"))
        del env["HOOKBRIDGE_REDIS_URL"]
        env["HOOKBRIDGE_REDIS_CLUSTER_NODES"] = ",".join(f"{h}:{p}" for h, p in cluster.seeds)
        env["HOOKBRIDGE_SIM_RATE_5XX"] = "0"
        env["HOOKBRIDGE_REDIS_WAIT_REPLICAS"] = str(wait_replicas)
        env["HOOKBRIDGE_REDIS_WAIT_TIMEOUT_MS"] = "1000"

        async def hook(request: Request) -> Response:
            event = await request.json()
            if event["type"] in ("run.succeeded", "run.failed", "run.canceled"):
                called_back.add(event["data"]["run"]["id"])
            return Response(status_code=204)

        await servers.start(Starlette(routes=[Route("/hooks", hook, methods=["POST"])]), receiver_port)
        try:
            procs.append(Proc("simulator", ["simulator", "--port", str(sim_port)], env, logdir))
            procs.append(Proc("api", ["api", "--host", "127.0.0.1", "--port", str(api_port)], env, logdir))
            workers = [Proc(f"worker-{i}", ["worker"], env, logdir) for i in range(2)]
            procs += workers
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{api_port}",
                timeout=CLIENT_TIMEOUT_S,
                headers={"Authorization": f"Bearer {KEY}"},
            ) as client:
                await _until(lambda: _ready(client), 60, "the API ready")
                hooks = {"url": f"http://127.0.0.1:{receiver_port}/hooks", "event_types": ["run.*"]}
                subscribed = await _retrying(client, "POST", "/v1/subscriptions", json=hooks)
                assert subscribed.status_code == 201, subscribed.text

                started = time.monotonic()
                submitting = asyncio.create_task(_submit(client, figures, started))
                # The kill comes with runs in flight: once the first seconds' runs have their 202s.
                in_flight = int(KILL_AT_S * SUBMIT_PER_S * 0.5)

                async def runs_in_flight() -> bool:
                    return len(figures.accepted) >= in_flight

                await _until(runs_in_flight, 60, f"{in_flight} runs accepted")
                workers[0].kill()  # a worker dies with runs leased: their leases hand them back
                # The primary that holds the runs in flight (the first accepted run's slot).
                primary = cluster.primary_of(keys.run(figures.accepted[0]))
                killed = figures.killed_at = time.monotonic()
                await asyncio.to_thread(cluster.fail_over, primary)
                figures.failover_s = time.monotonic() - killed
                workers[0] = Proc("worker-0b", ["worker"], env, logdir)
                procs.append(workers[0])
                # The dead primary comes back (a pod restarted with its volume) and rejoins as a replica:
                # until then, with WAIT, its shards' promoted primary has no replica to wait for.
                await asyncio.to_thread(cluster.restart, primary)
                figures.replica_back_s = time.monotonic() - killed
                await submitting
                # Refusals are expected from the kill (less one request's time: a submit sent just
                # before it may be answered after) until the shard can acknowledge again.
                window_end = killed + (figures.replica_back_s if wait_replicas else figures.failover_s)
                figures.refused_outside = [
                    t - killed for t in figures.unavailable_at if not killed - 2.0 <= t <= window_end + 2.0
                ]

                async def every_run_settled() -> bool:
                    pending = [r for r in figures.accepted if r not in called_back]
                    return not pending

                try:
                    await _until(every_run_settled, 120, "every accepted run called back")
                except TimeoutError:
                    pass
                for run_id in figures.accepted:
                    answer = await _retrying(client, "GET", f"/v1/runs/{run_id}")
                    if answer.status_code == 404:
                        figures.lost.append(run_id)
                    elif run_id not in called_back or answer.json()["status"] not in TERMINAL:
                        figures.not_called_back.append(run_id)
        finally:
            await servers.stop()
            for proc in procs:
                proc.stop(timeout=15)
    if figures.not_called_back or figures.lost:
        print(f"logs kept in {logdir}")
    return figures


async def _submit(client: httpx.AsyncClient, figures: Figures, started: float) -> None:
    """One submit every 1/SUBMIT_PER_S s, each on its own (a slow one does not hold the next back); a 503
    is counted and not retried here: the next submit is a new run."""

    async def one(i: int) -> None:
        body: dict[str, Any] = {
            "vendor": "nutrient",
            "document": {
                "content_base64": base64.b64encode(f"%PDF failover {i}".encode()).decode(),
                "filename": f"failover-{i}.pdf",
                "media_type": "application/pdf",
            },
        }
        sent = time.monotonic()
        try:
            answer = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": f"fo-{i}"})
        except httpx.TimeoutException:
            figures.hung += 1
            return
        except httpx.TransportError:
            figures.answers[0] += 1
            return
        figures.answers[answer.status_code] += 1
        if answer.status_code == 202:
            figures.accepted.append(answer.json()["id"])
            figures.latencies_ms.append((time.monotonic() - sent) * 1000)
        elif answer.status_code == 503:
            assert int(answer.headers["retry-after"]) >= 1
            figures.unavailable_at.append(sent)

    tasks = []
    i = 0
    while time.monotonic() - started < SUBMIT_FOR_S:
        tasks.append(asyncio.create_task(one(i)))
        i += 1
        await asyncio.sleep(1 / SUBMIT_PER_S)
    await asyncio.gather(*tasks)


async def _retrying(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
    """What a well-behaved client does: retries 503 and connection faults, for a while."""
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = await client.request(method, url, **kw)
            if answer.status_code != 503 or time.monotonic() > deadline:
                return answer
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def _ready(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/readyz")).status_code == 200
    except httpx.TransportError:
        return False


async def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{what} not reached within {timeout}s")
