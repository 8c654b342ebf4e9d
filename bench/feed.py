"""The event feed's latency: from an event's emission to the return of a long-poll waiting for it.

    python -m bench.feed                  # 300 events, with 1 and with 16 waiting readers
    python -m bench.feed --quick          # 50 events

One ``hookbridge api`` process on Redis (AOF everysec); no worker: the events are ``run.canceled``, emitted
by ``POST /v1/runs/{id}/cancel`` (the same Lua step as any other event). Readers long-poll
``GET /v1/events?wait=30`` with their iterators, each in a loop, while events are emitted one every
``--interval`` ms. The latency of one event for one reader is the time the long-poll returned in this
process less the event's ``timestamp`` (taken when the state change is built, just before the Lua step;
millisecond resolution); each reader sees every event.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import datetime
from typing import Any

from bench._common import (
    AUTH,
    BenchResult,
    Cluster,
    Figure,
    percentile,
    print_result,
    run_main,
    url_run,
)


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


async def _reader(cluster: Cluster, want: int, latencies: list[float], ready: asyncio.Event) -> None:
    url = f"{cluster.api_url}/v1/events"
    iterator, done = "", False
    while not done:  # to the feed's end: the events of an earlier phase are not this one's
        params = {"limit": "200", **({"iterator": iterator} if iterator else {})}
        async with cluster.http.get(url, params=params, headers=AUTH) as response:
            page = await response.json()
        iterator, done = page["iterator"], page["done"]
    ready.set()
    seen = 0
    while seen < want:
        params = {"iterator": iterator, "wait": "30", "type": "run.canceled", "limit": "200"}
        async with cluster.http.get(url, params=params, headers=AUTH) as response:
            page = await response.json()
        now = time.time()
        for event in page["data"]:
            latencies.append(now - _epoch(event["timestamp"]))
        seen += len(page["data"])
        iterator = page["iterator"]


async def _emit(cluster: Cluster, n: int, interval_s: float) -> None:
    runs = f"{cluster.api_url}/v1/runs"
    for i in range(n):
        async with cluster.http.post(runs, json=url_run(i, tag="feed"), headers=AUTH) as response:
            run_id = (await response.json())["id"]
        await asyncio.sleep(interval_s)  # the readers are waiting again when the event comes
        async with cluster.http.post(f"{runs}/{run_id}/cancel", headers=AUTH) as response:
            assert response.status == 200, await response.text()


async def _phase(cluster: Cluster, readers: int, n: int, interval_s: float) -> dict[str, Any]:
    latencies: list[float] = []
    ready = [asyncio.Event() for _ in range(readers)]
    tasks = [asyncio.create_task(_reader(cluster, n, latencies, r)) for r in ready]
    await asyncio.gather(*(r.wait() for r in ready))
    await _emit(cluster, n, interval_s)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    return {
        "readers": readers,
        "events": n,
        "samples": len(latencies),
        "p50_ms": (percentile(latencies, 0.5) or 0) * 1000,
        "p99_ms": (percentile(latencies, 0.99) or 0) * 1000,
        "max_ms": max(latencies) * 1000,
    }


async def run(quick: bool = False, events: int | None = None, interval_ms: float = 50) -> BenchResult:
    n = events or (50 if quick else 300)
    started = time.monotonic()
    result = BenchResult(
        name="feed", command="python -m bench.feed", quick_command="python -m bench.feed --quick"
    )
    overrides = {"MAX_STREAMS_PER_CLIENT": "64"}
    async with Cluster("feed", overrides, worker=False, simulator=False, receiver=False) as cluster:
        phases = [await _phase(cluster, readers, n, interval_ms / 1000) for readers in (1, 16)]
    for phase in phases:
        label = f"{phase['readers']} waiting reader{'s' if phase['readers'] > 1 else ''}"
        result.add(
            Figure(
                f"feed latency, event emitted → long-poll returns, {label}: p99",
                phase["p99_ms"],
                "ms",
                note=(
                    f"p50 {phase['p50_ms']:.1f} ms, max {phase['max_ms']:.1f} ms, {phase['samples']} samples"
                ),
            )
        )
    result.notes.append(
        f"{n} run.canceled events, one every {interval_ms:g} ms, each read by every waiting reader "
        "(GET /v1/events?wait=30); the event's timestamp has millisecond resolution."
    )
    result.data.update(phases=phases)
    result.elapsed_s = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="50 events")
    parser.add_argument("--events", type=int)
    parser.add_argument("--interval", type=float, default=50, help="ms between events")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print_result(run_main(run(args.quick, args.events, args.interval)), args.json)


if __name__ == "__main__":
    main()
