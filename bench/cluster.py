"""One Redis against a Redis Cluster: polls per second, Redis CPU per poll, keys and memory per primary.

    python -m bench.cluster            # 5,000 runs in flight, a 20 s window on each topology
    python -m bench.cluster --quick    # 500 runs, 8 s windows: a smoke run

The same phase twice in one run, each on its own Redis, simulator, API and one worker process: the polls
phase of ``bench.throughput`` (``--inflight`` runs that last 120 s at the vendor, polled every ~0.27 s:
more than one worker makes, so the worker is saturated), first on one ``redis-server``, then on a
Redis Cluster of ``--primaries`` primaries with a replica each, formed on loopback as the tests form it
(``tests/redis_cluster.py``) and given to hookbridge as ``REDIS_CLUSTER_NODES``. For each: the worker's
polls per second over the window, the CPU of every process (each primary and replica on its own), keys
and ``used_memory`` per primary after the submits (less the empty store's), and from those the Redis
CPU per poll and the projected ceiling: a primary saturates at one core, so the topology tops out at
(one core) / (the busiest primary's CPU per poll), however many primaries it has.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import redis

from bench._common import (
    BenchResult,
    Cluster,
    Figure,
    cpu_note,
    machine,
    metric_sum,
    number,
    print_result,
    run_main,
    sampling,
    submit_runs,
    until,
)
from bench.throughput import _polls, polls_overrides
from tests.redis_cluster import RedisCluster

INFLIGHT, WINDOW_S, PRIMARIES = 5000, 20.0, 3


def _memory(client: redis.Redis) -> int:
    """``used_memory`` less the connections' buffers and the AOF buffer (as ``Cluster.redis_memory``), and
    less what a primary of a cluster holds whatever its data: the replication backlog and the cluster
    bus's links."""
    info = client.info("memory")
    fixed = ("mem_clients_normal", "mem_aof_buffer", "mem_replication_backlog", "mem_cluster_links")
    return int(info["used_memory"]) - sum(int(info.get(name, 0)) for name in fixed)


def _primaries(cluster: Cluster) -> list[redis.Redis]:
    """A plain client per primary (one for a single Redis)."""
    if cluster.redis_cluster is None:
        return [redis.Redis.from_url(cluster.redis.url)]
    nodes = cluster.redis_cluster.nodes[: cluster.redis_cluster.primaries]
    return [node.client() for node in nodes]


def _per_primary(cluster: Cluster) -> list[tuple[int, int]]:
    """(keys, memory) of each primary."""
    return [(int(c.dbsize()), _memory(c)) for c in _primaries(cluster)]


async def _phase(cluster: Cluster, n: int, window_s: float) -> dict[str, Any]:
    empty = _per_primary(cluster)
    await cluster.subscribe()
    async with sampling(cluster) as sampler:
        await submit_runs(cluster, n, 200)

        async def all_at_vendor() -> bool:
            metrics = await cluster.metrics()
            return metric_sum(metrics, "hookbridge_vendor_requests_total", kind="submit", code="202") >= n

        await until(all_at_vendor, 180, "every run submitted to the vendor")
        await asyncio.sleep(3.0)  # the submits' tail: the window is the steady polling alone
        m0, t0 = await cluster.metrics(), time.time()
        await asyncio.sleep(window_s)
        m1, t1 = await cluster.metrics(), time.time()
        sampler.take()
        usage = sampler.usage(t0, t1)
    loaded = _per_primary(cluster)
    rate = (_polls(m1) - _polls(m0)) / (t1 - t0)
    primaries = {k: v for k, v in usage.items() if k == "redis" or k.startswith("redis primary")}
    replicas = {k: v for k, v in usage.items() if k.startswith("redis replica")}
    return {
        "polls_per_s": rate,
        "cpu": usage,
        "primary_cpu": list(primaries.values()),
        "replica_cpu": sum(replicas.values()),
        "keys": [k1 - k0 for (k1, _), (k0, _) in zip(loaded, empty, strict=True)],
        "memory": [m1 - m0 for (_, m1), (_, m0) in zip(loaded, empty, strict=True)],
        "window_s": t1 - t0,
    }


def _figures(result: BenchResult, label: str, n: int, phase: dict[str, Any]) -> None:
    rate = phase["polls_per_s"]
    primary_cpu: list[float] = phase["primary_cpu"]
    keys: list[int] = phase["keys"]
    busiest = max(primary_cpu) if primary_cpu else 0.0
    worker = sum(v for k, v in phase["cpu"].items() if k.startswith("worker"))
    total_keys = sum(keys) or 1
    result.add(
        Figure(f"{label}: vendor polls per second, one worker process", rate, "polls/s"),
        Figure(f"{label}: worker CPU per poll", worker / rate * 1e6 if rate else None, "us"),
        Figure(
            f"{label}: Redis CPU per poll, the primaries together",
            sum(primary_cpu) / rate * 1e6 if rate else None,
            "us",
            note=f"each primary: {', '.join(f'{c * 100:.1f} %' for c in primary_cpu)} of a core; "
            f"the replicas together {phase['replica_cpu'] * 100:.1f} %",
        ),
        Figure(
            f"{label}: projected ceiling, one core on the busiest primary",
            rate / busiest if busiest else None,
            "polls/s",
            note=f"{number(rate)} polls/s / {busiest:.3f} of a core",
        ),
        Figure(
            f"{label}: keys per primary after {n:,} runs of one client",
            max(keys) / total_keys * 100,
            "% on the fullest",
            note=" / ".join(f"{k:,}" for k in keys),
        ),
        Figure(
            f"{label}: Redis memory per run in flight, the primaries together",
            sum(phase["memory"]) / n,
            "bytes",
            note="per primary: " + " / ".join(f"{m / n:,.0f}" for m in phase["memory"]),
        ),
    )
    result.notes.append(f"{label}: CPU over the {phase['window_s']:.1f} s window: {cpu_note(phase['cpu'])}.")


async def run(
    quick: bool = False, n: int | None = None, window_s: float | None = None, primaries: int = PRIMARIES
) -> BenchResult:
    n = n or (500 if quick else INFLIGHT)
    window_s = window_s or (8.0 if quick else WINDOW_S)
    started = time.monotonic()
    result = BenchResult("cluster", "python -m bench.cluster", "python -m bench.cluster --quick")
    result.data["machine"] = machine()
    overrides = polls_overrides()
    async with Cluster("cluster-one-node", overrides) as single:
        one = await _phase(single, n, window_s)
    with RedisCluster(primaries=primaries, replicas=1) as nodes:
        async with Cluster("cluster-n-primaries", overrides, redis_cluster=nodes) as on_cluster:
            many = await _phase(on_cluster, n, window_s)
    _figures(result, "one Redis", n, one)
    _figures(result, f"a cluster of {primaries} primaries", n, many)
    result.data.update({"inflight": n, "primaries": primaries, "one_node": one, "cluster": many})
    result.elapsed_s = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--inflight", type=int, default=INFLIGHT)
    parser.add_argument("--window", type=float, default=WINDOW_S)
    parser.add_argument("--primaries", type=int, default=PRIMARIES)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n, window = (None, None) if args.quick else (args.inflight, args.window)
    print_result(run_main(run(args.quick, n, window, args.primaries)), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
