"""Throughput: runs per second end to end, vendor polls per second, and the floors under them.

    python -m bench.throughput            # 2,000 runs end to end, 5,000 runs in flight polled every ~0.27 s
    python -m bench.throughput --quick    # a smoke run, well under a minute

Phases, each on its own Redis, simulator, one ``hookbridge api`` and one ``hookbridge worker``:

1. **End to end.** The simulator finishes every run at once (``SIM_DURATION_S=0,0``; Nutrient polled
   after 10 ms); a client submits ``--runs`` runs at ``--concurrency`` through the API; a receiver in
   this process takes the callbacks (the subscription's default: terminal events). Counted: runs from the
   first submit to the last callback; runs the worker finished per second (its ``hookbridge_runs_total``,
   from 10 % to 90 % of them); callbacks per second while the worker was still finishing runs and after.
   Then the same again with ``SUBSCRIPTION_MAX_IN_FLIGHT=100`` instead of the default 10 (not with
   ``--quick``).
2. **Floors, on the same redis-server**: arq's rate for empty jobs (enqueue N no-op jobs with
   ``create_pool().enqueue_job``, then an ``arq.worker.Worker`` in burst mode, ``max_jobs=50``,
   ``poll_delay=0``, in this process) and ``redis-benchmark -q -t set,get -n 100000``.
3. **Polls per second.** First the worker idle, nothing in flight, for 10 s: its CPU and Redis's (its
   looks at every shard's head once per ``WORKER_IDLE_S``, its timers). Then ``--inflight`` runs that
   last 120 s at the vendor, polled every ``--poll-interval`` (``POLL_INITIAL_S = POLL_MAX_S = 250ms``
   by default, +0-15 % jitter: about ``inflight / (1.075 * interval)`` polls are due each second,
   18,605 for 5,000 runs: more than one worker process can make, and more than the raw client's floor,
   so that the worker is saturated and its rate is its capacity, not the offered load); the worker's
   ``hookbridge_vendor_requests_total{kind="poll"}`` is read every second over a ``--window``. The CPU
   of every process over the same window says which one is the limit. Saturated, the worker falls
   behind its schedule: the poll lateness of this phase grows over the window and says nothing of the
   lateness goal (``bench.scale`` measures that one).
4. **The raw-client floor, on the same simulator and runs.** The worker is stopped; aiohttp alone (one
   ``ClientSession``, the worker's connection limit, ``WORKER_CONCURRENCY`` requests in flight) GETs the
   same runs' Nutrient run endpoint (``/extraction/runs/{id}``) in a closed loop, in this process, for
   ``--floor-window`` seconds. The worker's polls per second are given as a share of it: what a poll costs
   hookbridge beyond its HTTP request.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import shutil
import subprocess
import time
from typing import Any

import aiohttp

from bench._common import (
    BenchResult,
    Cluster,
    CpuQuota,
    Figure,
    cpu_note,
    histogram,
    histogram_delta,
    metric_sum,
    number,
    percentile,
    print_result,
    quantile,
    run_main,
    sampling,
    submit_runs,
    until,
)

POLLS_TARGET = 1000.0
# The polls phase's interval between two polls of a run (POLL_INITIAL_S = POLL_MAX_S): short enough that
# its runs offer more polls than one worker process can make (issue 16: the share of the floor is then a
# ratio of capacities). The worker adds 0-15 % jitter to it.
POLL_INTERVAL_S = 0.25
JITTER_MEAN = 1.075
# The share of the raw-client floor that one worker process should poll at (issue 30; issue 16 asked 50 %).
FLOOR_SHARE_TARGET = 0.8
# How long the polls phase watches the worker with nothing in flight, before it submits.
IDLE_WINDOW_S = 10.0
# The worker's defaults, which the raw client copies: WORKER_CONCURRENCY and the vendor pool's limit.
WORKER_CONCURRENCY = 500
VENDOR_CONNECTIONS = 200


async def noop(ctx: dict[str, Any]) -> None:
    """arq's empty job."""


async def end_to_end(n: int, concurrency: int, arq_jobs: int, result: BenchResult, quick: bool) -> None:
    overrides = {
        "SIM_DURATION_S": "0,0",
        "NUTRIENT_POLL_INITIAL_S": "10ms",
        "NUTRIENT_POLL_MAX_S": "100ms",
    }
    async with Cluster("throughput", overrides) as cluster:
        e2e = await _end_to_end(cluster, n, concurrency)
        label = "SUBSCRIPTION_MAX_IN_FLIGHT=10 (default)"
        result.add(
            Figure(
                "runs per second end to end, first submit → last callback",
                e2e["overall_per_s"],
                "runs/s",
                note=f"{n} runs, client concurrency {concurrency}",
            ),
            Figure(
                "runs finished per second by the worker (submit, poll, result, finish), steady part",
                e2e["finished_per_s"],
                "runs/s",
            ),
            Figure(
                "callbacks per second while the worker was still finishing runs",
                e2e["callbacks_during_per_s"],
                "callbacks/s",
                note=label,
            ),
            Figure(
                "callbacks per second once every run had finished",
                e2e["callbacks_after_per_s"],
                "callbacks/s",
            ),
            Figure("submits accepted per second while the worker ran", e2e["submit_per_s"], "runs/s"),
            Figure(
                "submit → callback received, p50",
                e2e["latency_p50"],
                "s",
                note=f"p99 {e2e['latency_p99']:.2f} s; runs queue while the API outruns the worker",
            ),
        )
        result.notes.append(
            f"End to end: {e2e['succeeded']}/{n} runs succeeded and were called back in "
            f"{e2e['elapsed_s']:.1f} s. CPU while the worker finished runs (share of one core): "
            f"{cpu_note(e2e['cpu'])}."
        )
        result.data["e2e"] = e2e
        # The floors, on the same redis-server (db 1 for arq, so hookbridge's keys are not in the way).
        arq = await arq_floor(cluster.redis.port, arq_jobs)
        result.add(
            Figure(
                "floor: arq enqueues per second (one process, one at a time)", arq["enqueue_per_s"], "jobs/s"
            ),
            Figure(
                "floor: arq empty jobs per second (one worker, max_jobs=50, poll_delay=0, burst)",
                arq["jobs_per_s"],
                "jobs/s",
                note=f"{arq_jobs} jobs",
            ),
        )
        result.data["arq"] = arq
        bench = redis_benchmark(cluster.redis.port)
        if bench is None:
            result.notes.append("redis-benchmark is not on PATH: the Redis floor was skipped.")
        else:
            result.add(
                Figure("floor: redis-benchmark SET (AOF everysec, no pipelining)", bench.get("SET"), "ops/s"),
                Figure("floor: redis-benchmark GET", bench.get("GET"), "ops/s"),
            )
            result.data["redis_benchmark"] = bench
    if quick:
        return
    # The same with a wider per-subscription window: what the default holds back.
    async with Cluster("throughput-wide", {**overrides, "SUBSCRIPTION_MAX_IN_FLIGHT": "100"}) as cluster:
        wide = await _end_to_end(cluster, n, concurrency)
    result.add(
        Figure(
            "runs per second end to end, with SUBSCRIPTION_MAX_IN_FLIGHT=100",
            wide["overall_per_s"],
            "runs/s",
        ),
        Figure(
            "callbacks per second while the worker was still finishing runs, the same",
            wide["callbacks_during_per_s"],
            "callbacks/s",
        ),
    )
    result.data["e2e_wide"] = wide


async def _end_to_end(cluster: Cluster, n: int, concurrency: int) -> dict[str, Any]:
    """Submits ``n`` runs and waits for their callbacks; a timeline of what the worker finished and what the
    receiver got says which of the two was the limit."""
    await cluster.subscribe()
    cluster.receiver.expect_terminal = n
    timeline: list[dict[str, float]] = []

    async def probe() -> dict[str, Any]:
        metrics = await cluster.metrics()
        row = {
            "t": time.time(),
            "finished": metric_sum(metrics, "hookbridge_runs_total"),
            "called_back": float(cluster.receiver.terminal_count),
        }
        timeline.append(row)
        return row

    async with sampling(cluster, period_s=0.25) as sampler:
        sampler.probe(probe)
        started = time.time()
        submitted = await submit_runs(cluster, n, concurrency)
        submit_done = time.time()
        await asyncio.wait_for(cluster.receiver.terminal.wait(), timeout=120 + n / 10)
        finished = time.time()
    callbacks = cluster.receiver.terminal_callbacks()
    done = sorted(c.received for c in callbacks)
    # When the worker had finished 10 %, 90 % and all of the runs (from its own counter).
    t10 = next((r["t"] for r in timeline if r["finished"] >= 0.1 * n), started)
    t90 = next((r["t"] for r in timeline if r["finished"] >= 0.9 * n), finished)
    all_done = next((r["t"] for r in timeline if r["finished"] >= n), finished)
    first_cb = done[0] if done else finished
    during = sum(1 for t in done if t <= all_done)
    by_run = {c.run_id: c.received for c in callbacks}
    latency = [by_run[r] - t for r, t in submitted if r in by_run]
    return {
        "runs": n,
        "concurrency": concurrency,
        "overall_per_s": n / (done[-1] - started) if done else None,
        "finished_per_s": 0.8 * n / (t90 - t10) if t90 > t10 else None,
        "callbacks_during_per_s": during / (all_done - first_cb) if all_done > first_cb else None,
        "callbacks_after_per_s": (n - during) / (done[-1] - all_done)
        if done and done[-1] > all_done
        else None,
        "submit_per_s": n / (submit_done - started),
        "latency_p50": percentile(latency, 0.5),
        "latency_p99": percentile(latency, 0.99) or 0.0,
        "succeeded": sum(1 for c in callbacks if c.type == "run.succeeded"),
        "cpu": sampler.usage(started, all_done),
        "elapsed_s": finished - started,
        "timeline": [
            {"t": r["t"] - started, "finished": r["finished"], "called_back": r["called_back"]}
            for r in timeline
        ],
        "submitted": [t - started for _, t in submitted],
    }


async def arq_floor(port: int, jobs: int) -> dict[str, float]:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    settings = RedisSettings(host="127.0.0.1", port=port, database=1)
    pool = await create_pool(settings)
    try:
        t0 = time.perf_counter()
        for _ in range(jobs):
            await pool.enqueue_job("noop")
        enqueue_s = time.perf_counter() - t0
        worker = Worker(
            functions=[noop],
            redis_pool=pool,
            burst=True,
            max_jobs=50,
            poll_delay=0,
            handle_signals=False,
            log_results=False,
        )
        t0 = time.perf_counter()
        await worker.main()
        run_s = time.perf_counter() - t0
        complete = worker.jobs_complete
        await worker.close()
        await pool.flushdb()
    finally:
        await pool.aclose()
    return {"jobs": float(jobs), "enqueue_per_s": jobs / enqueue_s, "jobs_per_s": complete / run_s}


def redis_benchmark(port: int) -> dict[str, float] | None:
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    out = subprocess.run(
        [binary, "-q", "-t", "set,get", "-n", "100000", "-p", str(port)],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    rates: dict[str, float] = {}
    for line in re.split(r"[\r\n]", out):
        match = re.match(r"^(SET|GET): ([\d.]+) requests per second", line.strip())
        if match:
            rates[match.group(1)] = float(match.group(2))
    return rates


async def raw_client_floor(sim_url: str, vendor_ids: list[str], seconds: float) -> dict[str, float]:
    """aiohttp alone polling the simulator's Nutrient run endpoint: ``WORKER_CONCURRENCY`` loops, each
    GETting the next run in turn, for ``seconds`` after a one-second warm-up."""
    urls = [f"{sim_url}/nutrient/extraction/runs/{vid}" for vid in vendor_ids]
    headers = {"Authorization": "Bearer sim-nutrient-key"}
    counts = {"ok": 0, "errors": 0}
    turn = itertools.count()
    counting = False
    stop = time.monotonic() + 1.0 + seconds

    async def loop(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < stop:
            url = urls[next(turn) % len(urls)]
            try:
                async with session.get(url, headers=headers) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            if counting:
                counts["ok" if ok else "errors"] += 1

    connector = aiohttp.TCPConnector(limit=VENDOR_CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:
        loops = [asyncio.create_task(loop(session)) for _ in range(WORKER_CONCURRENCY)]
        await asyncio.sleep(1.0)  # warm-up: connections opened
        counting, t0 = True, time.monotonic()
        await asyncio.gather(*loops)
        elapsed = time.monotonic() - t0
    return {"polls_per_s": counts["ok"] / elapsed, "errors": float(counts["errors"]), "seconds": elapsed}


async def polls(
    n: int,
    concurrency: int,
    window_s: float,
    result: BenchResult,
    floor_s: float = 10.0,
    processes: int = 1,
    interval_s: float = POLL_INTERVAL_S,
    worker_cores: float | None = None,
) -> None:
    overrides = {
        **polls_overrides(interval_s),
        "WORKER_PROCESSES": str(processes),
    }
    processes_note = f"{processes} worker processes (WORKER_PROCESSES)" if processes > 1 else ""
    workers = "one worker process" if processes == 1 else f"{processes} worker processes"
    quota = CpuQuota(worker_cores) if worker_cores else None
    if worker_cores:
        workers += f" at most {worker_cores:g} of a core each"
        processes_note = ", ".join(
            filter(None, [processes_note, "each in a cgroup of its own (--worker-cores)"])
        )
    try:
        async with Cluster("polls", overrides) as cluster:
            if quota is not None:
                quota.limit(cluster.worker_pids())
            await _polls_phase(
                cluster,
                n,
                concurrency,
                window_s,
                result,
                floor_s,
                processes,
                interval_s,
                workers,
                processes_note,
                worker_cores,
            )
    finally:
        if quota is not None:
            quota.close()


async def _polls_phase(
    cluster: Cluster,
    n: int,
    concurrency: int,
    window_s: float,
    result: BenchResult,
    floor_s: float,
    processes: int,
    interval_s: float,
    workers: str,
    processes_note: str,
    worker_cores: float | None,
) -> None:
    await cluster.subscribe()
    async with sampling(cluster) as sampler:
        # The worker with nothing in flight: what it and Redis spend on its looks at every shard's head
        # (each vendor's due sets and the deliveries', once per WORKER_IDLE_S) and its timers.
        idle0 = time.time()
        await asyncio.sleep(IDLE_WINDOW_S)
        sampler.take()
        idle = sampler.usage(idle0, time.time())
        t_start = time.time()
        await submit_runs(cluster, n, concurrency)
        submitted = time.time()

        async def all_at_vendor() -> bool:
            metrics = await cluster.metrics()
            return metric_sum(metrics, "hookbridge_vendor_requests_total", kind="submit", code="202") >= n

        at_vendor = await until(all_at_vendor, 120, "every run submitted to the vendor")
        await asyncio.sleep(3.0)
        m0, t0 = await cluster.metrics(), time.time()
        # Second by second: the rate moves with what the polls find (queued, running with progress)
        # and with the sweeper's passes.
        slices: list[tuple[float, float]] = [(t0, _polls(m0))]
        while time.time() < t0 + window_s:
            await asyncio.sleep(1.0)
            slices.append((time.time(), _polls(await cluster.metrics())))
        m1, t1 = await cluster.metrics(), time.time()
        sampler.take()  # the window's last CPU reading, while the worker still runs
        # The floor: the worker stops, and a bare client polls the same runs on the same simulator.
        cluster.procs["worker"].stop()
        vendor_ids = [r["id"] for r in await cluster.sim_runs("nutrient")]
        f0 = time.time()
        floor = await raw_client_floor(cluster.sim_url, vendor_ids, floor_s)
        floor_usage = sampler.usage(f0, time.time())
    rate = (_polls(m1) - _polls(m0)) / (t1 - t0)
    per_second = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(slices)]
    offered = n / (JITTER_MEAN * interval_s)
    usage = sampler.usage(t0, t1)
    worker_cpu = sum(v for k, v in usage.items() if k.startswith("worker"))
    late = histogram_delta(
        histogram(m1, "hookbridge_poll_lateness_seconds"),
        histogram(m0, "hookbridge_poll_lateness_seconds"),
    )
    p50, _ = quantile(late, 0.5)
    p99, beyond = quantile(late, 0.99)
    limit = _limit(usage, worker_cores or 1.0)
    result.add(
        Figure(
            f"vendor polls per second, {workers}",
            rate,
            "polls/s",
            target="≥ 1,000 polls/s" if processes == 1 else "",
            # With fewer polls due than the target (a quick run), the figure says nothing of it.
            goal=POLLS_TARGET if offered >= POLLS_TARGET and processes == 1 else None,
            note=f"{n} runs in flight, each due every ~{JITTER_MEAN * interval_s:.3g} s: "
            f"{offered:,.0f} polls/s offered",
        ),
        Figure(
            "polls per second, second by second: 10th / 90th percentile",
            percentile(per_second, 0.1),
            "polls/s",
            note=f"90th {number(percentile(per_second, 0.9) or 0)} polls/s",
        ),
        Figure(
            "poll lateness during that window, p50 / p99",
            p50,
            "s",
            note=f"p99 {'>' if beyond else ''}{p99 or 0:.2f} s"
            + ("; more polls offered than made: the worker falls behind" if offered > 1.1 * rate else ""),
        ),
        Figure("worker CPU during that window", worker_cpu * 100, "% of a core", note=processes_note),
        Figure(
            f"{workers} idle (nothing in flight): its CPU",
            sum(v for k, v in idle.items() if k.startswith("worker")) * 100,
            "% of a core",
            note=f"Redis's for it {idle.get('redis', 0) * 100:.2f} % over {IDLE_WINDOW_S:g} s, before the "
            "runs were submitted",
        ),
        Figure("simulator CPU during that window", usage.get("simulator", 0) * 100, "% of a core"),
        Figure(
            "floor: raw aiohttp client, the same runs' Nutrient run endpoint",
            floor["polls_per_s"],
            "polls/s",
            note=f"{WORKER_CONCURRENCY} in flight, {VENDOR_CONNECTIONS} connections, "
            f"{floor['errors']:.0f} errors; CPU: bench (the client) "
            f"{floor_usage.get('bench (client, receiver)', 0) * 100:.0f} %, simulator "
            f"{floor_usage.get('simulator', 0) * 100:.0f} %",
        ),
        Figure(
            "worker CPU per poll",
            worker_cpu / rate * 1e6 if rate else None,
            "us",
            note="on a loaded machine the robust figure: a process's share of a core moves, its cost "
            "per request much less",
        ),
        Figure(
            "raw client CPU per request (the floor's)",
            floor_usage.get("bench (client, receiver)", 0) / floor["polls_per_s"] * 1e6
            if floor["polls_per_s"]
            else None,
            "us",
        ),
        Figure(
            f"vendor polls per second, {workers}, as a share of the raw-client floor",
            rate / floor["polls_per_s"] * 100 if floor["polls_per_s"] else None,
            "%",
            target="≥ 80 % (issue 30)" if processes == 1 else "",
            # With fewer polls due than half the floor (a quick run), the share says nothing.
            goal=FLOOR_SHARE_TARGET * 100
            if offered >= FLOOR_SHARE_TARGET * floor["polls_per_s"] and processes == 1
            else None,
        ),
    )
    result.notes.append(
        f"Polls: {n} runs submitted through the API in {submitted - t_start:.1f} s, all at the vendor "
        f"{at_vendor - t_start:.1f} s in; window {t1 - t0:.1f} s. "
        f"CPU over the window: {cpu_note(usage)}. {limit}"
    )
    result.data["polls"] = {
        "inflight": n,
        "polls_per_s": rate,
        "offered_per_s": offered,
        "interval_s": interval_s,
        "cpu": usage,
        "lateness_buckets": late,
        "window_s": t1 - t0,
        "per_second": per_second,
        "floor": floor,
        "floor_cpu": floor_usage,
        "idle_cpu": idle,
    }


def polls_overrides(interval_s: float = POLL_INTERVAL_S) -> dict[str, str]:
    """The polls phase's settings (also ``bench.profile``'s): runs that stay at the vendor for 120 s,
    polled every ``interval_s`` (+0-15 % jitter)."""
    interval = f"{round(interval_s * 1000)}ms"
    return {
        "SIM_DURATION_S": "120,120",
        "NUTRIENT_POLL_INITIAL_S": interval,
        "NUTRIENT_POLL_MAX_S": interval,
    }


def _polls(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
    return metric_sum(metrics, "hookbridge_vendor_requests_total", kind="poll")


def _limit(usage: dict[str, float], cores_each: float = 1.0) -> str:
    """What bounds the window: the worker processes (each near what it may take: a core, or its quota),
    the simulator, or the machine's two cores."""
    each = {k: v for k, v in usage.items() if k.startswith("worker ")} or {
        k: v for k, v in usage.items() if k == "worker"
    }
    sim = usage.get("simulator", 0.0)
    busy = sum(usage.values())
    if each and min(each.values()) >= 0.85 * cores_each:
        shares = " / ".join(f"{v * 100:.0f} %" for v in each.values())
        allowed = "a core" if cores_each == 1.0 else f"the {cores_each * 100:.0f} % allowed"
        return f"The worker is saturated ({shares} of {allowed})."
    if sim >= 0.9:
        return "The simulator (one Python process) is saturated: it is the limit, not the worker."
    if busy >= 1.8:
        return f"The two cores are busy ({busy * 100:.0f} % in all): the processes share them."
    return "No process is saturated."


async def run(
    quick: bool = False,
    runs: int | None = None,
    inflight: int | None = None,
    concurrency: int = 32,
    window_s: float | None = None,
    polls_only: bool = False,
    processes: int = 1,
    interval_s: float = POLL_INTERVAL_S,
    worker_cores: float | None = None,
) -> BenchResult:
    started = time.monotonic()
    result = BenchResult(
        name="throughput",
        command="python -m bench.throughput",
        quick_command="python -m bench.throughput --quick",
    )
    if not polls_only:
        await end_to_end(
            runs or (200 if quick else 2000), concurrency, 1000 if quick else 10_000, result, quick
        )
    await polls(
        inflight or (500 if quick else 5000),
        concurrency,
        window_s or (4.0 if quick else 30.0),
        result,
        floor_s=3.0 if quick else 10.0,
        processes=processes,
        interval_s=interval_s,
        worker_cores=worker_cores,
    )
    result.elapsed_s = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 runs, 500 in flight")
    parser.add_argument("--runs", type=int, help="runs end to end (default 2000)")
    parser.add_argument("--inflight", type=int, help="runs in flight for the polls phase (default 5000)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--window", type=float, help="seconds the polls are counted over (default 30)")
    parser.add_argument("--polls-only", action="store_true", help="only phases 3 and 4 (polls, floor)")
    parser.add_argument(
        "--processes", type=int, default=1, help="worker processes for the polls (WORKER_PROCESSES)"
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=POLL_INTERVAL_S,
        help=f"seconds between two polls of a run in the polls phase (default {POLL_INTERVAL_S:g}; "
        "1 before the third round of issue 16)",
    )
    parser.add_argument(
        "--worker-cores",
        type=float,
        help="each worker process of the polls phase in a cgroup of its own, allowed this much of a core "
        "(root; to show what each process adds where the machine has fewer cores than its processes need)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run_main(
        run(
            args.quick,
            args.runs,
            args.inflight,
            args.concurrency,
            args.window,
            args.polls_only,
            args.processes,
            args.poll_interval,
            args.worker_cores,
        )
    )
    print_result(result, args.json)


if __name__ == "__main__":
    main()
