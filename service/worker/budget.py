"""The vendor budget as the worker spends it: a slot prepaid by the claim, then one slot per request; and
the vendor's pause after a 429, shared by every worker through the store.

After a 429 nothing goes to the vendor until the pause ends (``Retry-After``, never below the vendor's
``POLL_INITIAL_S``, its documented minimum interval; growing up to ``PAUSE_MAX_S`` while the header is
absent). Then the claim hands exactly one run out as the probe: its first request's answer ends the pause
(the backlog is released) or, if it is 429 again, extends it. This holds with ``MAX_RPS=0`` as well.

What a step's requests tell the budget travels with them, explicitly: the worker hands each step a
:class:`StepTicket` (its prepaid slot, whether it is the probe) in the adapter's ``call``, the adapter puts
it in every request's extensions (``call.extensions(kind)``) and the vendor client hands it to
:meth:`StoreBudget.acquire` and :meth:`StoreBudget.settle`. No context variable crosses the seam.

A vendor that declares budgets per request kind (``VendorSpec.budgets``: Azure's analyze and reads) has a
:class:`GroupBudget` per group: its own rate (``{V}_{NAME}_MAX_RPS``, a slot per request from the store's
GCRA, none prepaid by the claim) and its own pause after a 429, so that a 429 on a read does not stop
submits. A group's pause is held by each worker process from its own 429s (one 429 per process per pause
at most, not one per run); the claim neither reads it nor hands out a probe for it: the first request
after it ends is the probe, and a 429 again lengthens the next pause, doubling without ``Retry-After``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service.config.settings import VendorSettings
from service.core.clock import SYSTEM, Clock
from service.observability import logs
from service.observability.metrics import POLL_LATENESS, VENDOR_PAUSES
from service.store.ports import VendorLimits
from service.vendors.base import VendorRateLimited

log = logs.get("hookbridge.worker")

Sleep = Callable[[float], Awaitable[None]]


def paced(now_ms: float, tat_ms: float, interval_ms: float) -> tuple[float, float]:
    """When a request that woke at its budget slot (``now_ms``) goes out from this process, and the
    process's pace after it: ``(send_ms, tat_ms)``.

    The store's budget spaces slots ``interval_ms`` apart, but a slot is only a time to wake at: when the
    process's event loop stalls past several slots (a loaded host, a long GC), every request whose slot went
    by wakes at once, and without this they would reach the vendor together. So each process also keeps
    its own pace (GCRA with a tolerance of half an interval), applied in the order the requests wake (their
    slots' order): a request goes out when it wakes unless the pace asks it to wait. Jitter below half an
    interval delays nothing and does not add up (the pace remembers only the latest late send); a stall
    is paid once, by the requests behind it, and never reaches the vendor as a burst.
    """
    send = max(now_ms, tat_ms - interval_ms / 2)
    return send, max(tat_ms, send) + interval_ms


class Pace:
    """One process's pace for one budget (:func:`paced`): waits until a request's slot, then as long as
    the pace asks."""

    def __init__(self, clock: Clock, interval_ms: float, sleep: Sleep = asyncio.sleep) -> None:
        self._clock = clock
        self._interval_ms = interval_ms
        self._sleep = sleep
        self._tat_ms = 0.0

    async def until(self, slot_ms: float) -> None:
        wait = slot_ms / 1000 - self._clock.time()
        if wait > 0:
            await self._sleep(wait)
        if self._interval_ms <= 0:
            return
        now_ms = self._clock.time() * 1000
        send_ms, self._tat_ms = paced(now_ms, self._tat_ms, self._interval_ms)
        if send_ms > now_ms:
            await self._sleep((send_ms - now_ms) / 1000)


@dataclass
class StepTicket:
    """What one step's requests carry to the vendor's budget (``Call.ticket``): the slot the claim
    reserved for its first request (``(slot_ms, due_ms)``, taken by that request), and, when the step is
    the vendor's one probe after a pause, the probe's token, settled by its first answer."""

    vendor: str
    prepaid: tuple[float, float] | None = None
    probe: str | None = None
    settled: bool = False

    def live_probe(self) -> str | None:
        return self.probe if self.probe is not None and not self.settled else None


def _ticket_of(ticket: object | None, vendor: str) -> StepTicket | None:
    return ticket if isinstance(ticket, StepTicket) and ticket.vendor == vendor else None


class StoreBudget:
    """Implements ``vendors.http.Budget`` over the store's GCRA and pause, shared by every worker.

    ``prepaid``: whether the claim reserves the step's first slot from this budget (the vendor's shared
    budget when it declares no groups; a vendor with groups claims without a slot)."""

    def __init__(
        self,
        store: VendorLimits,
        vendor: VendorSettings,
        clock: Clock = SYSTEM,
        *,
        prepaid: bool = True,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._store = store
        self._clock = clock
        self._vendor = vendor.name
        self.interval_ms = 1000.0 / vendor.max_rps if vendor.max_rps > 0 else 0.0
        self._pace = Pace(clock, self.interval_ms, sleep)
        self.prepaid = prepaid
        self.floor_ms = vendor.poll_initial_s * 1000
        self.cap_ms = vendor.pause_max_s * 1000
        self._until_ms = 0.0  # the end of the last pause this process learned of (from its own 429s)
        VENDOR_PAUSES.labels(self._vendor)  # exported at 0 from the start, so that rate() sees the first
        self._lateness = POLL_LATENESS.labels(self._vendor)  # resolved once: observed on every step

    async def acquire(self, ticket: object | None = None) -> None:
        step = _ticket_of(ticket, self._vendor)
        reserved = step.prepaid if step is not None and self.prepaid else None
        if step is not None and reserved is not None:
            # The step's first request: the claim that handed it out saw no pause and took its slot. With
            # MAX_RPS that slot may lie up to the claim's lookahead (1 s) ahead; it is kept even if a 429
            # pauses the vendor meanwhile (the "first round"): dropping it would waste the budget slot.
            step.prepaid = None
            slot_ms, due_ms = reserved
        else:
            # A later request of the same step: the vendor may have been paused since the claim.
            self._unless_paused(step)
            if self.interval_ms <= 0:
                return
            slot_ms = await self._store.budget_take(self._vendor, self._clock.now_ms(), self.interval_ms)
            due_ms = slot_ms
        await self._pace.until(slot_ms)
        if reserved is not None:
            self._lateness.observe(max(0.0, self._clock.time() - due_ms / 1000))

    async def settle(
        self, ticket: object | None = None, status: int | None = None, retry_after: float | None = None
    ) -> None:
        step = _ticket_of(ticket, self._vendor)
        probe = step.live_probe() if step is not None else None
        if status == 429:
            until_ms, streak = await self._store.pause_limited(
                self._vendor,
                self._clock.now_ms(),
                None if retry_after is None else retry_after * 1000,
                self.floor_ms,
                self.cap_ms,
                probe,
            )
            self._until_ms = max(self._until_ms, until_ms)
            VENDOR_PAUSES.labels(self._vendor).inc()
            if step is not None and probe is not None:
                step.settled = True
            log.info(
                "vendor answered 429: paused for every worker",
                vendor=self._vendor,
                pause_s=round(max(0.0, until_ms / 1000 - self._clock.time()), 3),
                in_a_row=streak,
                probe=probe is not None,
            )
        elif step is not None and probe is not None:
            await self.answered(step, probe, status)

    async def answered(self, step: StepTicket, probe: str, status: int | None) -> None:
        """The probe's first answer (not 429, or none): the pause ends, or another run may probe."""
        step.settled = True
        if await self._store.pause_settle(
            self._vendor, self._clock.now_ms(), probe, answered=status is not None
        ):
            if status is not None:
                self._until_ms = 0.0
                log.info("vendor answered the probe: pause over", vendor=self._vendor, status=status)

    def _unless_paused(self, step: StepTicket | None) -> None:
        """Holds a step's later request while this process knows the vendor is paused. It knows of its
        own 429s at once; another worker's reach it through the claim, which hands out nothing while the
        vendor is paused (a Redis read per request here would cost more than the few milliseconds it
        covers)."""
        if step is not None and step.live_probe() is not None:
            return  # this step is the probe
        wait = self._until_ms / 1000 - self._clock.time()
        if wait <= 0:
            return
        wait = max(wait, self.floor_ms / 1000)
        raise VendorRateLimited(
            "not sent: the vendor is paused after a 429", status_code=429, retry_after=wait
        )


class GroupBudget:
    """Implements ``vendors.http.Budget`` for one group of request kinds (``VendorSpec.budgets``): a slot
    per request from the store's GCRA under the group's own key, and a pause of its own after a 429,
    held per worker process (module docstring). An answer also settles the step's probe of the vendor's
    shared pause (``shared``), since a step of such a vendor may send nothing else."""

    def __init__(
        self,
        store: VendorLimits,
        vendor: VendorSettings,
        group: str,
        max_rps: float,
        shared: StoreBudget,
        clock: Clock = SYSTEM,
        schedule_s: tuple[float, ...] = (),
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._store = store
        self._clock = clock
        self._vendor = vendor.name
        self._group = group
        self._key = f"{vendor.name}.{group}"  # a vendor's name holds no dot: no clash with another's
        self.interval_ms = 1000.0 / max_rps if max_rps > 0 else 0.0
        self._pace = Pace(clock, self.interval_ms, sleep)
        self.floor_ms = vendor.poll_initial_s * 1000
        self.cap_ms = vendor.pause_max_s * 1000
        self._shared = shared
        self._schedule_ms = tuple(s * 1000 for s in schedule_s)
        self._until_ms = 0.0
        self._streak = 0

    async def acquire(self, ticket: object | None = None) -> None:
        step = _ticket_of(ticket, self._vendor)
        now = self._clock.now_ms()
        if now < self._until_ms and (step is None or step.live_probe() is None):
            raise VendorRateLimited(
                f"not sent: the vendor's {self._group} requests are paused after a 429",
                status_code=429,
                retry_after=max(self._until_ms - now, self.floor_ms) / 1000,
            )
        if self.interval_ms <= 0:
            return
        slot_ms = await self._store.budget_take(self._key, now, self.interval_ms)
        await self._pace.until(slot_ms)

    async def settle(
        self, ticket: object | None = None, status: int | None = None, retry_after: float | None = None
    ) -> None:
        step = _ticket_of(ticket, self._vendor)
        if status == 429:
            now = self._clock.now_ms()
            self._streak = self._streak + 1 if now >= self._until_ms else max(self._streak, 1)
            if retry_after is not None:
                wait = min(max(retry_after * 1000, self.floor_ms), self.cap_ms)
            elif self._schedule_ms:
                wait = self._schedule_ms[min(self._streak, len(self._schedule_ms)) - 1]
                wait = min(max(wait, self.floor_ms), self.cap_ms)
            else:
                wait = min(self.floor_ms * 2 ** min(self._streak - 1, 40), self.cap_ms)
            self._until_ms = max(self._until_ms, now + wait)
            VENDOR_PAUSES.labels(self._vendor).inc()
            log.info(
                "vendor answered 429: requests of this kind paused in this worker",
                vendor=self._vendor,
                budget=self._group,
                pause_s=round(wait / 1000, 3),
                in_a_row=self._streak,
            )
            return
        if status is not None:
            self._streak = 0
        probe = step.live_probe() if step is not None else None
        if step is not None and probe is not None:
            await self._shared.answered(step, probe, status)
