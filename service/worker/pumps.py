"""The worker's two loops: claim due runs and step them, claim due deliveries and attempt them.

Each loop claims a batch with one Lua call, works the batch concurrently under a bound, and sleeps until
the next item is due (or ``WORKER_IDLE_S``, or a wake-up from this process), and after a claim that took
all there was, at least its gap (``WORKER_CLAIM_GAP_S`` for run steps, ``DELIVERY_CLAIM_GAP_S`` for
callbacks: :func:`next_claim`). A claim is a lease: if this
process dies, the items fall due again when their leases run out and another worker takes them.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from service.config.settings import Settings
from service.core.clock import SYSTEM, Clock
from service.observability import logs
from service.store import ClaimedRun, keys
from service.store.ports import DeliveryClaims, RunPumpStore

log = logs.get("hookbridge.worker")

LOOKAHEAD_MS = 1000  # how far ahead the claim may reserve vendor budget slots


class Pace(enum.Enum):
    """When a claim loop claims next, after a claim (:func:`next_claim`)."""

    AT_ONCE = "at once"  # it came back full: more may be due, and a backlog drains at full speed
    AFTER_GAP = "after the gap"  # it took all that was due: what falls due next waits for one claim
    WHEN_DUE = "when due"  # it took nothing: sleep until the next item is due, or a wake-up


def next_claim(taken: int, free: int, batch: int) -> Pace:
    """After a claim that took ``taken`` items with ``free`` slots open, at most ``batch`` a claim
    (``WORKER_BATCH``): claim again at once when it came back full (its slots or its batch: more may be
    due), after the gap when it took less (all there was), and, when it took nothing, when the next item is
    due. The gap gathers what falls due one item at a time (runs in flight by the ten thousand) into one
    claim, and every batch after it (the transitions, the relay's calls) fills with it. "More is due now"
    is no reason to claim at once: where items fall due all the time (every poll of 30,000 runs, every
    submit of a burst), something is always due by the time a claim returns, and claiming again at once
    would bring back the claims of one or two items that the gap is for."""
    if taken == 0:
        return Pace.WHEN_DUE
    if taken >= min(free, batch):
        return Pace.AT_ONCE
    return Pace.AFTER_GAP


class Pump:
    """Claims work in batches and runs each item as its own task, at most ``concurrency`` at once."""

    def __init__(
        self,
        name: str,
        concurrency: int,
        idle_s: float,
        clock: Clock = SYSTEM,
        *,
        gap_s: float = 0.0,
        batch: int | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.concurrency = concurrency
        self.idle_s = idle_s
        self.gap_s = gap_s
        self.batch = batch or concurrency  # the most one claim takes (WORKER_BATCH)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.last_tick = time.monotonic()
        self._wake = asyncio.Event()
        # Leases of the items being worked on; an item cancelled by drain() stays here until released.
        self.held: dict[str, Any] = {}
        self._stopped = asyncio.Event()  # run()'s claim loop is not going (set until run() starts it)
        self._stopped.set()

    def wake(self) -> None:
        self._wake.set()

    async def claim(self, free: int) -> tuple[list[Coroutine[Any, Any, None]], float | None]:
        raise NotImplementedError

    async def release(self, leases: list[Any]) -> int:
        """Hands leased items back (due now), so that another worker need not wait out their leases."""
        raise NotImplementedError

    async def _held(self, key: str, lease: Any, work: Awaitable[Any]) -> None:
        """Works one item under its lease. A failure is logged and the item left to its lease, which hands
        it back; one coroutine does both, since every await of a step passes through each layer above it."""
        self.held[key] = lease
        try:
            await work
        except asyncio.CancelledError:
            raise  # stays held: drain() releases it
        except (RedisError, RedisClusterException, OSError) as exc:
            self.held.pop(key, None)
            log.warning("step interrupted; its lease will hand it back", pump=self.name, error=str(exc))
        except Exception:
            self.held.pop(key, None)
            log.exception("step failed; its lease will hand it back", pump=self.name)
        except BaseException:
            self.held.pop(key, None)
            raise
        else:
            self.held.pop(key, None)

    async def run(self, stop: asyncio.Event) -> None:
        self._stopped.clear()
        try:
            await self._loop(stop)
        finally:
            self._stopped.set()

    async def _loop(self, stop: asyncio.Event) -> None:
        backoff = 0.1
        loop = asyncio.get_running_loop()  # once: asyncio.create_task() looks it up for every task
        partial_at: float | None = None  # when the last claim that left slots free began
        while not stop.is_set():
            if partial_at is not None and (rest := partial_at + self.gap_s - time.monotonic()) > 0:
                # What fell due since a claim that took all there was waits for the next claim, at most
                # gap_s (WORKER_CLAIM_GAP_S): one claim then takes many items where it took one or two
                # (items due one by one, as at 100,000 runs in flight), and costs as much.
                await _wait(stop, rest)
                continue
            partial_at = None
            self.last_tick = now = time.monotonic()
            self._wake.clear()  # a wake-up from here on (during the claim too) cuts the wait below
            free = self.concurrency - len(self.tasks)
            try:
                work, next_due_ms = await self.claim(free) if free > 0 else ([], None)
                backoff = 0.1
            except (RedisError, RedisClusterException, OSError) as exc:
                # Redis is down or restarting: back off and resume by ourselves when it returns.
                log.warning("redis unavailable", pump=self.name, error=str(exc), retry_in_s=backoff)
                await _wait(stop, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for coro in work:
                task = loop.create_task(coro)
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            pace = next_claim(len(work), free, self.batch) if free > 0 else Pace.WHEN_DUE
            if pace is Pace.AT_ONCE:
                await asyncio.sleep(0)  # a full claim: more may be due; let the tasks start first
                if len(self.tasks) >= self.concurrency:
                    await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
                continue
            if free > 0:
                partial_at = now  # the next claim, whatever wakes the loop, waits out the gap from here
            if pace is Pace.WHEN_DUE:
                wait = self.idle_s
                if next_due_ms is not None:
                    wait = min(wait, max(0.0, next_due_ms / 1000 - self.clock.time()))
                await _wait_any(stop, self._wake, wait)

    async def until_idle(self) -> int:
        """Burst mode: claims and works what is due at the clock's now, batch after batch, until nothing
        is; returns how many items it worked. Work it schedules for later waits for the clock to move."""
        done = 0
        while True:
            work, _ = await self.claim(self.concurrency)
            if not work:
                return done
            await asyncio.gather(*work)
            done += len(work)

    async def drain(self, timeout_s: float) -> int:
        """Lets the work in flight finish; returns how many tasks were still running at the deadline
        (their leases hand them to another worker)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # The claim loop ends at its next turn, and a claim it has in flight still starts its steps: those
        # are waited for too, so that no step outlives the drain (and the store it writes to).
        while (self.tasks or not self._stopped.is_set()) and (left := deadline - loop.time()) > 0:
            waiting: set[asyncio.Future[Any]] = set(self.tasks)
            stopped = None
            if not self._stopped.is_set():  # the loop's last claim, still on its way
                stopped = loop.create_task(self._stopped.wait())
                waiting.add(stopped)
            await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if stopped is not None:
                stopped.cancel()
        if self.tasks:
            pending = set(self.tasks)
            for task in pending:
                task.cancel()
            if pending:  # bounded: a task that swallows its cancellation must not hold up the exit
                await asyncio.wait(pending, timeout=2.0)
            if self.held:
                try:
                    released = await self.release(list(self.held.values()))
                    log.info("leases handed back", pump=self.name, items=len(self.held), released=released)
                    self.held.clear()
                except (RedisError, RedisClusterException, OSError) as exc:
                    log.warning("could not hand leases back; they expire", pump=self.name, error=str(exc))
            return len(pending)
        return 0


class RunPump(Pump):
    def __init__(
        self,
        store: RunPumpStore,
        settings: Settings,
        step: Callable[[Any], Awaitable[None]],
        vendors: Sequence[str],
        intervals: dict[str, float],
        clock: Clock = SYSTEM,
    ) -> None:
        super().__init__(
            "runs",
            settings.worker_concurrency,
            settings.worker_idle_s,
            clock,
            gap_s=settings.worker_claim_gap_s,
            batch=settings.worker_batch,
        )
        self.store = store
        self.settings = settings
        self.step = step
        self.vendors = list(vendors)
        self.intervals = intervals
        self._turn = 0

    async def claim(self, free: int) -> tuple[list[Coroutine[Any, Any, None]], float | None]:
        now = self.clock.now_ms()
        work: list[Coroutine[Any, Any, None]] = []
        next_due: float | None = None
        lease_ms = int(self.settings.lease_s * 1000)
        # A probe that never answers (its worker died) lets another run probe after the longest step.
        probe_lease_ms = int((2 * self.settings.vendor_timeout_s + 5) * 1000)
        # Rotate which vendor is asked first so that one busy vendor cannot starve the others.
        self._turn = (self._turn + 1) % len(self.vendors)
        order = self.vendors[self._turn :] + self.vendors[: self._turn]
        for vendor in order:
            if free - len(work) <= 0:
                break
            limit = min(self.settings.worker_batch, free - len(work))
            claimed, nxt = await self.store.runs.claim_runs(
                vendor, now, limit, lease_ms, self.intervals.get(vendor, 0.0), LOOKAHEAD_MS, probe_lease_ms
            )
            work.extend(
                self._held(
                    c.run.id,
                    (vendor, c.run.id, c.slot_ms + lease_ms),
                    self.step(c) if c.probe is None else self._probe(vendor, c),
                )
                for c in claimed
            )
            if nxt is not None:
                next_due = nxt if next_due is None else min(next_due, nxt)
        return work, next_due

    async def until_idle(self) -> int:
        """Burst mode reads every shard's due set first, not only those this worker believes due
        (store/due.py): everything due at the clock's now is worked."""
        self.store.runs.forget_due()
        return await super().until_idle()

    async def release(self, leases: list[Any]) -> int:
        released, now = 0, self.clock.now_ms()
        for vendor in self.vendors:
            mine = [(run_id, lease_end) for v, run_id, lease_end in leases if v == vendor]
            released += await self.store.runs.release_runs(vendor, mine, now)
        return released

    async def _probe(self, vendor: str, claimed: ClaimedRun) -> None:
        """The vendor is paused after a 429 and this step is its one probe (worker/budget.py: the step's
        ticket carries the token to its requests). A probe that ended without the vendor's answer (it sent
        nothing, or was cut short) is handed back, so that another run may probe at once; after an answer
        or a 429 the store has settled it already, and this changes nothing."""
        assert claimed.probe is not None
        try:
            await self.step(claimed)
        finally:
            try:
                await self.store.limits.pause_settle(
                    vendor, self.clock.now_ms(), claimed.probe, answered=False
                )
            except (RedisError, RedisClusterException, OSError) as exc:  # its lease runs out instead
                log.warning("probe not released", vendor=vendor, error=str(exc))


def client_in_flight_cap(client_max_in_flight: int, concurrency: int) -> int:
    """How many deliveries one client may have in flight: ``CLIENT_MAX_IN_FLIGHT``, and never more than
    half of a worker's delivery slots. A hanging receiver holds its slot for up to
    ``CALLBACK_TIMEOUT_S``; one client whose receivers all hang, claimed by one worker, must leave that
    worker room for everyone else's callbacks."""
    return max(1, min(client_max_in_flight, concurrency // 2))


class DeliveryPump(Pump):
    def __init__(
        self,
        store: DeliveryClaims,
        settings: Settings,
        attempt: Callable[[Any], Awaitable[Any]],
        clock: Clock = SYSTEM,
    ) -> None:
        super().__init__(
            "deliveries",
            settings.worker_concurrency,
            settings.worker_idle_s,
            clock,
            gap_s=settings.delivery_claim_gap_s,
            batch=settings.worker_batch,
        )
        self.store = store
        self.settings = settings
        self.attempt = attempt
        self.client_max = client_in_flight_cap(settings.client_max_in_flight, self.concurrency)
        if self.client_max < settings.client_max_in_flight:
            log.warning(
                "CLIENT_MAX_IN_FLIGHT is over half of WORKER_CONCURRENCY; this worker claims at most half",
                client_max_in_flight=settings.client_max_in_flight,
                worker_concurrency=self.concurrency,
                applied=self.client_max,
            )

    async def claim(self, free: int) -> tuple[list[Coroutine[Any, Any, None]], float | None]:
        now = self.clock.now_ms()
        lease_ms = int(self.settings.lease_s * 1000)
        held: dict[str, int] = {}
        for _, _, client, _ in self.held.values():
            held[client] = held.get(client, 0) + 1
        claimed, nxt = await self.store.claim_deliveries(
            now, min(self.settings.worker_batch, free), lease_ms, client_max=self.client_max, held=held
        )
        work = []
        for c in claimed:
            lease = (c.delivery.id, c.delivery.subscription_id, c.delivery.client, now + lease_ms)
            # Held from the claim on, not from when its task starts: the next claim may come first, and
            # counts what this worker holds per client.
            self.held[c.delivery.id] = lease
            work.append(self._held(c.delivery.id, lease, self._attempt(c)))
        return work, nxt

    async def _attempt(self, claimed: Any) -> None:
        try:
            await self.attempt(claimed)
        finally:
            # What the attempt's end made due (a parked delivery of its subscription or client, the next
            # of its run's chain) is claimed now, not after WORKER_IDLE_S; and one of the client's
            # deliveries this worker parked for want of room comes back (its slot is free once this
            # task's lease leaves `held`, right after).
            try:  # no round trip when none of the client's is parked here
                ended_in = keys.shard_of(claimed.delivery.id)
                await self.store.unpark(claimed.delivery.client, self.clock.now_ms(), ended_in=ended_in)
            except (RedisError, RedisClusterException, OSError) as exc:  # the sweeper brings it back
                log.warning("parked delivery not brought back", error=str(exc))
            self.wake()

    def due_in(self, shards: frozenset[int]) -> None:
        """A relay in this process made deliveries due in ``shards``: claim there now (read by the next
        claim, which this wakes), not after the next look at every shard."""
        self.store.made_due(shards, self.clock.now_ms())
        self.wake()

    async def until_idle(self) -> int:
        """Burst mode reads every shard's due set first (store/due.py)."""
        self.store.forget_due()
        return await super().until_idle()

    async def release(self, leases: list[Any]) -> int:
        return await self.store.release_deliveries(leases, self.clock.now_ms())


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass


async def _wait_any(stop: asyncio.Event, wake: asyncio.Event, seconds: float) -> None:
    if seconds <= 0:
        return
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
