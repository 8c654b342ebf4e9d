"""The benchmarks run: the cheapest one, in its quick mode, produces its figures and the page with its plot.

Speed is never asserted here: only that the benchmark ran against real processes and reported numbers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bench import api, report
from bench._common import machine
from service.store import Store
from tests.conftest import base_env
from tests.store.test_lua import _run
from tests.store.test_lua import store as store  # the fixture


@pytest.mark.slow
async def test_the_api_benchmark_produces_its_figures_and_the_page(tmp_path: Path) -> None:
    result = await api.run(quick=True, concurrency=4, seconds=0.5)

    assert result.name == "api"
    assert len(result.figures) == 10  # three phases x (rate, p99), the bare floor, two shares, the cost ratio
    assert all(f.value is not None and f.value > 0 for f in result.figures)
    assert {"post_url", "post_inline", "get", "bare"} <= set(result.data)

    written = report.write(
        [result], machine(), tmp_path, command="python -m bench.run --only api", total_s=1.0
    )
    page = (tmp_path / "performance.md").read_text()
    assert "POST /v1/runs" in page and "GET /v1/runs/{id}" in page
    assert (tmp_path / "perf" / "api.png").stat().st_size > 0
    assert set(written) == {tmp_path / "performance.md", tmp_path / "perf" / "api.png"}

    # --update rewrites the api section in place, and says so under the command.
    report.update([result], machine(), tmp_path, command="python -m bench.run --only api --update")
    updated = (tmp_path / "performance.md").read_text()
    # one row in the commands' table, two in the targets' (the shares of the bare handler)
    assert updated.count("## The API alone") == 1 and updated.count("| api | ") == 3
    assert "- **Updated**: " in updated and "floor: bare starlette" in updated


async def test_the_feed_benchmark_measures_every_event_for_every_reader() -> None:
    from bench import feed

    result = await feed.run(quick=True, events=5, interval_ms=20)
    assert [p["samples"] for p in result.data["phases"]] == [5, 80]  # 1 reader, then 16, each sees all
    assert all(f.value is not None and f.value >= 0 for f in result.figures)


def test_the_api_profile_runs_a_submit_and_a_read_per_phase() -> None:
    """``bench.api_profile`` drives the app in-process: its submits must be accepted (a vendor without its
    key is refused at submit, which once left it reading an ``id`` from a 422). With ``--parts`` each
    phase's CPU is shared out over the parts of a request, the whole of it, a part Redis's."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.api_profile", "--parts"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    cpu = re.findall(r"^(post|get): ([0-9.]+) ms of CPU per request$", done.stdout, re.MULTILINE)
    assert [name for name, _ in cpu] == ["post", "get"], done.stdout
    assert all(float(ms) > 0 for _, ms in cpu)
    tables = done.stdout.split("by part")[1:]
    assert len(tables) == 2, done.stdout
    for table in tables:
        rows = re.findall(r"^\| (.+?) \| ([0-9.]+) % \| ([0-9]+) \|$", table, re.MULTILINE)
        shares = {part: float(share) for part, share, _ in rows}
        assert abs(sum(shares.values()) - 100) < 1, table
        assert shares["Redis: redis-py, the socket, the reply"] > 0, table


@pytest.mark.slow
async def test_the_cluster_benchmark_measures_one_node_and_a_cluster_in_one_run() -> None:
    """``bench.cluster`` polls on one Redis, then on a 3-primary cluster of real processes: both phases
    poll, and each primary's keys are counted (stage one: hookbridge's keys share one slot)."""
    from bench import cluster

    result = await cluster.run(n=60, window_s=2.0)
    one, many = result.data["one_node"], result.data["cluster"]
    assert one["polls_per_s"] > 0 and many["polls_per_s"] > 0
    assert len(one["keys"]) == 1 and len(many["keys"]) == 3
    assert sum(many["keys"]) >= 60  # every run's record, at least, is on some primary
    assert len(many["primary_cpu"]) == 3 and many["replica_cpu"] >= 0
    assert len(result.figures) == 12 and all(f.value is not None for f in result.figures)


async def test_the_scale_benchmark_measures_what_a_full_trail_adds(store: Store) -> None:
    """``bench.scale``'s last step (it once failed there, after minutes of runs, on a key it had not
    followed through a rename): a run's record with a full trail, against the record as it is."""
    from bench.scale import _full_trail_extra

    run = await _run(store)
    assert await _full_trail_extra(store.redis, [run.id]) > 0


async def test_the_scale_benchmark_times_a_sweeper_pass(store: Store, redis_url: str) -> None:
    """``bench.scale``'s sweeper figure (it once reported an error in place of the figure: a local name
    hid the key builders' module)."""
    from bench.scale import _sweep_cost

    client = aioredis.Redis.from_url(redis_url, decode_responses=True)

    class Started:  # what _sweep_cost reads of bench._common.Cluster: its settings and its client
        env = base_env(redis_url)

        async def redis_client(self) -> aioredis.Redis:
            return client

    await _run(store)
    try:
        cost = await _sweep_cost(Started(), 0)  # type: ignore[arg-type]  # no Redis process of its own
    finally:
        await client.aclose()
    assert "error" not in cost and cost["keys"] == 1 and cost["cpu_s"] >= 0
    assert cost["active"] == 1 and cost["redis_cpu_s"] == 0.0  # the run in flight, in its active set


@pytest.mark.slow
async def test_the_sweep_measures_each_size_and_plots_them(tmp_path: Path) -> None:
    from bench import sweep

    result = await sweep.run(sizes=(20, 40), duration="2,3")
    rows = result.data["rows"]
    assert [r["runs"] for r in rows] == [20, 40]
    for row in rows:
        # so few runs have no steady state (the burst's backlog clears only as they end): that one may be None
        unsteady = ("steady_p99_s", "cpu_poll_us")  # a steady state's figures
        assert all(row[key] is not None for key in sweep.PICK if key not in unsteady), row
        # no steady state, no steady state's CPU a poll (scale's figure is then the whole run's)
        assert (row["steady_p99_s"] is None) <= (row["cpu_poll_us"] is None), row
        assert row["in_flight_b"] > 0 and row["finished_b"] > 0 and row["rss_mib"] > 0
    report.write([result], machine(), tmp_path, command="python -m bench.run --only sweep", total_s=1.0)
    page = (tmp_path / "performance.md").read_text()
    assert "## 1,000 to 100,000 runs in flight" in page and "40 in flight: worker peak RSS" in page
    assert (tmp_path / "perf" / "sweep.png").stat().st_size > 0


def _timeline(rows: list[tuple[int, int]]) -> list[dict[str, int]]:
    """Rows a second apart: (steps due, runs in flight)."""
    return [{"t": t, "due_now": due, "in_flight": flying} for t, (due, flying) in enumerate(rows)]


@pytest.mark.parametrize(
    ("rows", "window"),
    [
        # the backlog clears at 3 s with every run in flight, which holds to 5 s: a steady state, 3-5 s
        ([(900, 1000), (800, 1000), (400, 1000), (5, 1000), (2, 990), (0, 950), (0, 500)], (3, 5)),
        # due steps before every run reached the vendor (at 1.5 s) do not open the window
        ([(0, 1000), (0, 1000), (30, 1000), (4, 1000), (4, 1000)], (3, 4)),
        # the backlog clears only once most runs have ended: no steady state (the sweep's 100,000 once
        # reported the polls of runs ending here as one, "met")
        ([(900, 1000), (900, 1000), (700, 950), (100, 600), (5, 300), (0, 100)], (4, None)),
        # one row of it is not a window
        ([(900, 1000), (900, 1000), (5, 950), (0, 700)], (2, None)),
        # the backlog never clears: opened at the last row, no steady state
        ([(900, 1000), (900, 1000), (800, 100)], (2, None)),
    ],
)
def test_the_scale_benchmarks_steady_window(
    rows: list[tuple[int, int]], window: tuple[int, int | None]
) -> None:
    from bench.scale import steady_window

    cleared, end = steady_window(_timeline(rows), at_vendor_s=1.5, n=1000)
    assert (cleared["t"], end["t"] if end is not None else None) == window


@pytest.mark.parametrize(
    ("rows", "end"),
    [
        # cleared at 3 s with every run in flight until 5 s: that window, to the last row before an end
        ([(900, 1000), (800, 1000), (400, 1000), (5, 1000), (2, 1000), (0, 1000), (0, 990)], 5),
        # a run ended at the row where the backlog cleared: no window of every run in flight
        ([(900, 1000), (900, 1000), (5, 999), (0, 999), (0, 990)], None),
        # every run in flight to the end of the timeline
        ([(900, 1000), (5, 1000), (0, 1000), (0, 1000)], 3),
        # one row of it is not a window
        ([(900, 1000), (900, 1000), (5, 1000), (0, 999)], None),
    ],
)
def test_the_scale_benchmarks_window_of_every_run_in_flight(
    rows: list[tuple[int, int]], end: int | None
) -> None:
    """``bench.scale``'s second steady window: from the backlog cleared until the first run ended (the
    90 % window also holds the first tenth of the ends, a burst of result fetches and callbacks)."""
    from bench.scale import steady_window, whole_window_end

    timeline = _timeline(rows)
    cleared, _ = steady_window(timeline, at_vendor_s=0.5, n=1000)
    found = whole_window_end(timeline, cleared, n=1000)
    assert (found["t"] if found is not None else None) == end


async def test_the_memory_benchmark_measures_a_finished_run_without_its_relay_marks() -> None:
    """``bench.memory`` on a few runs: per run in flight and finished, and the relay's marks (one key a
    run, gone 10 minutes after its last relay) measured apart from what is kept for RETENTION_S."""
    from bench import memory

    result = await memory.run(runs_n=40, polls=3, sample=5)
    figures = {f.name: f.value for f in result.figures}
    # A key a run, dropped before the finished figure (too few runs here for their bytes to beat the noise
    # of used_memory: the figure is only reported).
    assert result.data["finished"]["marks"] == 40
    marks = figures["the relay's marks per finished run, until they expire (RELAY_MARK_MS, 10 minutes)"]
    assert marks == result.data["finished"]["marks_per_run"]
    finished = figures["Redis memory per finished run (called back, kept for RETENTION_S)"]
    assert finished is not None and finished > 500  # the record, its events, the delivery, ...
    # The poll after the others, its progress unchanged, emits nothing: the feed gains only the run's end,
    # so its figure is a change without a relay, set beside the polls with one.
    assert result.data["finished"]["feed_entries"] == result.data["in_flight"]["feed_entries"] + 1
    assert result.data["transition"]["quiet"]["worker_us"] > 0
    # Where a poll's change spends. No subscription takes a progress, so on this one Redis server each
    # run.progress goes to the feed in its transition's step: no relay, and the server's time is all the
    # transitions' script (on a cluster the relay's two scripts would take their share).
    cost = result.data["transition"]
    assert cost["relay_us"] == 0.0 < cost["worker_us"]
    assert cost["redis_by_script"] == {"transitions": 1.0}
    assert any(note.startswith("a poll's change, where the CPU goes") for note in result.notes)


def test_the_soak_counts_arqs_own_keys_under_their_tag_as_lasting() -> None:
    """arq's keys carry the tag ``{arq:abort}`` (service/worker/queue.py: one slot on a cluster); the
    soak's audit once split the tag at its colon and called arq's health check an unexpected key."""
    from bench import soak
    from service.worker.queue import QUEUE_NAME

    assert soak._kind(f"{QUEUE_NAME}:health-check") in soak.LASTING
    assert soak._kind("arq:in-progress:{arq:abort}sweep:1") in soak.LASTING
    assert soak._kind("hb:{hb03}:run:run_X") not in soak.LASTING
