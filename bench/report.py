"""Writes ``docs/performance.md`` and its plots (``docs/perf/*.png``) from the benchmarks' results.

The page is generated: the machine, the date, every figure with its target, the command for each
benchmark, the plots, and ``bench/analysis.md`` (what holds each figure back, written by whoever
investigated it) verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench._common import BenchResult, number, verdict

ANALYSIS = Path(__file__).with_name("analysis.md")
TITLES = {
    "throughput": "Throughput and the floors under it",
    "scale": "10,000 runs in flight on one worker",
    "efficiency": "Requests per run and callback delay, hookbridge against a naive client",
    "api": "The API alone",
    "feed": "The event feed: from emission to a waiting long-poll",
    "slowloris": "Slow clients against the API",
    "soak": "Soak: months in minutes",
    "cluster": "One Redis against a Redis Cluster",
    "sweep": "1,000 to 100,000 runs in flight",
}
BLUE, ORANGE, GREY, GREEN = "#1f77b4", "#ff7f0e", "#7f7f7f", "#2ca02c"


def write(
    results: Sequence[BenchResult],
    machine: Mapping[str, str],
    out: Path,
    *,
    command: str,
    total_s: float,
) -> list[Path]:
    """Writes ``out/performance.md`` and ``out/perf/*.png``; returns the files written."""
    perf = out / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    by_name = {r.name: r for r in results}
    plots = _plots(by_name, perf)
    page = _page(results, machine, plots, out, command=command, total_s=total_s)
    path = out / "performance.md"
    path.write_text(page)
    return [path, *plots.values()]


def update(
    results: Sequence[BenchResult], machine: Mapping[str, str], out: Path, *, command: str
) -> list[Path]:
    """Rewrites, in an existing ``out/performance.md``, only what ``results`` measured: their sections,
    their rows of the two tables at the top, their plots and the analysis (from ``bench/analysis.md``);
    the other benchmarks' sections stay as their last full run left them. For a machine too loaded for
    the whole of ``make bench``."""
    path = out / "performance.md"
    old = path.read_text()
    perf = out / "perf"
    perf.mkdir(parents=True, exist_ok=True)
    plots = _plots({r.name: r for r in results}, perf)
    fresh = _page(results, machine, plots, out, command=command, total_s=0.0)
    page = old
    names = {r.name for r in results}
    for result in results:
        title = f"## {TITLES.get(result.name, result.name)}\n"
        page = _replace_section(page, title, _section(fresh, title))
    # The tables' rows of the benchmarks run now, in place of their old ones.
    kept = [line for line in page.splitlines() if not any(line.startswith(f"| {name} | ") for name in names)]
    page = "\n".join(kept) + "\n"
    for table_head in (
        "| benchmark | figure | value | target |\n|---|---|---|---|\n",
        "| benchmark | command | quick | took |\n|---|---|---|---|\n",
    ):
        rows = [
            line
            for line in _section_lines(fresh, table_head)
            if any(line.startswith(f"| {n} | ") for n in names)
        ]
        page = page.replace(table_head, table_head + "".join(row + "\n" for row in rows), 1)
    note = (
        f"- **Updated**: {machine.get('date')}, commit {machine.get('commit') or 'unknown'}: "
        f"`{command}` rewrote the sections of {', '.join(sorted(names))} (and the analysis); the others "
        "are from the date above."
    )
    lines = [line for line in page.splitlines() if not line.startswith("- **Updated**: ")]
    at = next(i for i, line in enumerate(lines) if line.startswith("- **Command**: "))
    lines.insert(at + 1, note)
    page = "\n".join(lines) + "\n"
    analysis = "## What holds each figure back\n"
    if ANALYSIS.exists() and analysis in page:
        page = page[: page.index(analysis)] + ANALYSIS.read_text().rstrip() + "\n"
    path.write_text(page)
    return [path, *plots.values()]


def _section(page: str, title: str) -> str:
    start = page.index(title)
    end = page.find("\n## ", start + len(title))
    return page[start : end + 1 if end >= 0 else len(page)]


def _replace_section(page: str, title: str, section: str) -> str:
    if title not in page:  # a benchmark new to the page goes before the analysis
        analysis = page.find("## What holds each figure back")
        at = analysis if analysis >= 0 else len(page)
        return page[:at] + section + "\n" + page[at:]
    old = _section(page, title)
    return page.replace(old, section, 1)


def _section_lines(page: str, head: str) -> list[str]:
    start = page.index(head) + len(head)
    out = []
    for line in page[start:].splitlines():
        if not line.startswith("|"):
            break
        out.append(line)
    return out


# The page ---------------------------------------------------------------------------------------------


def _page(
    results: Sequence[BenchResult],
    machine: Mapping[str, str],
    plots: Mapping[str, Path],
    out: Path,
    *,
    command: str,
    total_s: float,
) -> str:
    def img(key: str, alt: str) -> str:
        return f"![{alt}]({plots[key].relative_to(out).as_posix()})\n" if key in plots else ""

    lines = [
        "# Performance: where the limits are",
        "",
        "Generated by `make bench` (`.venv/bin/python -m bench.run`): every benchmark in `bench/`, run on "
        "the machine below, each part a real process on loopback (`redis-server`, `hookbridge api`, "
        "`hookbridge worker`, `hookbridge simulator`), the client and the receiver in the benchmark's own "
        "process. Every figure is one run's, not an average of several: on a shared 2-core machine expect "
        "±10-20 % between runs. Speeds are never asserted by the tests.",
        "",
        f"- **Machine**: {machine.get('cpu')}, {machine.get('cores')} cores, {machine.get('memory')}; "
        f"Linux {machine.get('kernel')}; Python {machine.get('python')}; Redis {machine.get('redis')}",
        f"- **Date**: {machine.get('date')}; the whole run took {total_s / 60:.1f} min; "
        f"commit {machine.get('commit') or 'unknown'}",
        f"- **Command**: `{command}`",
        f"- **Settings**: production defaults ({_worker_defaults()}, `LOG_FORMAT=json`, Redis AOF "
        "`appendfsync everysec`) unless a benchmark says otherwise; one subscription with its default event "
        "types (the terminal events).",
        "",
        "## Every figure against its target",
        "",
        "| benchmark | figure | value | target |",
        "|---|---|---|---|",
    ]
    for result in results:
        for f in result.figures:
            if f.goal is not None:
                lines.append(f"| {result.name} | {f.name} | {f.shown()} | {verdict(f)} |")
    lines += [
        "",
        "Where a target is missed, [What holds each figure back](#what-holds-each-figure-back) says by how "
        "much, why, and what would move it.",
        "",
        "Each benchmark runs alone too (`--help` for its knobs, `--quick` for a smoke run):",
        "",
    ]
    lines += ["| benchmark | command | quick | took |", "|---|---|---|---|"]
    for result in results:
        lines.append(
            f"| {result.name} | `.venv/bin/{result.command}` | `.venv/bin/{result.quick_command}` | "
            f"{result.elapsed_s:.0f} s |"
        )
    lines.append("")

    for result in results:
        lines += [f"## {TITLES.get(result.name, result.name)}", "", f"`{result.command}`", ""]
        doc = _module_doc(result.name)
        if doc:
            lines += [doc, ""]
        lines += [result.table(), ""]
        lines += [f"- {note}" for note in result.notes]
        lines.append("")
        if result.name == "throughput":
            lines.append(img("throughput", "throughput against the floors"))
            lines.append(img("e2e", "runs submitted, finished by the worker and called back over time"))
        elif result.name == "scale":
            lines.append(img("lateness", "poll lateness"))
            lines.append(img("scale", "runs in flight, Redis memory and worker memory over time"))
        elif result.name == "efficiency":
            lines.append(img("requests", "vendor requests per run"))
            lines.append(img("delay", "vendor finished to callback"))
        elif result.name == "api":
            lines.append(img("api", "API requests per second and latency"))
        elif result.name == "soak":
            lines.append(img("soak", "RSS, file descriptors and Redis keys over the soak"))
        elif result.name == "sweep":
            lines.append(img("sweep", "lateness and memory per run from 1,000 to 100,000 runs in flight"))
    if ANALYSIS.exists():
        lines += [ANALYSIS.read_text().rstrip(), ""]
    return "\n".join(line for line in lines) + "\n"


def _module_doc(name: str) -> str:
    """The module docstring's description (what is run), without its usage lines."""
    import importlib

    try:
        module = importlib.import_module(f"bench.{name}")
    except ImportError:
        return ""
    doc = (module.__doc__ or "").strip()
    paragraphs = [p for p in doc.split("\n\n") if not p.lstrip().startswith("python -m")]
    return "\n\n".join(paragraphs[1:]).strip().replace("``", "`")


def _worker_defaults() -> str:
    """The worker's settings that shape every figure, as the code's defaults give them (never restated)."""
    from service.vendors.registry import load_settings

    defaults = load_settings({"HOOKBRIDGE_REDIS_URL": "redis://127.0.0.1:1"})
    names = (
        "worker_concurrency",
        "worker_batch",
        "worker_idle_s",
        "worker_claim_gap_s",
        "delivery_claim_gap_s",
    )
    return ", ".join(f"`{name.upper()}={getattr(defaults, name):g}`" for name in names)


# The plots --------------------------------------------------------------------------------------------


def _plots(results: Mapping[str, BenchResult], perf: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for key, fn in (
        ("throughput", _throughput),
        ("e2e", _e2e),
        ("lateness", _lateness),
        ("scale", _scale),
        ("requests", _requests),
        ("delay", _delay),
        ("api", _api),
        ("soak", _soak),
        ("sweep", _sweep),
    ):
        fig = fn(results)
        if fig is None:
            continue
        path = perf / f"{key}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        out[key] = path
    return out


def _soak(results: Mapping[str, BenchResult]) -> Any:
    from bench import soak

    s = results.get("soak")
    return soak.plot(s) if s is not None else None


def _throughput(results: Mapping[str, BenchResult]) -> Any:
    t = results.get("throughput")
    if t is None:
        return None
    bars: list[tuple[str, float, str]] = []
    e2e, polls = t.data.get("e2e", {}), t.data.get("polls", {})
    if e2e.get("overall_per_s"):
        bars.append(("hookbridge: runs/s end to end, submit → callback", e2e["overall_per_s"], BLUE))
    if e2e.get("finished_per_s"):
        bars.append(("hookbridge: runs/s finished by one worker", e2e["finished_per_s"], BLUE))
    if polls.get("polls_per_s"):
        bars.append(("hookbridge: vendor polls/s, one worker", polls["polls_per_s"], BLUE))
    api = results.get("api")
    if api is not None:
        bars.append(("hookbridge: POST /v1/runs/s, one API", api.data["post_url"]["rps"], BLUE))
        bars.append(("hookbridge: GET /v1/runs/{id}/s, one API", api.data["get"]["rps"], BLUE))
    floor = polls.get("floor")
    if floor:
        bars.append(("floor: raw aiohttp client polls/s, the same endpoint", floor["polls_per_s"], GREY))
    if api is not None and api.data.get("bare"):
        bars.append(("floor: bare starlette POST + one EVALSHA/s", api.data["bare"]["rps"], GREY))
    arq = t.data.get("arq")
    if arq:
        bars.append(("floor: arq empty jobs/s, one worker", arq["jobs_per_s"], GREY))
        bars.append(("floor: arq enqueues/s", arq["enqueue_per_s"], GREY))
    for op, rate in (t.data.get("redis_benchmark") or {}).items():
        bars.append((f"floor: redis-benchmark {op} ops/s", rate, GREY))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(bars) + 1.2))
    labels = [b[0] for b in bars][::-1]
    values = [b[1] for b in bars][::-1]
    ax.barh(labels, values, color=[b[2] for b in bars][::-1])
    ax.set_xscale("log")
    ax.set_xlim(left=min([50.0, *values]) * 0.8)
    for i, v in enumerate(values):
        ax.text(v * 1.05, i, number(v), va="center", fontsize=8)
    ax.axvline(1000, color=ORANGE, linestyle="--", linewidth=1)
    ax.text(1000, -0.9, " 1,000 polls/s target", color=ORANGE, fontsize=8)
    ax.set_xlabel("per second (log scale)")
    ax.set_title("hookbridge against the floors (one process each, 2 cores shared)")
    return fig


def _e2e(results: Mapping[str, BenchResult]) -> Any:
    t = results.get("throughput")
    if t is None or not t.data.get("e2e", {}).get("timeline"):
        return None
    runs = [("SUBSCRIPTION_MAX_IN_FLIGHT=10 (default)", t.data["e2e"])]
    if t.data.get("e2e_wide"):
        runs.append(("SUBSCRIPTION_MAX_IN_FLIGHT=100", t.data["e2e_wide"]))
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.6), sharey=True, squeeze=False)
    for ax, (title, e) in zip(axes[0], runs, strict=True):
        submitted = sorted(e["submitted"])
        ax.plot(submitted, range(1, len(submitted) + 1), color=GREY, label="accepted by the API")
        tl = e["timeline"]
        ax.plot([r["t"] for r in tl], [r["finished"] for r in tl], color=BLUE, label="finished by the worker")
        ax.plot([r["t"] for r in tl], [r["called_back"] for r in tl], color=GREEN, label="called back")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("s since the first submit")
    axes[0][0].set_ylabel("runs")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{t.data['e2e']['runs']:,} runs end to end, the vendor finishing at once", fontsize=10)
    return fig


def _bucket_labels(buckets: Sequence[Sequence[float]]) -> tuple[list[str], list[float]]:
    labels, counts = [], []
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        name = f"> {number(prev_le)}" if le == float("inf") else f"{number(prev_le)}-{number(le)}"
        labels.append(name)
        counts.append(c - prev_c)
        prev_le, prev_c = le, c
    return labels, counts


def _lateness(results: Mapping[str, BenchResult]) -> Any:
    s = results.get("scale")
    if s is None or not s.data.get("lateness_polls"):
        return None
    fig, ax = plt.subplots(figsize=(8, 3.6))
    series = [
        ("every step (the submits of the burst too)", s.data["lateness_all"], GREY),
        ("polls after all runs reached the vendor", s.data["lateness_polls"], BLUE),
        (
            "steady state: polls once the backlog had cleared, ≥ 90 % in flight",
            s.data.get("lateness_steady") or [],
            GREEN,
        ),
    ]
    series = [x for x in series if x[1]]
    labels, _ = _bucket_labels(s.data["lateness_all"])
    width = 0.8 / len(series)
    for k, (label, buckets, color) in enumerate(series):
        _, counts = _bucket_labels(buckets)
        total = sum(counts) or 1
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(counts))]
        ax.bar(xs, [100 * c / total for c in counts], width, label=label, color=color)
    ax.set_xticks(list(range(len(labels))), labels, rotation=35, ha="right", fontsize=8)
    ax.set_xlabel("lateness, s (the worker's histogram buckets)")
    ax.set_ylabel("% of steps")
    ax.set_title(f"Poll lateness, {s.data['runs']:,} runs in flight on one worker")
    ax.legend(fontsize=8)
    return fig


def _scale(results: Mapping[str, BenchResult]) -> Any:
    s = results.get("scale")
    if s is None or not s.data.get("timeline"):
        return None
    tl = s.data["timeline"]
    t = [r["t"] for r in tl]
    fig, axes = plt.subplots(3, 1, figsize=(8, 6), sharex=True)
    axes[0].plot(t, [r["in_flight"] for r in tl], color=BLUE, label="runs in flight")
    axes[0].plot(t, [r["called_back"] for r in tl], color=GREEN, label="runs called back")
    axes[0].legend(fontsize=8)
    axes[0].set_ylabel("runs")
    axes[1].plot(t, [(r["redis_bytes"] - s.data["baseline_bytes"]) / 2**20 for r in tl], color=ORANGE)
    axes[1].set_ylabel("Redis MiB\n(over baseline)")
    axes[2].plot(t, [r["worker_rss_kib"] / 1024 for r in tl], color=GREY)
    axes[2].set_ylabel("worker RSS MiB")
    axes[2].set_xlabel("s since the first submit")
    for ax in axes:
        ax.axvline(s.data["at_vendor_s"], color="black", linestyle=":", linewidth=1)
    span = s.data["duration"].replace(",", "-")
    axes[0].set_title(f"{s.data['runs']:,} Nutrient runs lasting {span} s (dotted: all at the vendor)")
    return fig


def _sweep(results: Mapping[str, BenchResult]) -> Any:
    s = results.get("sweep")
    if s is None or not s.data.get("rows"):
        return None
    rows = s.data["rows"]
    n = [r["runs"] for r in rows]
    fig, (late, mem) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label, color in (
        ("steady_p99_s", "poll lateness p99, steady state", BLUE),
        ("drain_p99_s", "step lateness p99, while the burst drains", GREY),
    ):
        late.plot(n, [r[key] or float("nan") for r in rows], marker="o", color=color, label=label)
    # Where a size had no steady state (its backlog never cleared with the runs in flight), every poll
    # after all its runs reached the vendor marks it instead, labelled.
    for r in rows:
        if r.get("steady_p99_s") is None and r.get("after_vendor_p99_s"):
            late.plot([r["runs"]], [r["after_vendor_p99_s"]], marker="x", color=BLUE, linestyle="none")
            late.annotate(
                "no steady state\n(every poll after all at the vendor)",
                (r["runs"], r["after_vendor_p99_s"]),
                textcoords="offset points",
                xytext=(-150, -10),
                fontsize=7,
                color=BLUE,
            )
    late.axhline(1.0, color=ORANGE, linestyle="--", linewidth=1)
    late.text(n[0], 1.05, "1 s target", color=ORANGE, fontsize=8)
    late.set_xscale("log")
    late.set_yscale("log")
    late.set_xlabel("runs in flight")
    late.set_ylabel("s")
    late.legend(fontsize=8)
    late.set_title("Lateness")
    for key, label, color in (
        ("in_flight_b", "Redis per run in flight (full trail)", BLUE),
        ("finished_b", "Redis per finished run", GREEN),
    ):
        mem.plot(n, [r[key] or float("nan") for r in rows], marker="o", color=color, label=label)
    mem.axhline(1024, color=ORANGE, linestyle="--", linewidth=1)
    mem.axhline(2048, color=ORANGE, linestyle=":", linewidth=1)
    mem.text(n[0], 1080, "1 KiB target (in flight)", color=ORANGE, fontsize=8)
    mem.text(n[0], 2110, "2 KiB target (finished)", color=ORANGE, fontsize=8)
    mem.set_xscale("log")
    mem.set_ylim(bottom=0)
    mem.set_xlabel("runs in flight")
    mem.set_ylabel("bytes per run")
    mem.legend(fontsize=8)
    mem.set_title(f"Memory per run (vendor durations {s.data['duration'].replace(',', '-')} s)")
    fig.tight_layout()
    return fig


def _requests(results: Mapping[str, BenchResult]) -> Any:
    e = results.get("efficiency")
    if e is None or not e.data.get("hookbridge"):
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    hb, nv = e.data["hookbridge"], e.data["naive"]
    ax.scatter(
        [r["duration"] for r in nv],
        [r["actual"] for r in nv],
        s=10,
        color=GREY,
        label=f"naive, every 2 s ({e.data['naive_ratio']:.2f}x ideal)",
    )
    ax.scatter(
        [r["duration"] for r in hb],
        [r["actual"] for r in hb],
        s=10,
        color=BLUE,
        label=f"hookbridge ({e.data['hookbridge_ratio']:.2f}x ideal)",
    )
    ideal = sorted((r["duration"], r["ideal"]) for r in hb)
    ax.step(
        [d for d, _ in ideal],
        [i for _, i in ideal],
        where="post",
        color=ORANGE,
        label="ideal (Nutrient's policy, no jitter)",
    )
    ax.set_xlabel("vendor duration, s")
    ax.set_ylabel("vendor requests for the run")
    ax.set_title("Vendor requests per run: submit + polls + result")
    ax.legend(fontsize=8)
    return fig


def _delay(results: Mapping[str, BenchResult]) -> Any:
    e = results.get("efficiency")
    if e is None or not e.data.get("hookbridge"):
        return None
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for rows, label, color in (
        (e.data["hookbridge"], "hookbridge (callback received)", BLUE),
        (e.data["naive"], "naive (result in hand)", GREY),
    ):
        delays = sorted(r["delay"] for r in rows if r.get("delay") is not None)
        if delays:
            ax.plot(
                delays, [100 * (i + 1) / len(delays) for i in range(len(delays))], color=color, label=label
            )
    ax.set_xlabel("vendor finished → app knows, s")
    ax.set_ylabel("% of runs")
    ax.set_title("How soon the app hears")
    ax.legend(fontsize=8)
    after = sorted(r["after_poll"] * 1000 for r in e.data["hookbridge"] if r.get("after_poll") is not None)
    if after:
        ax2.plot(after, [100 * (i + 1) / len(after) for i in range(len(after))], color=BLUE)
        ax2.axvline(50, color=ORANGE, linestyle="--", linewidth=1)
        ax2.text(50, 5, " 50 ms target", color=ORANGE, fontsize=8)
    ax2.set_xlabel("event timestamp (after the poll that saw it done) → callback received, ms")
    ax2.set_title("Callback after the deciding poll")
    return fig


def _api(results: Mapping[str, BenchResult]) -> Any:
    a = results.get("api")
    if a is None:
        return None
    phases = [
        ("POST, URL doc", a.data["post_url"]),
        ("POST, 1 KiB inline", a.data["post_inline"]),
        ("GET", a.data["get"]),
    ]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3))
    ax.bar([p[0] for p in phases], [p[1]["rps"] for p in phases], color=BLUE)
    ax.set_ylabel("requests/s")
    ax.set_title(f"One API process, concurrency {a.data['concurrency']}")
    ax2.bar([p[0] for p in phases], [p[1]["p50_ms"] for p in phases], 0.4, label="p50", color=BLUE)
    ax2.bar(
        [i + 0.4 for i in range(len(phases))],
        [p[1]["p99_ms"] for p in phases],
        0.4,
        label="p99",
        color=ORANGE,
    )
    ax2.set_ylabel("ms")
    ax2.set_title("Latency")
    ax2.legend(fontsize=8)
    return fig
