"""A soak: steady load for several minutes with a short retention and a flaky receiver, then idle.

    python -m bench.soak --minutes 4        # about 4 + 3 minutes; writes docs/perf/soak.png
    python -m bench.soak --quick            # 1 minute of load

``hookbridge api``, ``worker`` and ``simulator`` as processes over one Redis, ``RETENTION_S=60``. Runs go
in at a steady rate over the three vendors (some with an Idempotency-Key, some canceled through the API);
the receiver answers 500 to a share of callbacks, so deliveries retry. Then the load stops and the soak
waits for every run to be called back and for retention and the purge to pass. Measured: every run called
back; RSS of api and worker over time and its slope after warm-up; their open file descriptors; Redis keys
over time; and a key audit after retention that should find nothing but subscriptions, unexpired
idempotency keys and the workers' own (heartbeat, arq's cron locks, vendor budgets).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bench._common import (
    AUTH,
    BenchResult,
    Cluster,
    Figure,
    Receiver,
    memory_kib,
    parse_metrics,
    print_result,
    run_main,
    url_run,
)
from service.store import keys
from service.worker.queue import QUEUE_NAME

COMMAND = "python -m bench.soak --minutes 4"
RETENTION_S = 60
PURGE_PERIOD_S = 60
FLAKY = 0.2  # share of callbacks answered 500
# The most times one message is refused: fewer than RETRY_SCHEDULE's six attempts, so that every callback
# lands in the end and a missing one is a lost one. (At 0.2 a refusal, one message in 15,600 would
# otherwise be refused six times in a row and given up, as it should be; tests/ cover that path.)
MAX_REFUSALS = 3


class FlakyReceiver(Receiver):
    def __init__(self, seed: int = 7) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.refused = 0
        self._refusals: Counter[str] = Counter()

    async def hook(self, request: Request) -> Response:
        message = request.headers.get("webhook-id", "")
        if self._refusals[message] < MAX_REFUSALS and self.rng.random() < FLAKY:
            await request.body()
            self.refused += 1
            self._refusals[message] += 1
            return Response(status_code=500)
        return await super().hook(request)


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _slope_mb_per_h(series: list[tuple[float, float]], skip_s: float) -> float | None:
    """Least-squares slope of (t s, KiB) after ``skip_s`` of warm-up, in MB per hour."""
    if not series:
        return None
    t0 = series[0][0]
    pts = [(t - t0, v / 1024) for t, v in series if t - t0 >= skip_s]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
    var = sum((p[0] - mx) ** 2 for p in pts)
    if var == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var * 3600


def _kind(key: str) -> str:
    """A key's kind, ids left out: ``hb:{<tag>}:run:<run>:events`` -> ``hb:run:events``."""
    if key.startswith(QUEUE_NAME + ":"):  # arq's queue's own keys (its health check), under arq's tag
        return "hookbridge:arq"
    if key.startswith(keys.ROOT + "{") and "}:" in key:
        # The hash tag left out too: the store's, a run's shard's (a run's keys, its events', an
        # idempotency record's) or a vendor's (its budget and pause).
        key = keys.ROOT + key[key.index("}:") + 2 :]
    parts = key.split(":")
    if parts[0] != "hb":
        return parts[0] + ":" + (parts[1] if len(parts) > 1 else "")
    if parts[1] in ("idem", "budget", "worker", "rate", "due", "active", "chain"):
        return "hb:" + parts[1]
    return "hb:" + parts[1] + (":" + parts[-1] if len(parts) > 3 or parts[1] == "client" else "")


# What may outlive retention: subscriptions and their listing (the client's directory and the event types
# it keeps beside each, keys.client_sub_types), unexpired idempotency keys, and the workers' own keys
# (heartbeats and vendor budgets with a TTL, arq's cron locks and health check).
LASTING = {
    "hb:sub",
    "hb:client:subs",
    "hb:client:subtypes",
    "hb:idem",
    "hb:worker",
    "hb:budget",
    "arq:in-progress",
    "arq:job",  # the worker's own periodic jobs (sweep, purge) while they run, as arq:in-progress
    "hookbridge:arq",
}


async def run(quick: bool = False, minutes: float = 4.0, rate: float = 10.0) -> BenchResult:
    started = time.monotonic()
    load_s = 60.0 if quick else minutes * 60
    result = BenchResult("soak", COMMAND, "python -m bench.soak --quick")
    overrides = {
        "RETENTION_S": str(RETENTION_S),
        "RETRY_SCHEDULE": "1s,2s,4s,8s,16s",
        "CALLBACK_TIMEOUT_S": "5",
        "SIM_DURATION_S": "1,4",
        "SIM_RATE_5XX": "0.02",
        "SIM_RATE_429": "0.01",
        "NUTRIENT_POLL_INITIAL_S": "1",
        "NUTRIENT_POLL_MAX_S": "2",
        "UPTIQ_POLL_INITIAL_S": "1",
        "UPTIQ_POLL_MAX_S": "2",
        "CLOUDSQUID_POLL_INITIAL_S": "1",
        "CLOUDSQUID_POLL_MAX_S": "2",
    }
    cluster = Cluster("soak", overrides)
    cluster.receiver = FlakyReceiver()
    samples: list[dict[str, Any]] = []
    submitted: list[str] = []
    canceled: set[str] = set()
    errors: Counter[str] = Counter()
    async with cluster:
        sub_id = await cluster.subscribe(["run.*"])
        redis = await cluster.redis_client()
        pids = {n: cluster.procs[n].process.pid for n in ("api", "worker")}
        t_start = time.time()

        async def sample() -> None:
            while True:
                row: dict[str, Any] = {"t": time.time() - t_start}
                for name, pid in pids.items():
                    row[f"{name}_rss_kib"] = memory_kib(pid).get("VmRSS", 0)
                    row[f"{name}_fds"] = _fds(pid)
                row["keys"] = await redis.dbsize()
                samples.append(row)
                await asyncio.sleep(5)

        sampler = asyncio.create_task(sample())
        rng = random.Random(11)
        vendors = ("nutrient", "cloudsquid", "uptiq")
        i = 0
        try:
            t_end = time.monotonic() + load_s
            next_at = time.monotonic()
            pending: set[asyncio.Task[None]] = set()

            async def submit(i: int) -> None:
                vendor = vendors[i % 3]
                body = url_run(i, vendor, tag="soak")
                if vendor == "uptiq":
                    body["options"] = {"documentType": "Invoice"}
                headers = dict(AUTH)
                if i % 5 == 0:
                    headers["Idempotency-Key"] = f"soak-{i}"
                try:
                    async with cluster.http.post(
                        f"{cluster.api_url}/v1/runs", json=body, headers=headers
                    ) as response:
                        if response.status != 202:
                            errors[f"submit {response.status}"] += 1
                            return
                        run_id = str((await response.json())["id"])
                    submitted.append(run_id)
                    if rng.random() < 0.05:  # some canceled through the API, some after submission
                        await asyncio.sleep(rng.uniform(0, 3))
                        async with cluster.http.post(
                            f"{cluster.api_url}/v1/runs/{run_id}/cancel", headers=AUTH
                        ) as response:
                            if response.status == 200:
                                canceled.add(run_id)
                except Exception as exc:  # counted, the soak goes on
                    errors[type(exc).__name__] += 1

            while time.monotonic() < t_end:
                task = asyncio.create_task(submit(i))
                pending.add(task)
                task.add_done_callback(pending.discard)
                i += 1
                next_at += 1 / rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await asyncio.gather(*pending)
            load_ended = time.time() - t_start
            print(f"soak: {len(submitted)} runs submitted in {load_s:.0f} s", file=sys.stderr, flush=True)

            # Idle: every run called back (terminal event), then retention and a purge pass.
            want = set(submitted)

            def called_back() -> set[str]:
                return {c.run_id for c in cluster.receiver.terminal_callbacks()}

            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not want <= called_back():
                await asyncio.sleep(1)
            all_back = time.time() - t_start
            missing = want - called_back()
            print(f"soak: called back, {len(missing)} missing; idle for retention", file=sys.stderr)
            why = await _why_missing(cluster, sub_id, sorted(missing)[:5])
            await asyncio.sleep(RETENTION_S + PURGE_PERIOD_S + 15)
            audit: Counter[str] = Counter()
            async for key in redis.scan_iter(count=1000):
                audit[_kind(key)] += 1
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        metrics = await cluster.metrics()
        async with cluster.http.get(cluster.api_url + "/metrics") as response:
            api_metrics = parse_metrics(await response.text())
        log_errors = 0
        for name in ("api", "worker"):
            path = cluster.logdir / f"{name}.log"
            with contextlib.suppress(OSError):
                log_errors += len(re.findall(r'"level": ?"(?:error|critical)"', path.read_text()))

    unexpected = {k: v for k, v in audit.items() if k not in LASTING}
    # Each process counts the ends it made: the worker most, the API its cancels.
    runs_total = sum(
        v for m in (metrics, api_metrics) for (name, _), v in m.items() if name == "hookbridge_runs_total"
    )
    warm = 60.0
    slopes = {n: _slope_mb_per_h([(s["t"], s[f"{n}_rss_kib"]) for s in samples], warm) for n in pids}
    fds = {
        n: (samples[0][f"{n}_fds"], max(s[f"{n}_fds"] for s in samples), samples[-1][f"{n}_fds"])
        for n in pids
    }
    result.add(
        Figure(
            "runs submitted",
            len(submitted),
            "runs",
            note=f"{rate:g}/s for {load_s:.0f} s, {len(canceled)} canceled",
        ),
        Figure(
            "runs called back (terminal event)",
            len(want) - len(missing),
            "runs",
            target="all",
            goal=len(want),
            higher_is_better=True,
        ),
        Figure(
            "hookbridge_runs_total, api + worker", runs_total, "runs", target="every run", goal=len(submitted)
        ),
        Figure("api RSS slope after warm-up", slopes["api"], "MB/h"),
        Figure("worker RSS slope after warm-up", slopes["worker"], "MB/h"),
        Figure(
            "unexpected keys after retention",
            sum(unexpected.values()),
            "keys",
            target="0",
            goal=0,
            higher_is_better=False,
        ),
        Figure(
            "ERROR log lines (api + worker)", log_errors, "lines", target="0", goal=0, higher_is_better=False
        ),
    )
    result.notes += [
        f"Load ended at {load_ended:.0f} s, every run called back at {all_back:.0f} s; callbacks refused by "
        f"the flaky receiver: {cluster.receiver.refused}; submit errors: {dict(errors) or 'none'}.",
        f"File descriptors (first, max, last): api {fds['api']}, worker {fds['worker']}.",
        f"Key audit after retention + a purge: {dict(sorted(audit.items()))}.",
        f"Unexpected: {unexpected or 'none'}; missing callbacks: {why or 'none'}.",
    ]
    result.data = {"samples": samples, "load_ended": load_ended, "all_back": all_back}
    result.elapsed_s = time.monotonic() - started
    return result


async def _why_missing(cluster: Cluster, sub_id: str, run_ids: list[str]) -> list[str]:
    """Each run not called back, with its status and its deliveries (event, status, attempts, last code),
    as the API tells them: whether the run never ended, or its callback was given up or is still due."""
    deliveries: dict[str, list[str]] = {}
    cursor: str | None = ""
    while run_ids and cursor is not None:
        url = f"{cluster.api_url}/v1/subscriptions/{sub_id}/deliveries?limit=100"
        async with cluster.http.get(url + (f"&cursor={cursor}" if cursor else ""), headers=AUTH) as response:
            page = await response.json()
        for d in page.get("data", []):
            if d.get("run_id") in run_ids:
                deliveries.setdefault(d["run_id"], []).append(
                    f"{d['event_type']} {d['status']} after {d['attempts']} (last {d['last_status_code']})"
                )
        cursor = page.get("next_cursor")
    told = []
    for run_id in run_ids:
        async with cluster.http.get(f"{cluster.api_url}/v1/runs/{run_id}", headers=AUTH) as response:
            status = (await response.json()).get("status") if response.status == 200 else response.status
        told.append(f"{run_id} ({status}; deliveries: {'; '.join(deliveries.get(run_id, [])) or 'none'})")
    return told


def plot(result: BenchResult) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result.data.get("samples") or []
    if not samples:
        return None
    t = [s["t"] / 60 for s in samples]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    for name, colour in (("api", "#1f77b4"), ("worker", "#ff7f0e")):
        ax1.plot(t, [s[f"{name}_rss_kib"] / 1024 for s in samples], label=f"{name} RSS", color=colour)
        ax2.plot(t, [s[f"{name}_fds"] for s in samples], label=f"{name} fds", color=colour)
    ax3.plot(t, [s["keys"] for s in samples], label="Redis keys", color="#2ca02c")
    for ax in (ax1, ax2, ax3):
        ax.axvline(result.data["load_ended"] / 60, color="#7f7f7f", linestyle="--", linewidth=1)
        ax.legend(loc="upper right")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("MiB")
    ax2.set_ylabel("open fds")
    ax3.set_ylabel("keys")
    ax3.set_xlabel("minutes (dashed: load stops; retention 60 s, purge every 60 s)")
    fig.suptitle("Soak: steady load, flaky receiver, then idle past retention")
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--rate", type=float, default=10.0, help="runs submitted per second")
    parser.add_argument(
        "--plot", type=Path, default=Path(__file__).resolve().parent.parent / "docs/perf/soak.png"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_main(run(args.quick, args.minutes, args.rate))
    saved = Path(tempfile.mkstemp(prefix="hookbridge-soak-", suffix=".json")[1])
    saved.write_text(json.dumps(result.to_json(), default=str))
    print(f"raw result in {saved}", file=sys.stderr)
    fig = plot(result)
    if fig is not None:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=110, bbox_inches="tight")
        print(f"wrote {args.plot}", file=sys.stderr)
    print_result(result, as_json=args.json)


if __name__ == "__main__":
    main()
