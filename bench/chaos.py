"""Chaos with a ledger: runs across the three simulated vendors, a flaky receiver, workers SIGKILLed every
few seconds and Redis SIGKILLed and restarted (AOF, ``appendfsync always``), then an account of every run
and every event.

    python -m bench.chaos                 # 500 runs, the figures in docs/reliability.md
    python -m bench.chaos --runs 60 --redis-restarts 1 --kill-every 4

Every process is real: ``hookbridge api``, ``hookbridge worker`` (two), ``hookbridge simulator`` and
``redis-server`` are subprocesses on loopback; the receiver runs in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.core.records import DELIVERY_HASH
from service.dev.embedded_redis import EmbeddedRedis, free_port
from service.dev.stack import Servers
from service.store import bodies, keys
from service.store.fanout import delivery_id_in_shard

VENDORS = ("nutrient", "cloudsquid", "uptiq")
KEY = "chaos-key"


@dataclass
class ChaosConfig:
    runs: int = 500
    workers: int = 2
    kill_every_s: float = 3.0
    redis_restarts: int = 2
    receiver_fail_rate: float = 0.2
    seed: int = 1
    timeout_s: float = 600.0
    sim_duration: str = "1,3"
    submit_rate: float = 25.0  # runs per second, so that the Redis restarts fall while runs are submitted
    feed_reader: bool = True  # a consumer of GET /v1/events (long-poll) beside the callbacks


@dataclass
class Ledger:
    runs_submitted: int = 0
    submit_retries: int = 0
    run_statuses: dict[str, int] = field(default_factory=dict)
    runs_not_terminal: list[str] = field(default_factory=list)
    events_emitted: int = 0
    events_delivered: int = 0
    events_missing: list[str] = field(default_factory=list)
    duplicate_deliveries: int = 0
    receiver_requests: int = 0
    receiver_failures_injected: int = 0
    worker_kills: int = 0
    redis_restarts: int = 0
    elapsed_s: float = 0.0
    # The feed reader's account: events it read, emitted ones it never read, ones it read twice, runs
    # whose events it read in another order than emitted, and feed positions that did not increase.
    feed_read: int = 0
    feed_missing: list[str] = field(default_factory=list)
    feed_duplicates: int = 0
    feed_runs_out_of_order: list[str] = field(default_factory=list)
    feed_positions_not_increasing: int = 0

    @property
    def ok(self) -> bool:
        feed_ok = not (self.feed_missing or self.feed_duplicates or self.feed_runs_out_of_order)
        return not self.runs_not_terminal and not self.events_missing and self.runs_submitted > 0 and feed_ok


class Proc:
    """One ``hookbridge`` subprocess, its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log = open(logdir / f"{name}.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "service", *args], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        return self.process.returncode


def environment(redis_url: str, sim_url: str, cfg: ChaosConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    env.update(
        {
            "HOOKBRIDGE_REDIS_URL": redis_url,
            "HOOKBRIDGE_API_KEYS": f"chaos:{KEY}",
            "HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
            # Long enough that nothing fails for good while the receiver flakes: every event must arrive.
            "HOOKBRIDGE_RETRY_SCHEDULE": "100ms,200ms,500ms,1s,1s,2s,2s,2s,2s,2s,5s,5s,5s,5s,5s",
            "HOOKBRIDGE_CALLBACK_TIMEOUT_S": "2",
            "HOOKBRIDGE_VENDOR_TIMEOUT_S": "2",
            "HOOKBRIDGE_LEASE_S": "8",
            "HOOKBRIDGE_WORKER_IDLE_S": "50ms",
            "HOOKBRIDGE_WORKER_METRICS_PORT": "0",
            "HOOKBRIDGE_SWEEP_INTERVAL_S": "5",
            "HOOKBRIDGE_SHUTDOWN_GRACE_S": "5",
            "HOOKBRIDGE_LOG_FORMAT": "json",
            "HOOKBRIDGE_CLOUDSQUID_PROJECT": "chaos",
            "HOOKBRIDGE_CLOUDSQUID_TABLE_ID": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
            "HOOKBRIDGE_SIM_DURATION_S": cfg.sim_duration,
            "HOOKBRIDGE_SIM_SEED": str(cfg.seed),
            "HOOKBRIDGE_SIM_RATE_5XX": "0.02",
        }
    )
    for vendor, path in (("NUTRIENT", "/nutrient"), ("CLOUDSQUID", "/cloudsquid/api"), ("UPTIQ", "/uptiq")):
        env[f"HOOKBRIDGE_{vendor}_BASE_URL"] = sim_url + path
        env[f"HOOKBRIDGE_{vendor}_API_KEY"] = f"sim-{vendor.lower()}-key"
        env[f"HOOKBRIDGE_{vendor}_POLL_INITIAL_S"] = "500ms"
        env[f"HOOKBRIDGE_{vendor}_POLL_MAX_S"] = "2s"
    return env


async def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await check():
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass  # Redis may be restarting: the API answers 503 meanwhile
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{what} not reached within {timeout}s")


async def _call(
    client: httpx.AsyncClient, method: str, url: str, ledger: Ledger | None = None, **kw: Any
) -> httpx.Response:
    """Retries 503 and connection faults: what a well-behaved client of the API does."""
    for _ in range(600):
        try:
            response = await client.request(method, url, **kw)
        except httpx.TransportError:
            await asyncio.sleep(0.1)
            continue
        if response.status_code != 503:
            return response
        if ledger is not None:
            ledger.submit_retries += 1
        await asyncio.sleep(float(response.headers.get("retry-after", "1")) / 4)
    raise TimeoutError(f"{method} {url} kept failing")


async def run_chaos(cfg: ChaosConfig, logdir: Path | None = None) -> Ledger:
    logdir = logdir or Path(tempfile.mkdtemp(prefix="hookbridge-chaos-"))
    rng = random.Random(cfg.seed)
    ledger = Ledger()
    acked: Counter[str] = Counter()
    redis = EmbeddedRedis(appendfsync="always").start()
    sim_port, api_port = free_port(), free_port()
    env = environment(redis.url, f"http://127.0.0.1:{sim_port}", cfg)
    procs: list[Proc] = []
    servers = Servers()
    started = time.monotonic()
    try:
        sim = Proc("simulator", ["simulator", "--port", str(sim_port)], env, logdir)
        api = Proc("api", ["api", "--host", "127.0.0.1", "--port", str(api_port)], env, logdir)
        workers = [Proc(f"worker-{i}", ["worker"], env, logdir) for i in range(cfg.workers)]
        procs += [sim, api, *workers]

        async def hook(request: Request) -> Response:
            ledger.receiver_requests += 1
            if rng.random() < cfg.receiver_fail_rate:
                ledger.receiver_failures_injected += 1
                return Response(status_code=500)
            acked[request.headers["webhook-id"]] += 1
            return Response(status_code=204)

        receiver_port = free_port()
        await servers.start(Starlette(routes=[Route("/hooks", hook, methods=["POST"])]), receiver_port)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{api_port}", timeout=10, headers={"Authorization": f"Bearer {KEY}"}
        ) as client:
            await _until(lambda: _ready(client), 30, "API ready")
            sub = (
                await _call(
                    client,
                    "POST",
                    "/v1/subscriptions",
                    json={"url": f"http://127.0.0.1:{receiver_port}/hooks", "event_types": ["run.*"]},
                )
            ).json()

            stop_chaos = asyncio.Event()
            chaos = asyncio.create_task(
                _chaos(cfg, rng, workers, procs, redis, env, logdir, ledger, stop_chaos)
            )
            fed: list[dict[str, Any]] = []
            stop_feed = asyncio.Event()
            feed = asyncio.create_task(_read_feed(client, fed, stop_feed)) if cfg.feed_reader else None
            run_ids = await _submit_all(client, cfg, ledger)
            ledger.runs_submitted = len(run_ids)

            async def all_terminal() -> bool:
                statuses = await _statuses(client, run_ids)
                return all(s in ("succeeded", "failed", "canceled") for s in statuses.values())

            try:
                await _until(all_terminal, cfg.timeout_s, "every run terminal")
            except TimeoutError:
                pass
            stop_chaos.set()
            await chaos
            emitted = await _emitted(client, run_ids)

            async def all_delivered() -> bool:
                return all(e in acked for e in emitted)

            try:
                await _until(all_delivered, 120, "every event delivered")
            except TimeoutError:
                pass
            statuses = await _statuses(client, run_ids)
            ledger.run_statuses = dict(Counter(statuses.values()))
            ledger.runs_not_terminal = [
                r for r, s in statuses.items() if s not in ("succeeded", "failed", "canceled")
            ]
            ledger.events_emitted = len(emitted)
            ledger.events_delivered = sum(1 for e in emitted if e in acked)
            ledger.events_missing = [e for e in emitted if e not in acked]
            ledger.duplicate_deliveries = sum(n - 1 for n in acked.values() if n > 1)
            if feed is not None:
                stop_feed.set()
                await feed
                by_run = await _emitted_by_run(client, run_ids)
                _account_feed(ledger, fed, by_run)
            if ledger.events_missing:
                await _explain(redis.url, sub["id"], ledger.events_missing[:10], logdir)
    finally:
        ledger.elapsed_s = round(time.monotonic() - started, 1)
        await servers.stop()
        for proc in procs:
            proc.stop(timeout=15)
        redis.cleanup()
    return ledger


async def _explain(redis_url: str, sub_id: str, event_ids: list[str], logdir: Path) -> None:
    """Writes what Redis holds for each missing event's delivery, for the post-mortem."""

    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    lines = []
    try:
        for event_id in event_ids:
            dlv = delivery_id_in_shard(event_id, sub_id)
            record = await client.hgetall(keys.delivery(dlv))
            stored = await client.get(keys.event(event_id))
            run_id = record.get(DELIVERY_HASH["run_id"], "")  # a run's event is packed against its id
            body = bodies.unpacked(stored, run_id) if stored is not None else None
            event = {
                "id": event_id,
                "kept": body is not None,
                "type": json.loads(body)["type"] if body else None,
            }
            due = await client.zscore(keys.due_deliveries(keys.shard_of(dlv)), dlv)
            chain = await client.lrange(keys.chain(sub_id, record.get("run", "")), 0, -1)
            attempts = await client.lrange(keys.delivery_attempts(dlv), 0, -1)
            lines.append(
                json.dumps(
                    {
                        "event": event,
                        "delivery": record,
                        "due": due,
                        "chain": chain,
                        "attempts": attempts[-3:],
                        "now_ms": int(time.time() * 1000),
                    }
                )
            )
    finally:
        await client.aclose()
    (logdir / "missing.jsonl").write_text("\n".join(lines))
    print(f"missing events explained in {logdir / 'missing.jsonl'}", file=sys.stderr)


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await client.get("/readyz")).status_code == 200


async def _submit_all(client: httpx.AsyncClient, cfg: ChaosConfig, ledger: Ledger) -> list[str]:
    sem = asyncio.Semaphore(16)
    started = time.monotonic()

    async def submit(i: int) -> str:
        await asyncio.sleep(max(0.0, started + i / cfg.submit_rate - time.monotonic()))
        vendor = VENDORS[i % len(VENDORS)]
        body: dict[str, Any] = {
            "vendor": vendor,
            "document": {
                "content_base64": base64.b64encode(f"%PDF chaos {i}".encode()).decode(),
                "filename": f"chaos-{i}.pdf",
                "media_type": "application/pdf",
            },
            "metadata": {"i": str(i)},
        }
        if vendor == "uptiq":
            body["options"] = {"documentType": "Invoice"}
        async with sem:
            for attempt in range(1000):
                response = await _call(
                    client, "POST", "/v1/runs", ledger, json=body, headers={"Idempotency-Key": f"chaos-{i}"}
                )
                if response.status_code == 202:
                    ledger.submit_retries += attempt
                    return str(response.json()["id"])
                await asyncio.sleep(0.1)
        raise RuntimeError(f"run {i} was never accepted")

    return list(await asyncio.gather(*(submit(i) for i in range(cfg.runs))))


async def _statuses(client: httpx.AsyncClient, run_ids: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = (await _call(client, "GET", "/v1/runs", params=params)).json()
        out.update({r["id"]: r["status"] for r in page["data"]})
        cursor = page["next_cursor"]
        if not cursor:
            break
    return {r: out.get(r, "missing") for r in run_ids}


async def _emitted(client: httpx.AsyncClient, run_ids: list[str]) -> list[str]:
    sem = asyncio.Semaphore(16)

    async def events(run_id: str) -> list[str]:
        async with sem:
            data = (await _call(client, "GET", f"/v1/runs/{run_id}/events")).json()["data"]
            return [e["id"] for e in data]

    return [e for batch in await asyncio.gather(*(events(r) for r in run_ids)) for e in batch]


async def _read_feed(client: httpx.AsyncClient, out: list[dict[str, Any]], stop: asyncio.Event) -> None:
    """What an app without an endpoint does: long-poll the feed from its start, keeping the iterator,
    through 503s and dropped connections (Redis restarting), until told to stop, then read to the end."""
    iterator: str | None = None
    draining = False
    while True:
        params: dict[str, Any] = {"limit": 200, "wait": 0 if draining else 2}
        if iterator:
            params["iterator"] = iterator
        try:
            response = await client.get("/v1/events", params=params)
        except httpx.TransportError:
            await asyncio.sleep(0.1)
            continue
        if response.status_code != 200:  # 503 while Redis restarts; anything else shows in the ledger
            await asyncio.sleep(0.1)
            continue
        page = response.json()
        out.extend(
            {"id": e["id"], "event_id": e["event_id"], "run": e["data"]["run"]["id"]} for e in page["data"]
        )
        iterator = page["iterator"]
        if draining and page["done"]:
            return
        draining = stop.is_set()


async def _emitted_by_run(client: httpx.AsyncClient, run_ids: list[str]) -> dict[str, list[str]]:
    sem = asyncio.Semaphore(16)

    async def events(run_id: str) -> tuple[str, list[str]]:
        async with sem:
            data = (await _call(client, "GET", f"/v1/runs/{run_id}/events")).json()["data"]
            return run_id, [e["id"] for e in data]

    return dict(await asyncio.gather(*(events(r) for r in run_ids)))


def _position(feed_id: str) -> tuple[int, int]:
    ms, seq = feed_id.split("-")
    return int(ms), int(seq)


def _account_feed(ledger: Ledger, fed: list[dict[str, Any]], emitted: dict[str, list[str]]) -> None:
    ledger.feed_read = len(fed)
    counts = Counter(e["event_id"] for e in fed)
    ledger.feed_duplicates = sum(n - 1 for n in counts.values() if n > 1)
    ledger.feed_missing = [e for events in emitted.values() for e in events if e not in counts]
    positions = [_position(e["id"]) for e in fed]
    ledger.feed_positions_not_increasing = sum(1 for a, b in itertools.pairwise(positions) if b <= a)
    read_by_run: dict[str, list[str]] = {}
    for e in fed:
        read_by_run.setdefault(e["run"], []).append(e["event_id"])
    ledger.feed_runs_out_of_order = [r for r, events in emitted.items() if read_by_run.get(r, []) != events]


async def _chaos(
    cfg: ChaosConfig,
    rng: random.Random,
    workers: list[Proc],
    procs: list[Proc],
    redis: EmbeddedRedis,
    env: dict[str, str],
    logdir: Path,
    ledger: Ledger,
    stop: asyncio.Event,
) -> None:
    started = time.monotonic()
    # Redis restarts spread over the first half of the expected run time.
    restart_at = [started + 4 + i * 6 for i in range(cfg.redis_restarts)]
    next_kill = started + cfg.kill_every_s
    while not stop.is_set():
        now = time.monotonic()
        if restart_at and now >= restart_at[0]:
            restart_at.pop(0)
            redis.kill()
            await asyncio.sleep(1.0)  # down for a second: the API answers 503, the workers back off
            redis.start()
            ledger.redis_restarts += 1
        if now >= next_kill and cfg.kill_every_s > 0:
            next_kill = now + cfg.kill_every_s * rng.uniform(0.7, 1.3)
            i = rng.randrange(len(workers))
            workers[i].kill()
            ledger.worker_kills += 1
            workers[i] = Proc(f"worker-{i}", ["worker"], env, logdir)
            procs.append(workers[i])
        try:
            await asyncio.wait_for(stop.wait(), timeout=0.2)
        except TimeoutError:
            pass


def report(cfg: ChaosConfig, ledger: Ledger) -> str:
    rows = [
        ("runs submitted (each answered 202)", ledger.runs_submitted),
        ("submits answered 503 while Redis was down, then retried", ledger.submit_retries),
        ("runs by final status", ", ".join(f"{k} {v}" for k, v in sorted(ledger.run_statuses.items()))),
        ("runs not in a terminal state", len(ledger.runs_not_terminal)),
        ("events emitted", ledger.events_emitted),
        ("events delivered (acknowledged by the receiver)", ledger.events_delivered),
        ("events missing", len(ledger.events_missing)),
        ("duplicate deliveries (same webhook-id acknowledged again)", ledger.duplicate_deliveries),
        (
            "receiver requests / failures injected",
            f"{ledger.receiver_requests} / {ledger.receiver_failures_injected}",
        ),
        ("feed: events read by a long-polling consumer", ledger.feed_read),
        (
            "feed: emitted events never read / read twice",
            f"{len(ledger.feed_missing)} / {ledger.feed_duplicates}",
        ),
        ("feed: runs read out of emission order", len(ledger.feed_runs_out_of_order)),
        ("worker SIGKILLs", ledger.worker_kills),
        ("Redis SIGKILL + restarts", ledger.redis_restarts),
        ("elapsed", f"{ledger.elapsed_s} s"),
    ]
    lines = ["| measure | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--redis-restarts", type=int, default=2)
    parser.add_argument("--fail-rate", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the ledger as JSON")
    args = parser.parse_args()
    cfg = ChaosConfig(
        runs=args.runs,
        workers=args.workers,
        kill_every_s=args.kill_every,
        redis_restarts=args.redis_restarts,
        receiver_fail_rate=args.fail_rate,
        seed=args.seed,
    )
    ledger = asyncio.run(run_chaos(cfg))
    print(json.dumps({**asdict(ledger), "ok": ledger.ok}, indent=2) if args.json else report(cfg, ledger))
    raise SystemExit(0 if ledger.ok else 1)


if __name__ == "__main__":
    main()
