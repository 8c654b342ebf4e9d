"""Redis memory per run: in flight with a full vendor trail, and finished (kept for ``RETENTION_S``).

    python -m bench.memory                  # 10,000 runs
    python -m bench.memory --runs 1000
    python -m bench.memory --no-progress    # a vendor that reports no progress (no run.progress events)
    python -m bench.memory --cluster 3      # on a Redis Cluster of 3 primaries (a replica each)
    python -m bench.memory --runs 600 --instructions  # Redis under valgrind: its instructions per change

Memory, not time, so it drives the store directly: a private Redis (no AOF) and the ``Store`` with the
calls and the decisions the API and the worker make, in their order, for every run:

- the submit (``lifecycle.new_run``, ``Runs.create_run``: a URL document and one metadata pair, as
  ``bench.scale``'s runs);
- the vendor's acceptance and ``--polls`` polls (``core.runs.after_submit`` / ``after_poll`` with what the
  Nutrient adapter makes of the simulator's answers: ``running``, its progress, the poll policy's
  intervals; every poll's progress moved, so ``run.progress`` goes to the feed as often as
  ``PROGRESS_MIN_INTERVAL_S`` lets it), applied as the worker's batcher applies them
  (``Runs.transitions``): 12 polls fill the trail (``trail.HEAD + trail.TAIL`` entries, and it counts the
  dropped ones);
- the end: ``done`` with the result asset and the usage the adapter reads (``after_poll`` with
  ``needs_fetch``), then the callback's delivery to the one subscription (the default: terminal events),
  claimed and recorded as the deliverer does (``claim_deliveries``, ``record_attempt`` with a 204).

Measured after each phase: ``used_memory`` (less the client and AOF buffers) against the baseline, per run;
and ``MEMORY USAGE`` of each kind of key, averaged over a sample of runs for the keys of one run, and
divided by the runs for the keys they share (the due set, the indexes, the feed), so that the table says
what each key costs a run. What neither accounts for is the main dictionary's and the expiry
dictionary's entries and buckets.

And the CPU of the polls' changes, this process's (with the garbage collector as a worker process has it,
``runtime.tune_gc``) and the Redis server's, per change: with every poll's progress moved (a run.progress
each, relayed to the client's feed), then for one more poll without (no event, no relay); of the first,
what the relay after the transitions took of this process's (``Runs._relay_after``) and of the server's
each script (the shares of their time in ``SLOWLOG``: one server only).

``--instructions`` runs Redis under valgrind's callgrind and counts the instructions it executes while the
polls are applied, per change: the same count for the same work however busy the host is, where a CPU
time moves by ±20 % between runs on a shared 2-core host (compare two trees by it; valgrind makes Redis
~50 times slower, so use a few hundred runs, and the memory figures of that run stand as they are).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import hashlib
import json
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis.cluster import ClusterNode

from bench._common import BenchResult, Figure, environment, expire_relay_marks, print_result, run_main
from service.config.settings import Settings
from service.core import domain, lifecycle, runs
from service.core.domain import AttemptOutcome
from service.core.records import Attempt, Run, Subscription, Transition
from service.dev.embedded_redis import EmbeddedRedis
from service.store import Store, bodies, connect, keys
from service.vendors import base
from service.vendors.registry import load_settings
from service.worker import runtime
from tests.redis_cluster import RedisCluster

CLIENT = "bench"
VENDOR = "nutrient"
IN_FLIGHT_GOAL = 1024  # issue 30: bytes per run in flight, with a full trail
FINISHED_GOAL = 2048  # issue 30: bytes per finished run kept for RETENTION_S
BATCH = 250  # runs per batch of transitions (the worker's batcher takes about 74 a call)
SAMPLE = 100  # runs whose keys are measured one by one


class Instructions:
    """Redis under valgrind's callgrind: :meth:`zero` its count, then :meth:`read` what it has executed
    since (``callgrind_control``, which dumps the count to a file of its own)."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="hookbridge-callgrind-")
        self.pid = 0

    def prefix(self) -> list[str]:
        return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.directory}/redis.out"]

    def _control(self, *args: str) -> None:
        command = ["callgrind_control", *args, str(self.pid)]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def zero(self) -> None:
        self._control("-z")

    def read(self) -> int:
        before = set(glob.glob(f"{self.directory}/redis.out.*"))
        self._control("-d")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for path in set(glob.glob(f"{self.directory}/redis.out.*")) - before:
                with open(path) as dump:
                    for line in dump:
                        if line.startswith("summary:"):
                            return int(line.split()[1])
            time.sleep(0.1)
        raise RuntimeError("callgrind wrote no dump")


async def run(
    runs_n: int | None = None,
    polls: int = 12,
    sample: int = SAMPLE,
    progress: bool = True,
    quick: bool = False,
    cluster: int = 0,
    instructions: bool = False,
) -> BenchResult:
    """``quick`` (``bench.run --quick``): 1,000 runs unless ``runs_n`` says otherwise; else 10,000."""
    if runs_n is None:
        runs_n = 1000 if quick else 10_000
    started = time.monotonic()
    result = BenchResult(
        name="memory",
        command="python -m bench.memory",
        quick_command="python -m bench.memory --runs 1000",
    )
    counter = Instructions() if instructions else None
    server: RedisCluster | EmbeddedRedis
    if cluster:
        server = RedisCluster(primaries=cluster, replicas=1)
        server.start()
    else:
        server = EmbeddedRedis(appendonly=False, prefix=counter.prefix() if counter else ())
        server.start(timeout_s=60 if counter else 10)
        if counter and server.process:
            counter.pid = server.process.pid
    try:
        # One subscription takes every callback: its in-flight limit is not what is measured.
        env = environment(server.url, "http://127.0.0.1:9", SUBSCRIPTION_MAX_IN_FLIGHT="1000")
        redis: aioredis.Redis
        if isinstance(server, RedisCluster):
            env.pop("HOOKBRIDGE_REDIS_URL", None)
            env["HOOKBRIDGE_REDIS_CLUSTER_NODES"] = ",".join(f"{h}:{p}" for h, p in server.seeds)
            nodes = [ClusterNode(h, p) for h, p in server.seeds]
            redis = cast(aioredis.Redis, aioredis.RedisCluster(startup_nodes=nodes, decode_responses=True))
        else:
            redis = aioredis.Redis.from_url(server.url, decode_responses=True)
        settings = load_settings(env)
        store = Store(connect(settings), settings)
        runtime.tune_gc()  # the collector as the worker process has it (this process makes its changes)
        try:
            figures = await _measure(store, redis, settings, runs_n, polls, sample, progress, counter)
        finally:
            await store.close()
            await redis.aclose()
    finally:
        if isinstance(server, RedisCluster):
            server.stop()
        else:
            server.cleanup()
    if cluster:
        result.name, result.command = "memory-cluster", f"python -m bench.memory --cluster {cluster}"
        result.quick_command = f"{result.command} --runs 1000"
    in_flight, finished, data = figures
    result.add(
        Figure(
            "Redis memory per run in flight, with a full vendor trail",
            in_flight,
            "bytes",
            target="≤ 1,024 B",
            goal=IN_FLIGHT_GOAL,
            higher_is_better=False,
            note=f"{runs_n:,} runs, each submitted and polled {polls} times; used_memory delta per run",
        ),
        Figure(
            "the same less the client's feed (its entries are kept for RETENTION_S, whatever the run does)",
            data["in_flight"]["per_run"] - data["in_flight"]["keys"].get("feed (stream) (shared)", 0.0),
            "bytes",
            note=f"{data['in_flight']['feed_entries']:.1f} feed entries per run: run.submitted and every "
            "run.progress, with its body when no subscription keeps it",
        ),
        Figure(
            "Redis memory per finished run (called back, kept for RETENTION_S)",
            finished,
            "bytes",
            target="≤ 2 KiB",
            goal=FINISHED_GOAL,
            higher_is_better=False,
            note=f"{runs_n:,} runs, each ended (done, with its result) and its callback delivered; "
            "measured once the relay's marks had expired (10 minutes after a run's last relay)",
        ),
        Figure(
            "the relay's marks per finished run, until they expire (RELAY_MARK_MS, 10 minutes)",
            data["finished"]["marks_per_run"],
            "bytes",
            note="one key a run (keys.relayed): not kept for RETENTION_S",
        ),
    )
    cost = data["transition"]
    result.add(
        Figure(
            "a poll's transition with its relay (Runs.transitions, in batches of 250): this process's CPU "
            "per change",
            cost["worker_us"],
            "us",
            higher_is_better=False,
            note=f"and the Redis server's CPU per change, {cost['redis_us']:.1f} us; "
            + (
                "every change a poll's with its progress moved, so most carry a run.progress to the "
                "client's feed"
                if progress
                else "no progress (--no-progress): every change a poll's without an event"
            ),
        ),
    )
    quiet = cost.get("quiet")
    if quiet is not None:
        result.add(
            Figure(
                "the same, one more poll of each run with its progress unchanged (no event, no relay): this "
                "process's CPU per change",
                quiet["worker_us"],
                "us",
                higher_is_better=False,
                note=f"and the Redis server's, {quiet['redis_us']:.1f} us; the difference from the figure "
                f"above is what a run.progress costs, its relay to the client's feed included: "
                f"{cost['worker_us'] - quiet['worker_us']:.1f} us here and "
                f"{cost['redis_us'] - quiet['redis_us']:.1f} us in Redis",
            ),
        )
    sweep = data["sweep"]
    result.add(
        Figure(
            "one sweeper pass (Store.repair) over the runs in flight: this process's CPU per run",
            sweep["worker_us"],
            "us",
            higher_is_better=False,
            note=f"and the Redis server's CPU per run, {sweep['redis_us']:.1f} us; every run in its due "
            "set, as the scripts keep it; a pass every SWEEP_INTERVAL_S",
        ),
    )
    if cost.get("redis_instructions") is not None:
        result.add(
            Figure(
                "the same: instructions the Redis server executed per change (under valgrind's callgrind)",
                cost["redis_instructions"],
                "instructions",
                higher_is_better=False,
                note="its count from the first poll applied to the last; CPU times of this run are "
                "valgrind's, not Redis's",
            ),
        )
    result.notes.append(_poll_parts(cost))
    for phase in ("in_flight", "finished"):
        sizes = data[phase]["keys"]
        keys_note = ", ".join(f"{name} {size:,.0f}" for name, size in sizes.items())
        result.notes.append(
            f"{phase.replace('_', ' ')}: MEMORY USAGE per run, by key: {keys_note} (sum "
            f"{sum(sizes.values()):,.0f} B; used_memory says {data[phase]['per_run']:,.0f}); "
            f"{data[phase]['feed_entries']:.1f} feed entries per run"
        )
    result.data.update(data, runs=runs_n, polls=polls)
    result.elapsed_s = time.monotonic() - started
    return result


async def _measure(
    store: Store,
    redis: aioredis.Redis,
    settings: Settings,
    n: int,
    polls: int,
    sample: int,
    progress: bool,
    counter: Instructions | None = None,
) -> tuple[float, float, dict[str, Any]]:
    sub_id = await _subscribe(store)
    await _settle(redis)
    baseline = await used_memory(redis)
    rng = random.Random(7)
    t0 = domain.now_ms() - 3_600_000  # the runs' times lie in the past hour, as the worker's would
    ids = [domain.new_id("run") for _ in range(n)]
    current: dict[str, Run] = {}
    cpu = {"apply_s": 0.0, "changes": 0}

    async def apply(changes: list[Transition]) -> None:
        started = time.process_time()
        await _apply(store, current, changes)
        cpu["apply_s"] += time.process_time() - started
        cpu["changes"] += len(changes)

    async def each_batch(step: Callable[[Sequence[str]], Awaitable[None]]) -> None:
        for at in range(0, n, BATCH):
            await step(ids[at : at + BATCH])

    async def submit(batch: Sequence[str]) -> None:
        for run_id in batch:
            run = lifecycle.new_run(
                run_id=run_id,
                client=CLIENT,
                vendor=VENDOR,
                operation="extract",
                document={
                    "url": f"https://docs.example/scale/invoice-{len(current)}.pdf",
                    "media_type": "application/pdf",
                },
                options={},
                metadata={"i": str(len(current))},
                subscription_ids=[],
                zero_retention=False,
                now_ms=t0 + len(current),
                traceparent=None,
            )
            assert await store.runs.create_run(run, None, None) is None
            current[run_id] = run
        policy = settings.vendor(VENDOR)
        changes = [
            runs.after_submit(
                current[r],
                base.Submitted(vendor_run_id=_vendor_id(r), vendor_status="queued"),
                {},
                policy,
                now_ms=current[r].created_at + 40,
                jitter=rng,
                latency_ms=rng.uniform(2, 9),
            )
            for r in batch
        ]
        await _apply(store, current, changes)

    async def poll(batch: Sequence[str], quiet: bool = False) -> None:
        """``polls`` polls of each run of ``batch``, its progress moved each time; ``quiet``: one, with
        no progress."""
        policy = settings.vendor(VENDOR)
        for k in range(1 if quiet else polls):
            changes = []
            for r in batch:
                run = current[r]
                fraction = (k + 1) / (polls + 2)
                phase = "preprocessing" if fraction < 0.15 else "ocr" if fraction < 0.6 else "extraction"
                answer = base.PollResult(
                    base.RUNNING,
                    "running",
                    progress=base.Progress(percent=float(min(99, int(fraction * 100))), phase=phase)
                    if progress and not quiet
                    else None,
                )
                at = run.updated_at + int((run.delay_s or 2.0) * 1000)
                changes.append(
                    runs.after_poll(
                        run,
                        answer,
                        policy,
                        settings.run_policy,
                        now_ms=at,
                        jitter=rng,
                        latency_ms=rng.uniform(2, 9),
                    )
                )
            await apply(changes)

    await each_batch(submit)
    redis_cpu = await _redis_cpu_s(redis)
    if counter:
        counter.zero()
    scripts = await _ScriptTimes.start(store, redis)
    relay = _timed_relay(store)
    await each_batch(poll)
    executed = counter.read() if counter else None
    transition_cost: dict[str, Any] = {
        "worker_us": 1e6 * cpu["apply_s"] / max(1, cpu["changes"]),
        "redis_us": 1e6 * (await _redis_cpu_s(redis) - redis_cpu) / max(1, cpu["changes"]),
        "redis_instructions": executed / max(1, cpu["changes"]) if executed is not None else None,
        "relay_us": 1e6 * relay.pop() / max(1, cpu["changes"]),
        "redis_by_script": await scripts.shares() if scripts is not None else None,
    }
    await _settle(redis)
    in_flight_bytes = await used_memory(redis) - baseline
    probe = rng.sample(ids, min(sample, n))
    in_flight = {
        "per_run": in_flight_bytes / n,
        "keys": await _breakdown(redis, probe, n, sub_id),
        "trail": sum(len(current[r].trail) for r in probe) / len(probe),
        "feed_entries": await redis.xlen(keys.client_feed(CLIENT)) / n,
    }
    # One more poll of every run, its progress unchanged: a change with no event, so no relay. Beside the
    # polls above it says what a run.progress's relay costs (its outbox entry, the feed, the bookkeeping).
    if progress:
        redis_cpu = await _redis_cpu_s(redis)
        before = dict(cpu)
        await each_batch(lambda batch: poll(batch, quiet=True))
        quiet_changes = cpu["changes"] - before["changes"]
        transition_cost["quiet"] = {
            "worker_us": 1e6 * (cpu["apply_s"] - before["apply_s"]) / max(1, quiet_changes),
            "redis_us": 1e6 * (await _redis_cpu_s(redis) - redis_cpu) / max(1, quiet_changes),
        }
    # One pass of the sweeper (what the worker's periodic job runs every SWEEP_INTERVAL_S) over the runs
    # in flight, every one of them in its due set: this process's CPU and the Redis server's, per run.
    redis_cpu = await _redis_cpu_s(redis)
    started = time.process_time()
    await store.upkeep.repair(domain.now_ms())
    sweep_cost = {
        "worker_us": 1e6 * (time.process_time() - started) / n,
        "redis_us": 1e6 * (await _redis_cpu_s(redis) - redis_cpu) / n,
    }

    async def finish(batch: Sequence[str]) -> None:
        policy = settings.vendor(VENDOR)
        changes = []
        for r in batch:
            run = current[r]
            usage = {"data_extraction_credits": {"cost": 1.0}}
            answer = base.PollResult(
                base.SUCCEEDED, "done", needs_fetch=True, usage={"credits": 1.0, "reported": usage}
            )
            changes.append(
                runs.after_poll(
                    run,
                    answer,
                    policy,
                    settings.run_policy,
                    now_ms=run.updated_at + 30_000,
                    jitter=rng,
                    payload=_result(r),
                    latency_ms=rng.uniform(2, 9),
                )
            )
        await _apply(store, current, changes)

    await each_batch(finish)
    await _deliver(store, n)
    await _settle(redis)
    # The relay's marks (one a run, keys.relayed) expire RELAY_MARK_MS (10 minutes) after the run's last
    # relay: what is kept for RETENTION_S is measured once they are gone, as they would be by then.
    with_marks = await used_memory(redis) - baseline
    marks = await expire_relay_marks(redis, CLIENT)
    await _settle(redis)
    finished_bytes = await used_memory(redis) - baseline
    finished = {
        "per_run": finished_bytes / n,
        "marks_per_run": (with_marks - finished_bytes) / n,
        "marks": marks,
        "keys": await _breakdown(redis, probe, n, sub_id),
        "feed_entries": await redis.xlen(keys.client_feed(CLIENT)) / n,
    }
    return (
        in_flight["per_run"],
        finished["per_run"],
        {
            "baseline_bytes": baseline,
            "transition": transition_cost,
            "sweep": sweep_cost,
            "in_flight": in_flight,
            "finished": finished,
        },
    )


# The batched scripts of a poll's change, as the page names them.
_SCRIPT_PARTS = {
    "transitions": "the transition",
    "relay_feeds": "the relay's feed step (relay_feed.lua)",
    "relays_done": "its last step (relay_done.lua)",
    "fanout_deliveries": "the deliveries' step",
}


def _poll_parts(cost: dict[str, Any]) -> str:
    """Where a poll's change spends: this process's CPU in the relay after the transitions, against the
    rest, and the Redis server's time by script."""
    line = (
        f"a poll's change, where the CPU goes: this process {cost['worker_us']:.1f} us a change, of which "
        f"the relay after the transitions (Runs._relay_after: the outbox's events to the feed and the "
        f"subscriptions) {cost['relay_us']:.1f} us"
    )
    shares = cost.get("redis_by_script")
    if shares:
        parts = ", ".join(
            f"{_SCRIPT_PARTS.get(name, name)} {share * cost['redis_us']:.1f} us ({share:.0%})"
            for name, share in shares.items()
        )
        line += (
            f"; the Redis server {cost['redis_us']:.1f} us a change, by script (their shares of the "
            f"scripts' time in SLOWLOG, of the server's CPU): {parts}"
        )
    return line


def _timed_relay(store: Store) -> _Stopwatch:
    """A stopwatch of this process's CPU in the relay that follows a batch's transitions (the
    ``Runs._relay_after`` step: the outbox's events to the client's feed and to the subscriptions), wrapped
    around that step of this store for the phase measured; ``pop()`` unwraps it and gives its seconds."""
    runs_store = store.runs
    inner = runs_store._relay_after
    watch = _Stopwatch(lambda: delattr(runs_store, "_relay_after"))

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await inner(*args, **kwargs)
        finally:
            watch.seconds += time.process_time() - started

    runs_store._relay_after = timed  # type: ignore[method-assign]
    return watch


class _Stopwatch:
    def __init__(self, undo: Callable[[], None]) -> None:
        self.seconds = 0.0
        self._undo = undo

    def pop(self) -> float:
        self._undo()
        return self.seconds


class _ScriptTimes:
    """The Redis server's time in each script over a phase, as shares of the time in all of them: every
    EVALSHA the slow log holds (slower than ``SLOW_US``: a batch's scripts, hundreds of changes each; the
    single commands, a microsecond or two, are left out so that the log stays small), by the script its
    SHA names. One server only: a cluster's nodes each have their own log (None there). The log is emptied
    and its settings put back at the end, so that its entries are not in the memory measured next."""

    SLOW_US = 200
    MAX_LEN = 100_000

    def __init__(self, redis: aioredis.Redis, names: dict[str, str], saved: dict[str, Any]) -> None:
        self.redis, self.names, self.saved = redis, names, saved

    @classmethod
    async def start(cls, store: Store, redis: aioredis.Redis) -> _ScriptTimes | None:
        if isinstance(redis, aioredis.RedisCluster):
            return None
        names = {
            script.sha: name
            for name, script in vars(store.runs.scripts).items()
            if isinstance(getattr(script, "sha", None), str)
        }
        saved = {
            key: (await redis.config_get(key))[key] for key in ("slowlog-log-slower-than", "slowlog-max-len")
        }
        await redis.config_set("slowlog-log-slower-than", cls.SLOW_US)
        await redis.config_set("slowlog-max-len", cls.MAX_LEN)
        await redis.slowlog_reset()
        return cls(redis, names, saved)

    async def shares(self) -> dict[str, float]:
        totals: dict[str, int] = {}
        for entry in await self.redis.slowlog_get(self.MAX_LEN):
            command = entry["command"]
            words = (command.decode("latin-1") if isinstance(command, bytes) else command).split(" ", 2)
            if len(words) > 1 and words[0].upper() == "EVALSHA":
                name = self.names.get(words[1], "other")
                totals[name] = totals.get(name, 0) + int(entry["duration"])
        await self.redis.slowlog_reset()
        for key, value in self.saved.items():
            await self.redis.config_set(key, value)
        whole = sum(totals.values()) or 1
        return {name: t / whole for name, t in sorted(totals.items(), key=lambda kv: -kv[1])}


async def _subscribe(store: Store) -> str:
    now = domain.now_ms()
    sub = Subscription(
        id=domain.new_id("sub"),
        client=CLIENT,
        url="http://127.0.0.1:9/hooks",
        secrets=f'[["whsec_{"x" * 32}", null]]',
        created_at=now,
        updated_at=now,
    )
    assert await store.subscriptions.create_subscription(sub, max_count=100)
    return sub.id


async def _apply(store: Store, current: dict[str, Run], changes: list[Transition]) -> None:
    outcomes = await store.runs.transitions(changes)
    for change, outcome in zip(changes, outcomes, strict=True):
        if isinstance(outcome, Exception):
            raise outcome
        current[change.run.id] = change.run


async def _deliver(store: Store, n: int) -> None:
    """Every due delivery claimed and answered 204, as the deliverer records it; until none is left (with a
    deadline: the fan-out made one per run)."""
    delivered = 0
    deadline = time.monotonic() + 600
    while delivered < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{delivered:,} of {n:,} deliveries made")
        now = domain.now_ms()
        claimed, _ = await store.deliveries.claim_deliveries(now, 200, 30_000, client_max=1_000_000)
        if not claimed:
            continue
        await asyncio.gather(
            *(
                store.deliveries.record_attempt(
                    c.delivery,
                    AttemptOutcome.SUCCEEDED,
                    now_ms=now + 5,
                    attempt=Attempt(
                        at=domain.rfc3339(now) or "",
                        status_code=204,
                        duration_ms=3.4,
                        error=None,
                        response_body="",
                    ),
                    status_code=204,
                )
                for c in claimed
            )
        )
        delivered += len(claimed)


def _vendor_id(run_id: str) -> str:
    """A Nutrient run id: a UUID, as the simulator makes them (from a digest of its own: one shared with
    the result's ``sha256`` would let deflate find one in the other, as no real vendor's would)."""
    h = hashlib.sha256(f"vendor:{run_id}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _result(run_id: str) -> dict[str, Any]:
    """The simulator's Nutrient ``extract`` result asset for a run's document."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()
    fields = {
        "invoice_number": f"INV-{digest[:6]}",
        "total": int(digest[6:14], 16) % 1_000_000 / 100,
        "currency": "USD",
        "pages": 1 + int(digest[14:16], 16) % 5,
        "sha256": digest,
    }
    return {"output": {"fields": fields}, "usage": {"data_extraction_credits": {"cost": 1.0}}}


async def used_memory(redis: aioredis.Redis) -> int:
    """``used_memory`` without the client buffers and the AOF buffer (``Cluster.redis_memory``); on a
    cluster, the primaries' together, each also without what it holds whatever its data (the
    replication backlog, the cluster bus's links)."""
    if not isinstance(redis, aioredis.RedisCluster):
        return _used(await redis.info("memory"))
    total = 0
    for node in redis.get_primaries():
        info = await redis.info("memory", target_nodes=node)
        info = info if "used_memory" in info else next(iter(info.values()))
        total += (
            _used(info) - int(info.get("mem_replication_backlog", 0)) - int(info.get("mem_cluster_links", 0))
        )
    return total


def _used(info: dict[str, Any]) -> int:
    return (
        int(info["used_memory"]) - int(info.get("mem_clients_normal", 0)) - int(info.get("mem_aof_buffer", 0))
    )


async def _settle(redis: aioredis.Redis) -> None:
    """Lets Redis finish an incremental rehash of its dictionaries (they double in steps, a bucket per
    command): a few hundred cheap commands, polled until ``used_memory`` stops moving (a deadline)."""
    last = -1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for _ in range(200):
            await redis.ping()
        now = await used_memory(redis)
        if now == last:
            return
        last = now


async def _redis_cpu_s(redis: aioredis.Redis) -> float:
    """The Redis server's CPU seconds so far (every node's, on a cluster)."""
    info: Any = await redis.info("cpu")
    nodes = [info] if "used_cpu_user" in info else list(info.values())
    return sum(float(n["used_cpu_user"]) + float(n["used_cpu_sys"]) for n in nodes if isinstance(n, dict))


async def _usage(redis: aioredis.Redis, key: str) -> int:
    return int(await redis.memory_usage(key, samples=0) or 0)


async def _breakdown(redis: aioredis.Redis, run_ids: Sequence[str], n: int, sub_id: str) -> dict[str, float]:
    """``MEMORY USAGE`` per run of each kind of key: a run's own keys averaged over ``run_ids``; the keys
    that many runs share (due set, indexes, feed, delivery log) divided by ``n``."""
    own: dict[str, float] = {}

    async def add(name: str, key: str) -> None:
        size = await _usage(redis, key)
        if size:
            own[name] = own.get(name, 0.0) + size / len(run_ids)

    for run_id in run_ids:
        raw = await redis.get(keys.run(run_id))
        run = Run.from_json(raw, run_id) if raw else None
        await add("run record", keys.run(run_id))
        await add("result", keys.result(run_id))
        await add("run's progress list", keys.run_events(run_id))
        await add("run's delivery index", keys.run_deliveries(run_id))
        if run is not None:
            for key, value in run.metadata.items():
                await add("metadata index", keys.run_metadata(run.client, key, value))
            for event_id in run.event_ids:
                etype = await _event_type(redis, event_id, run_id)
                await add(f"event {etype}", keys.event(event_id))
            for dlv_id in await redis.zrange(keys.run_deliveries(run_id), 0, -1):
                await add("delivery", keys.delivery(dlv_id))
                await add("delivery's attempts", keys.delivery_attempts(dlv_id))
    shared = {  # the per-shard ones summed over their 16 shards
        "due sets": [keys.due_runs(VENDOR, s) for s in range(keys.SHARDS)],
        "active runs": [keys.active_runs(s) for s in range(keys.SHARDS)],
        "client's runs index": [keys.client_runs(CLIENT)],
        "feed (stream)": [keys.client_feed(CLIENT)],
        "subscription's delivery log": [keys.sub_deliveries(sub_id)],
        "due deliveries": [keys.due_deliveries(s) for s in range(keys.SHARDS)],
        "active deliveries": [keys.active_deliveries(s) for s in range(keys.SHARDS)],
    }
    for name, names in shared.items():
        size = sum([await _usage(redis, key) for key in names])
        if size:
            own[name + " (shared)"] = size / n
    return own


async def _event_type(redis: aioredis.Redis, event_id: str, run_id: str) -> str:
    """The type in an event's body (a packed body is bytes: read without decoding; packed against its
    run's id)."""
    raw = await redis.execute_command("GET", keys.event(event_id), NEVER_DECODE=True)
    if raw is None:
        return "gone"
    body = bodies.unpacked_or_none(raw, run_id)
    if body is None:
        return "?"
    return str(json.loads(body).get("type"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument(
        "--polls", type=int, default=12, help="polls per run while in flight (12 fill the trail)"
    )
    parser.add_argument("--sample", type=int, default=SAMPLE, help="runs whose keys are measured one by one")
    parser.add_argument(
        "--no-progress", action="store_true", help="a vendor that reports no progress: no run.progress events"
    )
    parser.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="N",
        help="on a Redis Cluster of N primaries (a replica each)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="Redis under valgrind's callgrind: the instructions it executes per change (one Redis server)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.instructions and args.cluster:
        parser.error("--instructions counts one Redis server's: not with --cluster")
    if args.instructions and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        parser.error("--instructions needs valgrind and callgrind_control on PATH (Debian: valgrind)")
    bench = run(
        args.runs,
        args.polls,
        args.sample,
        not args.no_progress,
        cluster=args.cluster,
        instructions=args.instructions,
    )
    print_result(run_main(bench), args.json)


if __name__ == "__main__":
    main()
