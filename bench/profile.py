"""Where one vendor poll's CPU goes in the worker: py-spy samples of a worker polling 5,000 runs as the
polls phase of ``bench.throughput`` does (every ~0.27 s: more than it can, so it is saturated), grouped
into the parts of a poll.

    python -m bench.profile --py-spy /path/to/py-spy            # record 15 s at 200 Hz, print the table
    python -m bench.profile --raw samples.txt                    # only tabulate a recording

py-spy is not a dependency: ``python -m venv /tmp/prof && /tmp/prof/bin/pip install py-spy``. It needs
ptrace rights over the worker (root, or ``kernel.yama.ptrace_scope=0``). Samples of submits (the tail of
the burst) are left out, so the table is the steady polling alone.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import subprocess
import time
from pathlib import Path

from bench._common import Cluster, metric_sum, run_main, submit_runs, until
from bench.throughput import polls_overrides

# (part of a poll, pattern a sample's stack matches), first match wins; the order puts callers before
# what they call, so that a Redis reply read inside a transition counts as the transition's.
PARTS = [
    ("Prometheus scrape of the worker (the benchmark's own reads)", r"metrics_endpoint"),
    # py-spy names a frame by its function and file, not its class: "transitions (service/store/...)".
    (
        "the state transition (Store.transition(s): EVALSHA, its JSON arguments)",
        r"\btransitions? \(service/store/|service/worker/transitions\.py",
    ),
    ("the claim (claim_runs Lua, load_run of each run)", r"claim_runs|RunPump\.claim\b"),
    ("building the change (the core's decisions: lifecycle, runs, trail, backoff)", r"service/core/"),
    ("aiohttp: the HTTP request and response", r"aiohttp/|httpx_aiohttp"),
    ("httpx's own layers (request building, URL merging, cookies, Response)", r"httpx/"),
    ("structlog (context binding, log lines)", r"structlog"),
    ("Prometheus metrics (labels, observe)", r"prometheus_client"),
    ("Redis replies and sends outside a transition (socket)", r"redis/"),
    (
        "the vendor budget and request metering (budget.py, vendors/http.py)",
        r"worker/budget\.py|vendors/http\.py",
    ),
    ("the adapter (Nutrient's poll: status mapping, JSON)", r"NutrientAdapter"),
    ("the step's own code (steps.py)", r"service/worker/steps\.py"),
    ("the pumps (task bookkeeping)", r"service/worker/pumps\.py"),
]
EVENT_LOOP = "the event loop itself (uvloop: I/O polling, callbacks)"


def tabulate(raw: str) -> list[tuple[str, float]]:
    """Shares of the samples per part of a poll, largest first."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or "cmd_worker" not in stack or "_submit" in stack:
            continue
        part = next((name for name, pattern in PARTS if re.search(pattern, stack)), None)
        # py-spy names the loop's own frame "run (asyncio/runners.py:118)": nothing of ours above it.
        on_loop = re.match(r"(Runner\.)?run \(asyncio/runners", stack.split(";")[-1]) is not None
        counts[part or (EVENT_LOOP if on_loop else "other")] += int(n)
    total = sum(counts.values()) or 1
    return [(name, count / total) for name, count in counts.most_common()]


def table(shares: list[tuple[str, float]]) -> str:
    rows = ["| part of one poll | share of the worker's samples |", "|---|---|"]
    rows += [f"| {name} | {share * 100:.1f} % |" for name, share in shares]
    return "\n".join(rows)


async def record(py_spy: str, seconds: float, out: Path, inflight: int) -> None:
    overrides = {**polls_overrides(), "SIM_DURATION_S": "600,600"}
    async with Cluster("profile", overrides) as cluster:
        await cluster.subscribe()
        await submit_runs(cluster, inflight, 32)

        async def all_at_vendor() -> bool:
            metrics = await cluster.metrics()
            submitted = metric_sum(metrics, "hookbridge_vendor_requests_total", kind="submit", code="202")
            return submitted >= inflight

        await until(all_at_vendor, 180, "every run submitted to the vendor")
        await asyncio.sleep(3.0)
        pid = cluster.procs["worker"].process.pid
        command = [py_spy, "record", "-r", "200", "-d", str(int(seconds)), "-f", "raw", "-o", str(out)]
        started = time.monotonic()
        done = await asyncio.to_thread(
            subprocess.run, [*command, "-p", str(pid)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"py-spy failed: {done.stderr[-500:]}")
        print(f"recorded {time.monotonic() - started:.0f} s of the worker into {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--py-spy", help="the py-spy binary: record a worker now")
    parser.add_argument("--raw", type=Path, help="tabulate this py-spy raw recording instead")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--inflight", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/hookbridge-poll-profile.txt"))
    args = parser.parse_args()
    if args.raw is None:
        if not args.py_spy:
            parser.error("give --py-spy to record, or --raw to tabulate a recording")
        run_main(record(args.py_spy, args.seconds, args.out, args.inflight))
        args.raw = args.out
    print(table(tabulate(args.raw.read_text())))


if __name__ == "__main__":
    main()
