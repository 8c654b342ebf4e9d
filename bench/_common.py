"""What every benchmark shares: real ``hookbridge`` subprocesses on loopback around a private Redis, a
receiver in this process, a fast client for the API, /proc readings (CPU, memory), Prometheus parsing,
and the figures each benchmark hands back to ``bench.run``.

Nothing here asserts a speed: the benchmarks measure and report, the tests only check that they ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.chaos import Proc
from service.dev.embedded_redis import EmbeddedRedis, free_port
from service.dev.stack import Servers
from service.store import keys

KEY = "bench-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CLK_TCK = os.sysconf("SC_CLK_TCK")
BUSY, STEAL = "_machine_busy", "_machine_steal"
T = TypeVar("T")


# Figures ----------------------------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured number, with its target when the issue sets one (``goal``, and whether higher is
    better)."""

    name: str
    value: float | None
    unit: str
    target: str = ""
    goal: float | None = None
    higher_is_better: bool = True
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        if self.value is None:
            return False
        return self.value >= self.goal if self.higher_is_better else self.value <= self.goal

    def missed_by(self) -> str:
        """How far from the goal, for a missed target: "" otherwise."""
        if self.met is not False or self.value is None or self.goal is None:
            return ""
        if self.goal == 0:
            return f"{number(self.value)} over"
        if self.higher_is_better:
            return f"{(1 - self.value / self.goal) * 100:.0f} % short"
        return f"{(self.value / self.goal - 1) * 100:.0f} % over"

    def shown(self) -> str:
        if self.value is None:
            return "n/a"
        return f"{number(self.value)} {self.unit}".strip()


def number(v: float) -> str:
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if abs(v) >= 0.1 else f"{v:.3f}"


@dataclass
class BenchResult:
    name: str
    command: str
    quick_command: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # raw series for the plots and the report
    elapsed_s: float = 0.0

    def add(self, *figures: Figure) -> None:
        self.figures.extend(figures)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BenchResult:
        figures = [Figure(**f) for f in raw.get("figures", [])]
        return cls(**{**raw, "figures": figures})

    def table(self) -> str:
        rows = ["| figure | value | target |", "|---|---|---|"]
        for f in self.figures:
            rows.append(f"| {f.name}{f' ({f.note})' if f.note else ''} | {f.shown()} | {verdict(f)} |")
        return "\n".join(rows)


def verdict(f: Figure) -> str:
    if f.met is None:
        return f.target
    if f.met:
        return f"{f.target}: met"
    by = f.missed_by()  # "" where there is no figure to compare (a run with no steady state)
    return f"{f.target}: **missed**" + (f", {by}" if by else " (no figure)")


def print_result(result: BenchResult, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps(result.to_json(), indent=2, default=str))
        return
    print(f"\n## {result.name} ({result.elapsed_s:.0f} s)\n")
    print(result.table())
    for note in result.notes:
        print(f"- {note}")


def run_main(main: Coroutine[Any, Any, T]) -> T:
    """The bench process is a client and a receiver at once: run it on uvloop, like hookbridge's own."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.run(main)
    return uvloop.run(main)


# /proc ------------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat`` utime + stime)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, every core together (``/proc/stat``)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` (now) and ``VmHWM`` (peak) from ``/proc/<pid>/status``, KiB."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(rest.split()[0])
    except OSError:
        pass
    return out


class Sampler:
    """Samples the CPU time of named processes (and anything else, via ``extra``) every ``period_s``."""

    def __init__(self, pids: Mapping[str, int], period_s: float = 0.5) -> None:
        self.pids = dict(pids)
        self.period_s = period_s
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.extra: list[tuple[float, dict[str, Any]]] = []
        self._task: asyncio.Task[None] | None = None
        self._probes: list[Callable[[], Awaitable[dict[str, Any]]]] = []

    def probe(self, fn: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._probes.append(fn)

    def take(self) -> None:
        row = {n: cpu_seconds(p) for n, p in self.pids.items()}
        row[BUSY], row[STEAL] = machine_cpu_seconds()
        self.samples.append((time.time(), row))

    async def _loop(self) -> None:
        while True:
            self.take()
            row: dict[str, Any] = {}
            for fn in self._probes:
                with contextlib.suppress(Exception):
                    row.update(await fn())
            if row:
                self.extra.append((time.time(), row))
            await asyncio.sleep(self.period_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.take()

    def usage(self, t0: float, t1: float) -> dict[str, float]:
        """Share of one core each process used between two instants (from the nearest samples)."""
        if len(self.samples) < 2:
            return {}
        before = max((s for s in self.samples if s[0] <= t0), key=lambda s: s[0], default=self.samples[0])
        after = min((s for s in self.samples if s[0] >= t1), key=lambda s: s[0], default=self.samples[-1])
        span = after[0] - before[0]
        if span <= 0:
            return {}
        out = {n: round((after[1][n] - before[1][n]) / span, 3) for n in self.pids}
        busy = (after[1][BUSY] - before[1][BUSY]) / span
        # What the rest of the machine used meanwhile (other processes, the kernel's own threads), and
        # what the hypervisor took: a figure measured while these were high is disturbed.
        out["other processes"] = round(max(0.0, busy - sum(out.values())), 3)
        out["steal"] = round((after[1][STEAL] - before[1][STEAL]) / span, 3)
        return out


class CpuQuota:
    """Each given process in a cgroup of its own, allowed ``cores`` of a core (the CFS quota): on a machine
    whose cores the simulator and Redis share with the workers, N processes at a fixed share each show
    what each adds, as N cores of their own would. cgroup v1's ``cpu`` controller or cgroup v2 with
    ``cpu`` enabled, as root; anything else is an error that says so, never a run without the quota."""

    PERIOD_US = 100_000

    def __init__(self, cores: float) -> None:
        v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
        if (v1 / "cpu.cfs_quota_us").exists():
            self.root, self.v2 = v1, False
        elif "cpu" in _read(v2 / "cgroup.subtree_control").split():
            self.root, self.v2 = v2, True
        else:
            raise SystemExit("--worker-cores needs cgroup v1's cpu controller or v2's cpu, as root")
        self.quota_us = max(1000, round(cores * self.PERIOD_US))
        self.groups: list[Path] = []

    def limit(self, pids: Iterable[int]) -> None:
        pids = list(pids)
        if not pids:  # a run without the quota would be reported as one with it
            raise SystemExit("--worker-cores: no worker process found to limit")
        for pid in pids:
            group = self.root / f"hookbridge-bench-{os.getpid()}-{len(self.groups)}"
            group.mkdir()
            self.groups.append(group)
            if self.v2:
                (group / "cpu.max").write_text(f"{self.quota_us} {self.PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(self.quota_us))
            (group / "cgroup.procs").write_text(str(pid))  # the whole process, every thread

    def close(self) -> None:
        """Hands what is left in the groups back to the root and removes them."""
        for group in self.groups:
            for pid in _read(group / "cgroup.procs").split():
                with contextlib.suppress(OSError):  # it may have exited since
                    (self.root / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                group.rmdir()
        self.groups.clear()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def cpu_note(usage: Mapping[str, float]) -> str:
    ours = {n: v for n, v in usage.items() if n not in ("other processes", "steal")}
    text = ", ".join(f"{n} {v * 100:.0f} %" for n, v in sorted(ours.items(), key=lambda kv: -kv[1]))
    extra = [f"{n} {usage[n] * 100:.0f} %" for n in ("other processes", "steal") if usage.get(n, 0) >= 0.01]
    return text + (f" (besides: {', '.join(extra)})" if extra else "")


# Prometheus -------------------------------------------------------------------------------------------


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return out


def metric_sum(
    metrics: Mapping[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in metrics.items() if n == name and want <= set(lab))


def histogram(
    metrics: Mapping[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> list[tuple[float, float]]:
    """Cumulative ``(le, count)`` of a histogram, summed over the series that match ``labels``."""
    want = set(labels.items())
    buckets: dict[float, float] = {}
    for (n, lab), v in metrics.items():
        if n == name + "_bucket" and want <= set(lab):
            le = float(dict(lab)["le"])
            buckets[le] = buckets.get(le, 0.0) + v
    return sorted(buckets.items())


def histogram_delta(
    later: list[tuple[float, float]], earlier: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    before = dict(earlier)
    return [(le, c - before.get(le, 0.0)) for le, c in later]


def quantile(buckets: list[tuple[float, float]], q: float) -> tuple[float | None, bool]:
    """The q-quantile of a cumulative histogram, interpolated linearly within its bucket (as Prometheus'
    ``histogram_quantile`` does). Returns (value, beyond): beyond is True when it falls in the +Inf
    bucket, and the value is then the largest finite bound (a lower bound of the truth)."""
    if not buckets or buckets[-1][1] <= 0:
        return None, False
    rank = q * buckets[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if le == float("inf"):
                return prev_le, True
            frac = (rank - prev_c) / (c - prev_c) if c > prev_c else 0.0
            return prev_le + (le - prev_le) * frac, False
        prev_le, prev_c = le, c
    return prev_le, True


def percentile(values: Iterable[float], q: float) -> float | None:
    data = sorted(values)
    if not data:
        return None
    k = (len(data) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


# The machine ------------------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
        mem = f"{kib / 1024 / 1024:.1f} GiB"
    redis_version = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        from service.dev.embedded_redis import redis_server_binary

        out = subprocess.run([redis_server_binary(), "--version"], capture_output=True, text=True, timeout=10)
        redis_version = out.stdout.split()[2].removeprefix("v=") if out.stdout else ""
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        root = Path(__file__).resolve().parent.parent
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "service"], cwd=root, capture_output=True, text=True
        )
        commit = head.stdout.strip() + (
            " (service/ with uncommitted changes)" if dirty.stdout.strip() else ""
        )
    return {
        "commit": commit,
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis": redis_version,
        "date": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
    }


# The processes ----------------------------------------------------------------------------------------


class ClusterNodes(Protocol):
    """A Redis Cluster of local processes (tests/redis_cluster.py's), primaries first."""

    primaries: int
    nodes: list[Any]

    @property
    def seeds(self) -> list[tuple[str, int]]: ...


def environment(redis_url: str, sim_url: str, **overrides: str) -> dict[str, str]:
    """Production defaults except where a benchmark says otherwise (``overrides``, without the prefix for
    hookbridge settings; ``SIM_...`` for the simulator's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    env.update(
        {
            "HOOKBRIDGE_REDIS_URL": redis_url,
            "HOOKBRIDGE_API_KEYS": f"bench:{KEY}",
            "HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "HOOKBRIDGE_WORKER_METRICS_PORT": "0",
            "HOOKBRIDGE_LOG_FORMAT": "json",
            "HOOKBRIDGE_CLOUDSQUID_PROJECT": "bench",
            "HOOKBRIDGE_CLOUDSQUID_TABLE_ID": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
            "HOOKBRIDGE_SIM_SEED": "7",
            # One bench client submits far faster than a tenant may (the per-client quota): lift it.
            "HOOKBRIDGE_SUBMIT_RATE_PER_S": "1000000",
            "HOOKBRIDGE_SUBMIT_BURST": "1000000",
            "HOOKBRIDGE_MAX_SUBSCRIPTIONS_PER_CLIENT": "100000",
            # The benches' document URLs are placeholders the simulator never downloads: Nutrient gets the
            # URL (not fetched and uploaded), and no request budget unless a bench sets one.
            "HOOKBRIDGE_NUTRIENT_URL_INPUT": "send",
            "HOOKBRIDGE_NUTRIENT_MAX_RPS": "0",
        }
    )
    for vendor, path in (("NUTRIENT", "/nutrient"), ("CLOUDSQUID", "/cloudsquid/api"), ("UPTIQ", "/uptiq")):
        env[f"HOOKBRIDGE_{vendor}_BASE_URL"] = sim_url + path
        env[f"HOOKBRIDGE_{vendor}_API_KEY"] = f"sim-{vendor.lower()}-key"
    env.update({f"HOOKBRIDGE_{k}": v for k, v in overrides.items()})
    return env


@dataclass
class Callback:
    received: float  # Unix time the receiver read it
    type: str
    run_id: str
    vendor_run_id: str | None
    timestamp: float | None  # the event's own ``timestamp``, Unix time
    webhook_id: str


class Receiver:
    """The app's callback URL, in this process: records every event once (by ``webhook-id``)."""

    def __init__(self) -> None:
        self.callbacks: list[Callback] = []
        self.seen: set[str] = set()
        self.requests = 0
        self.terminal = asyncio.Event()
        self.expect_terminal: int | None = None
        self.terminal_count = 0

    async def hook(self, request: Request) -> Response:
        body = await request.body()
        received = time.time()
        self.requests += 1
        webhook_id = request.headers.get("webhook-id", "")
        if webhook_id in self.seen:
            return Response(status_code=204)
        self.seen.add(webhook_id)
        event = json.loads(body)
        run = (event.get("data") or {}).get("run") or {}
        stamp = event.get("timestamp")
        self.callbacks.append(
            Callback(
                received=received,
                type=event.get("type", ""),
                run_id=run.get("id", ""),
                vendor_run_id=run.get("vendor_run_id"),
                timestamp=datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None,
                webhook_id=webhook_id,
            )
        )
        if event.get("type") in ("run.succeeded", "run.failed", "run.canceled"):
            self.terminal_count += 1
            if self.expect_terminal is not None and self.terminal_count >= self.expect_terminal:
                self.terminal.set()
        return Response(status_code=204)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hooks", self.hook, methods=["POST"])])

    def terminal_callbacks(self) -> list[Callback]:
        return [c for c in self.callbacks if c.type in ("run.succeeded", "run.failed", "run.canceled")]


class Cluster:
    """Redis (AOF, ``appendfsync everysec``), ``hookbridge simulator``, ``api`` and ``worker`` as
    subprocesses on loopback, and a receiver in this process."""

    def __init__(
        self,
        name: str,
        overrides: Mapping[str, str] | None = None,
        *,
        api: bool = True,
        worker: bool = True,
        simulator: bool = True,
        receiver: bool = True,
        redis_cluster: ClusterNodes | None = None,
    ) -> None:
        self.name = name
        # A Redis Cluster started by the caller (HOOKBRIDGE_REDIS_CLUSTER_NODES), else a Redis of our own.
        self.redis_cluster = redis_cluster
        self.overrides = dict(overrides or {})
        self.want_api, self.want_worker, self.want_sim, self.want_receiver = api, worker, simulator, receiver
        self.logdir = Path(tempfile.mkdtemp(prefix=f"hookbridge-bench-{name}-"))
        self.redis = EmbeddedRedis(appendfsync="everysec")
        self.sim_port, self.api_port, self.metrics_port = free_port(), free_port(), free_port()
        self.sim_url = f"http://127.0.0.1:{self.sim_port}"
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}"
        self.procs: dict[str, Proc] = {}
        self.servers = Servers()
        self.receiver = Receiver()
        self.receiver_url = ""
        self.session: aiohttp.ClientSession | None = None
        self.env: dict[str, str] = {}
        self._redis: aioredis.Redis | None = None

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self.session is not None
        return self.session

    @property
    def worker_processes(self) -> int:
        """``WORKER_PROCESSES``: above 1 the worker is a supervisor, process i on metrics port + i."""
        return int(self.overrides.get("WORKER_PROCESSES", "1"))

    def worker_children(self) -> list[int]:
        """The supervisor's worker processes, oldest first (none while the worker is one process)."""
        if self.worker_processes <= 1 or "worker" not in self.procs:
            return []
        pid = self.procs["worker"].process.pid
        try:
            return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def worker_pids(self) -> list[int]:
        """The processes that poll: the worker itself, or the supervisor's children."""
        if self.worker_processes > 1:
            return self.worker_children()
        return [self.procs["worker"].process.pid] if "worker" in self.procs else []

    def pids(self) -> dict[str, int]:
        out = {name: p.process.pid for name, p in self.procs.items()}
        if self.redis_cluster is not None:
            primaries = self.redis_cluster.primaries
            for i, node in enumerate(self.redis_cluster.nodes):
                if node.process is not None:
                    role = f"redis primary {i}" if i < primaries else f"redis replica {i - primaries}"
                    out[role] = node.process.pid
        for i, child in enumerate(self.worker_children()):
            out[f"worker {i}"] = child
        if self.redis.process is not None:
            out["redis"] = self.redis.process.pid
        out["bench (client, receiver)"] = os.getpid()
        return out

    async def __aenter__(self) -> Cluster:
        overrides = {"WORKER_METRICS_PORT": str(self.metrics_port), **self.overrides}
        if self.redis_cluster is None:
            self.redis.start()
            self.env = environment(self.redis.url, self.sim_url, **overrides)
        else:
            self.env = environment("", self.sim_url, **overrides)
            del self.env["HOOKBRIDGE_REDIS_URL"]
            seeds = ",".join(f"{host}:{port}" for host, port in self.redis_cluster.seeds)
            self.env["HOOKBRIDGE_REDIS_CLUSTER_NODES"] = seeds
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256), timeout=aiohttp.ClientTimeout(total=60)
        )
        try:
            if self.want_sim:
                self.procs["simulator"] = Proc(
                    "simulator", ["simulator", "--port", str(self.sim_port)], self.env, self.logdir
                )
            if self.want_api:
                self.procs["api"] = Proc(
                    "api", ["api", "--host", "127.0.0.1", "--port", str(self.api_port)], self.env, self.logdir
                )
            if self.want_worker:
                self.procs["worker"] = Proc("worker", ["worker"], self.env, self.logdir)
            if self.want_receiver:
                port = free_port()
                await self.servers.start(self.receiver.app(), port)
                self.receiver_url = f"http://127.0.0.1:{port}/hooks"
            if self.want_sim:
                await self._until_ok(self.sim_url + "/_sim/config", "simulator")
            if self.want_api:
                await self._until_ok(self.api_url + "/readyz", "api")
            if self.want_worker:
                for i in range(self.worker_processes):
                    await self._until_ok(f"http://127.0.0.1:{self.metrics_port + i}/healthz", "worker")
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.servers.stop()
        for proc in self.procs.values():
            proc.stop(timeout=30)
        if self.session is not None:
            await self.session.close()
        if self._redis is not None:
            await self._redis.aclose()
        self.redis.cleanup()
        if (not exc or exc[0] is None) and not os.environ.get("BENCH_KEEP_LOGS"):
            shutil.rmtree(self.logdir, ignore_errors=True)
        else:
            print(f"{self.name}: process logs kept in {self.logdir}", file=sys.stderr)

    async def _until_ok(self, url: str, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.process.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.process.returncode}); logs in {self.logdir}")
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self.http.get(url) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{what} not ready within {timeout}s; logs in {self.logdir}")

    # Talking to the parts -------------------------------------------------------------------------

    async def subscribe(self, event_types: list[str] | None = None) -> str:
        """A subscription to the receiver; without ``event_types`` it gets the default (terminal
        events only: ``run.succeeded``, ``run.failed``, ``run.canceled``)."""
        body: dict[str, Any] = {"url": self.receiver_url}
        if event_types is not None:
            body["event_types"] = event_types
        async with self.http.post(f"{self.api_url}/v1/subscriptions", json=body, headers=AUTH) as response:
            assert response.status == 201, await response.text()
            return str((await response.json())["id"])

    async def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """The worker's metrics; with several worker processes, their sum."""
        out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for i in range(self.worker_processes):
            async with self.http.get(f"http://127.0.0.1:{self.metrics_port + i}/metrics") as response:
                for key, value in parse_metrics(await response.text()).items():
                    out[key] = out.get(key, 0.0) + value
        return out

    async def redis_client(self) -> aioredis.Redis:
        if self._redis is None:
            self._redis = aioredis.Redis.from_url(self.redis.url, decode_responses=True)
        return self._redis

    async def redis_memory(self) -> int:
        """``used_memory`` from ``INFO memory`` without the client buffers (``mem_clients_normal``: the
        query and output buffers of the connections, which come and go with the traffic, not with the
        data) and the AOF buffer, bytes."""
        info = await (await self.redis_client()).info("memory")
        return (
            int(info["used_memory"])
            - int(info.get("mem_clients_normal", 0))
            - int(info.get("mem_aof_buffer", 0))
        )

    async def sim_runs(self, vendor: str = "nutrient") -> list[dict[str, Any]]:
        async with self.http.get(self.sim_url + "/_sim/runs", params={"vendor": vendor}) as response:
            return list((await response.json())["data"])

    async def sim_requests(self, vendor: str = "nutrient") -> list[dict[str, Any]]:
        async with self.http.get(self.sim_url + "/_sim/requests", params={"vendor": vendor}) as response:
            return list((await response.json())["data"])


def url_run(i: int, vendor: str = "nutrient", tag: str = "bench") -> dict[str, Any]:
    """A run whose document is a URL: the smallest submit, with no document bytes kept in Redis."""
    return {
        "vendor": vendor,
        "operation": "extract",
        "document": {"url": f"https://docs.example/{tag}/invoice-{i}.pdf", "media_type": "application/pdf"},
        "metadata": {"i": str(i)},
    }


async def submit_runs(
    cluster: Cluster,
    n: int,
    concurrency: int,
    body: Callable[[int], dict[str, Any]] = url_run,
    on_submitted: Callable[[int, str, float], None] | None = None,
    pace: Callable[[int], Awaitable[None]] | None = None,
) -> list[tuple[str, float]]:
    """Submits ``n`` runs at a fixed concurrency (``pace(i)`` may hold run ``i`` back); returns (run id,
    Unix time answered) in order. Retries 503 and connection faults, as a well-behaved client does."""
    out: list[tuple[str, float]] = [("", 0.0)] * n
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def one(i: int) -> None:
        for _ in range(100):
            try:
                async with cluster.http.post(
                    f"{cluster.api_url}/v1/runs", json=body(i), headers=AUTH
                ) as response:
                    if response.status == 202:
                        out[i] = (str((await response.json())["id"]), time.time())
                        if on_submitted is not None:
                            on_submitted(i, out[i][0], out[i][1])
                        return
                    if response.status != 503:
                        raise RuntimeError(f"submit {i}: {response.status} {await response.text()}")
            except (aiohttp.ClientConnectionError, TimeoutError):
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError(f"submit {i} kept failing")

    async def client() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if pace is not None:
                await pace(i)
            await one(i)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return out


async def until(
    check: Callable[[], Awaitable[bool]], timeout: float, what: str, period: float = 0.2
) -> float:
    """Waits for ``check`` to hold; returns the Unix time it did. Raises TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            if await check():
                return time.time()
        await asyncio.sleep(period)
    raise TimeoutError(f"{what} not reached within {timeout:.0f}s")


@contextlib.asynccontextmanager
async def sampling(cluster: Cluster, period_s: float = 0.5) -> AsyncIterator[Sampler]:
    sampler = Sampler(cluster.pids(), period_s)
    sampler.start()
    try:
        yield sampler
    finally:
        await sampler.stop()


async def expire_relay_marks(redis: aioredis.Redis, client: str) -> int:
    """Drops the relay's marks of ``client`` (one key a run, ``keys.relayed``), as their expiry would 10
    minutes (RELAY_MARK_MS) after a run's last relay: what a finished run keeps for RETENTION_S is
    measured without them. Returns how many there were."""
    marks = [raw async for raw in redis.scan_iter(match=keys.relayed(client, "*"), count=1000)]
    for at in range(0, len(marks), 1000):
        pipe = redis.pipeline(transaction=False)
        for key in marks[at : at + 1000]:  # one key a DEL: on a cluster they need not share a slot
            pipe.delete(key)
        await pipe.execute()
    return len(marks)
