"""Every benchmark, one after the other, then ``docs/performance.md`` and its plots (``docs/perf/*.png``).

    python -m bench.run                      # everything (about 45 minutes on a 2-core machine)
    python -m bench.run --quick --out /tmp/x # a smoke run of everything, written elsewhere
    python -m bench.run --only api,scale     # some of them
    python -m bench.run --render results.json  # rewrite the page from saved results, without running

Each benchmark is also a module of its own: ``python -m bench.throughput`` (``scale``, ``efficiency``,
``api``, ``feed``, ``slowloris``, ``soak``, ``memory``, ``cluster``, ``sweep``), each with ``--quick`` and
``--help``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench import (
    api,
    cluster,
    efficiency,
    feed,
    memory,
    report,
    scale,
    slowloris,
    soak,
    sweep,
    throughput,
)
from bench._common import BenchResult, machine, print_result, run_main

BENCHMARKS: dict[str, Callable[..., Awaitable[BenchResult]]] = {
    "api": api.run,
    "feed": feed.run,
    "throughput": throughput.run,
    "efficiency": efficiency.run,
    "scale": scale.run,
    "slowloris": slowloris.run,
    "soak": soak.run,
    "memory": memory.run,
    "cluster": cluster.run,
    "sweep": sweep.run,  # last: 1,000 to 100,000 runs in flight, about 25 minutes
}
DOCS = Path(__file__).resolve().parent.parent / "docs"


async def run_all(names: list[str], quick: bool) -> list[BenchResult]:
    results = []
    for name in names:
        print(f"bench: {name}{' (quick)' if quick else ''} ...", file=sys.stderr, flush=True)
        result = await BENCHMARKS[name](quick=quick)
        print_result(result)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="every benchmark in its smoke mode")
    parser.add_argument("--only", help=f"comma list of {', '.join(BENCHMARKS)}")
    parser.add_argument("--out", type=Path, default=DOCS, help="where performance.md and perf/ go (docs/)")
    parser.add_argument("--save", type=Path, help="also save the raw results as JSON here")
    parser.add_argument("--render", type=Path, help="only rewrite the page from results saved with --save")
    parser.add_argument(
        "--update",
        action="store_true",
        help="rewrite only the sections of the benchmarks run (with --only) in the existing page",
    )
    args = parser.parse_args(argv)

    if args.render:
        saved = json.loads(args.render.read_text())
        results = [BenchResult.from_json(r) for r in saved["results"]]
        if args.update:
            report.update(results, saved["machine"], args.out, command=saved["command"] + " --update")
        else:
            report.write(
                results, saved["machine"], args.out, command=saved["command"], total_s=saved["total_s"]
            )
        print(f"wrote {args.out / 'performance.md'}", file=sys.stderr)
        return

    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHMARKS)
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    command = (
        "python -m bench.run"
        + (" --quick" if args.quick else "")
        + (f" --only {args.only}" if args.only else "")
    )
    started = time.monotonic()
    about = machine()
    results = run_all_sync(names, args.quick)
    total_s = time.monotonic() - started
    saved = {
        "machine": about,
        "command": command,
        "total_s": total_s,
        "results": [r.to_json() for r in results],
    }
    save = args.save or Path(tempfile.mkstemp(prefix="hookbridge-bench-", suffix=".json")[1])
    save.write_text(json.dumps(saved, default=str))
    if args.update:
        written = report.update(results, about, args.out, command=command + " --update")
    else:
        written = report.write(results, about, args.out, command=command, total_s=total_s)
    print(f"\nwrote {', '.join(str(p) for p in written)}; raw results in {save}", file=sys.stderr)


def run_all_sync(names: list[str], quick: bool) -> list[BenchResult]:
    return run_main(run_all(names, quick))


if __name__ == "__main__":
    main()
