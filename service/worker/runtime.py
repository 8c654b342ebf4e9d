"""The worker process, assembled: the store, the vendor clients, the callback client, the pumps, arq's
periodic jobs, a heartbeat, and a small HTTP server for the pod's liveness probe and metrics."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import time
from typing import Any

import httpx
from aiohttp.abc import AbstractResolver
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service.config.settings import Settings
from service.config.settings import warnings as settings_warnings
from service.core.clock import SYSTEM, Clock
from service.delivery import client as callback_client
from service.delivery.deliverer import Deliverer
from service.delivery.fetch import DocumentFetcher
from service.delivery.urlsafety import Policy
from service.observability import logs, metrics
from service.serving.server import EmbeddedServer, api_config
from service.store import Store, connect
from service.vendors import build_adapters, registry
from service.vendors.http import Budget
from service.worker.budget import GroupBudget, StoreBudget
from service.worker.pumps import DeliveryPump, Pump, RunPump
from service.worker.queue import Periodic, Queue
from service.worker.steps import RunStepper

log = logs.get("hookbridge.worker")
STALE_AFTER_S = 30.0
# The per-client gauges (Upkeep.observe) are sampled this often: a few thousand reads at most.
OBSERVE_EVERY_S = 30.0


# The cyclic garbage collector's first threshold in a worker process (Python's default: 700 allocations).
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Takes the objects of the worker's start (modules, settings, clients: hundreds of thousands that live
    as long as the process) out of the garbage collector's sight, and collects its youngest generation
    every 50,000 allocations instead of 700.

    A poll allocates a few hundred objects, and the hundreds of steps in flight keep theirs long enough to
    be traversed by collection after collection and to reach the older generations: with Python's
    defaults the collector took about a fifth of a polling worker's CPU (measured with ``gc.callbacks``,
    docs/performance.md), much of it in full collections that went over every object of the start.
    Frozen, those are never traversed again; with the larger threshold most of a step's objects are freed
    by their reference counts before a collection sees them, and the collector takes under 1 % (10,000:
    6 %). Garbage in cycles is still collected, only later (a few megabytes at most). Called once, in the
    worker process, after its start (``cmd_worker``).
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


class WorkerRuntime:
    def __init__(
        self,
        settings: Settings,
        *,
        redis_url: str | None = None,
        resolver: AbstractResolver | None = None,
        vendor_transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.redis_url = redis_url
        metrics.set_clients(client for client, _ in settings.api_keys)
        self._next_observe = 0.0
        self.store = Store(connect(settings, url=redis_url), settings)
        # With REDIS_WAIT_REPLICAS, the writes that precede an announcement go through a client that WAITs
        # after each (contract section 10): the steps' transitions (one WAIT per batch of them, before
        # the step goes on) and the claim of deliveries (its WAIT covers every write its primary took
        # before it, the fan-out that made the delivery included), so that no callback goes out for a
        # change a failover could still lose. Claims of runs, budgets and heartbeats need none.
        self.durable = (
            Store(connect(settings, url=redis_url, durable=True), settings)
            if settings.redis_wait_replicas
            else self.store
        )
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}"
        budgets: dict[str, StoreBudget] = {}
        kinds: dict[str, dict[str, Budget]] = {}
        for name, vendor in settings.vendors.items():
            spec = registry.spec_of(vendor)
            groups = spec.budgets if spec is not None else ()
            # A vendor with budgets per kind claims without a prepaid slot: the step's first request may
            # be of any group (worker/budget.py).
            shared = budgets[name] = StoreBudget(self.store.limits, vendor, clock, prepaid=not groups)
            kinds[name] = {}
            for group in groups:  # one budget per group: its kinds share its rate and its pause
                rps = float(vendor.extra[f"{group.name}_max_rps"])
                own = GroupBudget(
                    self.store.limits, vendor, group.name, rps, shared, clock, group.pause_schedule_s
                )
                kinds[name].update(dict.fromkeys(group.kinds, own))
        # URLs fetched for a vendor (a document to upload, a presigned asset) get the callback rules.
        fetcher = DocumentFetcher(
            Policy(settings.callback_allowed_networks, settings.callback_blocked_networks),
            max_bytes=settings.max_document_bytes,
            timeout_s=settings.vendor_timeout_s,
        )
        self.vendor_clients, self.adapters = build_adapters(
            settings,
            budgets,
            metrics.observe_vendor_request,
            transport=vendor_transport,
            fetcher=fetcher,
            kinds=kinds,
        )
        self.callbacks = callback_client.make_client(
            Policy(settings.callback_allowed_networks, settings.callback_blocked_networks),
            settings.callback_timeout_s,
            resolver=resolver,
        )
        self.deliverer = Deliverer(self.store, settings, self.callbacks, clock=clock)
        self.delivery_pump = DeliveryPump(self.durable.deliveries, settings, self.deliverer.attempt, clock)
        self.stepper = RunStepper(
            self.durable.runs,
            settings,
            self.adapters,
            on_delivery_due=self.delivery_pump.due_in,
            clock=clock,
        )
        intervals = {v: b.interval_ms if b.prepaid else 0.0 for v, b in budgets.items()}
        self.run_pump = RunPump(
            self.store, settings, self.stepper.step, list(self.adapters), intervals, clock
        )
        # WORKER_ROLE splits the two loops over separate processes (or Deployments), so that callbacks
        # never wait behind a backlog of vendor polls on a busy worker.
        role = settings.worker_role
        self.pumps: list[Pump] = [
            *([self.run_pump] if role in ("all", "runs") else []),
            *([self.delivery_pump] if role in ("all", "deliveries") else []),
        ]
        self.queue = Queue(
            settings,
            [
                Periodic("sweep", self._sweep, int(settings.sweep_interval_s)),
                Periodic("purge", self._purge, 60),
            ],
            url=redis_url,
        )
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[Any]] = []

    # Lifecycle ----------------------------------------------------------------------------------

    async def run(self, *, serve_health: bool = True) -> None:
        """Runs until :meth:`request_stop`, then drains within ``SHUTDOWN_GRACE_S``."""
        log.info(
            "worker starting",
            worker_id=self.worker_id,
            vendors=list(self.adapters),
            role=self.settings.worker_role,
        )
        for note in settings_warnings(self.settings):
            log.warning("setting raised", detail=note)
        self.tasks = [
            *(asyncio.create_task(pump.run(self.stop)) for pump in self.pumps),
            asyncio.create_task(self.queue.run(self.stop)),
            asyncio.create_task(self._heartbeat()),
        ]
        server = None
        if serve_health and self.settings.worker_metrics_port:
            # The same connection guard as the API's: a probe port is no place for slow clients either.
            server = EmbeddedServer(
                api_config(
                    self.health_app(),
                    self.settings.api_limits,
                    host=self.settings.worker_metrics_host,
                    port=self.settings.worker_metrics_port,
                    lifespan="off",
                )
            )
            self.tasks.append(asyncio.create_task(server.serve()))
        await self.stop.wait()
        log.info("worker stopping: finishing the work in flight", grace_s=self.settings.shutdown_grace_s)
        grace = self.settings.shutdown_grace_s
        left = 0
        for pump, share in zip(self.pumps, (0.6, 0.3), strict=False):
            left += await pump.drain(grace * share)
        if left:
            log.warning("work handed back to other workers through its leases", tasks=left)
        if server is not None:
            server.should_exit = True
        # Every task ends by itself once stop is set. Cancelling one that is closing its Redis pool (arq's
        # loop, on its way out) would leave that pool's sockets open, so they get a moment first; only a
        # task still running after it is cancelled.
        _, pending = await asyncio.wait(self.tasks, timeout=max(1.0, grace * 0.1))
        for task in pending:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.close()
        log.info("worker stopped")

    async def step_until_idle(self, *, max_rounds: int = 1000) -> int:
        """Burst mode, for tests and one-off runs: works everything due at the clock's now (runs, then the
        deliveries they made due, and again) until nothing is, then returns how many items it worked.
        With a :class:`~service.core.clock.ManualClock`, a test moves the clock, steps, and asserts."""
        total = 0
        for _ in range(max_rounds):
            done = 0
            for pump in self.pumps:
                done += await pump.until_idle()
            if not done:
                return total
            total += done
        raise RuntimeError(f"still work due after {max_rounds} rounds: something is due again at once")

    async def sweep(self) -> dict[str, int]:
        """The sweeper's pass (also arq's periodic job)."""
        now_ms = self.clock.now_ms()
        repaired = await self.store.upkeep.repair(now_ms)
        repaired["relayed"] = await self.durable.runs.relay_stranded(now_ms)
        if any(repaired.values()):
            log.warning("sweeper rescheduled lost work", **repaired)
        return repaired

    async def purge(self) -> int:
        """Drops listing entries past retention (also arq's periodic job)."""
        return await self.store.upkeep.purge_indexes(self.clock.now_ms())

    def request_stop(self) -> None:
        self.stop.set()

    async def close(self) -> None:
        await self.stepper.close()
        for client in self.vendor_clients:
            await client.aclose()
        await self.callbacks.aclose()
        await self.store.close()
        if self.durable is not self.store:
            await self.durable.close()

    def alive(self) -> bool:
        now = time.monotonic()
        return not self.stop.is_set() and all(now - pump.last_tick < STALE_AFTER_S for pump in self.pumps)

    # Periodic jobs ------------------------------------------------------------------------------

    async def _sweep(self, ctx: dict[str, Any]) -> dict[str, int]:
        return await self.sweep()

    async def _purge(self, ctx: dict[str, Any]) -> int:
        return await self.purge()

    async def _heartbeat(self) -> None:
        while not self.stop.is_set():
            try:
                now_ms = self.clock.now_ms()
                counts = await self.store.upkeep.due_counts(list(self.adapters), now_ms)
                for queue, count in counts.items():
                    metrics.READY_JOBS.labels(queue).set(count)
                metrics.RUNS_IN_FLIGHT.set(await self.store.runs.in_flight_count(list(self.adapters)))
                metrics.OUTBOX_STRANDED.set(await self.store.runs.stranded_count(now_ms))
                if time.monotonic() >= self._next_observe:
                    # Heavier than the rest of the heartbeat (bench/observe_cost.py): every 30 s.
                    self._next_observe = time.monotonic() + OBSERVE_EVERY_S
                    try:
                        await self._observe(now_ms)
                    except (RedisError, OSError):
                        raise
                    except Exception as exc:  # a malformed record: the gauges wait, the heartbeat goes on
                        log.warning("metrics sample failed", error=repr(exc))
                metrics.WORKER_ALIVE.set(1 if self.alive() else 0)
                payload = json.dumps({"worker": self.worker_id, "at": now_ms, "alive": self.alive()})
                await self.store.upkeep.heartbeat(self.worker_id, payload, STALE_AFTER_S)
                metrics.REDIS_UP.set(1)
            except (RedisError, OSError) as exc:
                metrics.REDIS_UP.set(0)
                log.warning("heartbeat failed", error=str(exc))
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=5)
            except TimeoutError:
                pass

    async def _observe(self, now_ms: int) -> None:
        """The gauges an on-call engineer acts on, from one bounded sample of the store."""
        clients = sorted(metrics.known_clients())
        obs = await self.store.upkeep.observe(list(self.adapters), clients, now_ms)
        for vendor, until_ms in obs.paused_until_ms.items():
            metrics.RUN_TIMEOUTS.labels(vendor)  # exported at 0 from the start: increase() sees the first
            metrics.VENDOR_PAUSED.labels(vendor).set(0 if until_ms is None else 1)
            remaining = 0.0 if until_ms is None else max(0.0, (until_ms - now_ms) / 1000)
            metrics.VENDOR_PAUSE_REMAINING.labels(vendor).set(remaining)
        oldest: dict[str, float] = dict.fromkeys([*clients, metrics.OTHER_CLIENT], 0.0)
        for client, age in obs.oldest_pending_s.items():
            label = metrics.client_label(client)
            oldest[label] = max(oldest[label], age)
        for label, age in oldest.items():
            metrics.OLDEST_PENDING_DELIVERY.labels(label).set(age)
        for client in clients:
            for reason in ("auto", "owner"):
                count = obs.disabled_subs.get((client, reason), 0)
                metrics.SUBSCRIPTIONS_DISABLED.labels(client, reason).set(count)

    # Health endpoint ----------------------------------------------------------------------------

    def health_app(self) -> Starlette:
        async def healthz(request: Request) -> Response:
            ok = self.alive()
            return JSONResponse(
                {"status": "ok" if ok else "stale", "worker": self.worker_id}, 200 if ok else 503
            )

        async def metrics_endpoint(request: Request) -> Response:
            return Response(metrics.render(), media_type="text/plain; version=0.0.4")

        return Starlette(routes=[Route("/healthz", healthz), Route("/metrics", metrics_endpoint)])
