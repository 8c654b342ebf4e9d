"""Runs in flight from 1,000 to 100,000 on one worker process: lateness and memory per run against size.

    python -m bench.sweep                          # 1,000, 10,000 and 100,000 runs lasting 400-500 s
    python -m bench.sweep --quick                  # 300 and 1,000 runs lasting 20-30 s
    python -m bench.sweep --runs 1000,10000 --duration 100,150

``bench.scale`` once per size, one after the other, each on a fresh Redis, API, worker and simulator,
with the same vendor durations for every size: long enough that every run of the largest is at the vendor,
and the backlog of its burst has drained, before the first ends (100,000 runs were all at the vendor 82 s
after the first submit on an AMD EPYC, 223 s on an Intel Xeon; the backlog cleared 119 s in on the EPYC).
With 200-300 s, the sweep's first durations, the 100,000 runs began to end while the burst still drained,
and there was no steady state to measure. Per size: poll lateness p99 in the steady
state and while the burst's backlog drains, the worker's peak RSS, and Redis memory per run in flight
(with a full vendor trail) and per finished run. Whether memory per run stays flat as the runs in flight
grow a hundredfold is the question (issue 30); lateness at 100,000 is what one process can hold.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench import scale
from bench._common import BenchResult, Figure, number, print_result, run_main

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (300, 1_000)
DURATION = "400,500"  # seconds at the vendor, every size (the docstring says why)
# What each size's scale run gives, by the start of its figure's name.
PICK = {
    "steady_p99_s": "poll lateness p99, steady state",
    "drain_p99_s": "step lateness p99, ramp",
    "after_vendor_p99_s": "poll lateness p99, every poll after all runs reached the vendor",
    "cpu_poll_us": "worker CPU per vendor poll, steady state",
    "rss_mib": "worker memory, peak RSS",
    "in_flight_b": "Redis memory per run in flight with a full vendor trail",
    "finished_b": "Redis memory kept per finished run",
    "submit_s": "submitting the runs through the API",
}


async def run(
    quick: bool = False, sizes: tuple[int, ...] | None = None, duration: str | None = None
) -> BenchResult:
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    duration = duration or ("20,30" if quick else DURATION)
    started = time.monotonic()
    result = BenchResult(
        name="sweep", command="python -m bench.sweep", quick_command="python -m bench.sweep --quick"
    )
    rows: list[dict[str, float | None]] = []
    for n in sizes:
        print(f"bench.sweep: {n:,} runs in flight ...", file=sys.stderr, flush=True)
        one = await scale.run(runs=n, duration=duration)
        by_name = {f.name: f for f in one.figures}
        row: dict[str, float | None] = {"runs": float(n)}
        for key, prefix in PICK.items():
            found = next((f for name, f in by_name.items() if name.startswith(prefix)), None)
            row[key] = found.value if found is not None else None
        if row["steady_p99_s"] is None:  # scale's CPU figure is then over the whole run, not a steady state
            row["cpu_poll_us"] = None
        rows.append(row)
    for row in rows:
        n = int(row["runs"] or 0)
        result.add(
            Figure(
                f"{n:,} in flight: poll lateness p99, steady state",
                row["steady_p99_s"],
                "s",
                target="< 1 s (issue 30: 100,000 in flight)" if n >= 100_000 else "",
                goal=scale.LATENESS_TARGET_S if n >= 100_000 else None,
                higher_is_better=False,
                note=(
                    ""
                    if row["steady_p99_s"] is not None
                    else f"{scale.NO_STEADY_STATE} (the backlog of due steps never cleared while 90 % of the "
                    f"runs were in flight); every poll after all reached the vendor "
                    f"{number(row['after_vendor_p99_s'] or 0)} s; "
                )
                + f"while the burst drains {number(row['drain_p99_s'] or 0)} s; "
                f"{number(row['submit_s'] or 0)} s to submit them",
            ),
            Figure(
                f"{n:,} in flight: worker CPU per vendor poll, steady state",
                row["cpu_poll_us"],
                "us",
                note="whether a poll costs more as the runs in flight grow",
            ),
            Figure(f"{n:,} in flight: worker peak RSS", row["rss_mib"], "MiB"),
            Figure(
                f"{n:,} in flight: Redis memory per run in flight, full vendor trail",
                row["in_flight_b"],
                "bytes",
                note=f"per finished run {number(row['finished_b'] or 0)} B",
            ),
        )
    result.notes.append(
        f"Vendor durations {duration} s for every size; each size a fresh set of processes "
        "(`python -m bench.scale --runs N --duration " + duration + "`)."
    )
    result.data.update(rows=rows, duration=duration)
    result.elapsed_s = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="300 and 1,000 runs lasting 20-30 s")
    parser.add_argument("--runs", help="comma list of sizes (default 1000,10000,100000)")
    parser.add_argument("--duration", help=f"vendor duration 'min,max' seconds (default {DURATION})")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = tuple(int(s) for s in args.runs.split(",")) if args.runs else None
    print_result(run_main(run(args.quick, sizes, args.duration)), args.json)


if __name__ == "__main__":
    main()
