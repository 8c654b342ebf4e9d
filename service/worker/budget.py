"""The vendor budget as the worker spends it: a slot prepaid by the claim, then one slot per request; and
the vendor's pause after a 429, shared by every worker through the store.

After a 429 nothing goes to the vendor until the pause ends (``Retry-After``, never below the vendor's
``POLL_INITIAL_S``, its documented minimum interval; growing up to ``PAUSE_MAX_S`` while the header is
absent). Then the claim hands exactly one run out as the probe: its first request's answer ends the pause
(the backlog is released) or, if it is 429 again, extends it. This holds with ``MAX_RPS=0`` as well.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass

from service import logs
from service.clock import SYSTEM, Clock
from service.metrics import POLL_LATENESS, VENDOR_PAUSES
from service.settings import VendorSettings
from service.store import Store
from service.vendors.base import VendorRateLimited

log = logs.get("hookbridge.worker")

# (slot_ms, due_ms) reserved for the first request of the step running in this task.
prepaid: ContextVar[tuple[float, float] | None] = ContextVar("prepaid", default=None)


@dataclass
class ProbeTicket:
    """The step running in this task is the vendor's one probe after a pause."""

    vendor: str
    token: str
    settled: bool = False


probe: ContextVar[ProbeTicket | None] = ContextVar("probe", default=None)


class StoreBudget:
    """Implements ``vendors.http.Budget`` over the store's GCRA and pause, shared by every worker."""

    def __init__(self, store: Store, vendor: VendorSettings, clock: Clock = SYSTEM) -> None:
        self._store = store
        self._clock = clock
        self._vendor = vendor.name
        self.interval_ms = 1000.0 / vendor.max_rps if vendor.max_rps > 0 else 0.0
        self.floor_ms = vendor.poll_initial_s * 1000
        self.cap_ms = vendor.pause_max_s * 1000
        self._until_ms = 0.0  # the end of the last pause this process learned of (from its own 429s)
        VENDOR_PAUSES.labels(self._vendor)  # exported at 0 from the start, so that rate() sees the first
        self._lateness = POLL_LATENESS.labels(self._vendor)  # resolved once: observed on every step

    async def acquire(self) -> None:
        reserved = prepaid.get()
        if reserved is not None:
            # The step's first request: the claim that handed it out saw no pause and took its slot. With
            # MAX_RPS that slot may lie up to the claim's lookahead (1 s) ahead; it is kept even if a 429
            # pauses the vendor meanwhile (the "first round"): dropping it would waste the budget slot.
            prepaid.set(None)
            slot_ms, due_ms = reserved
        else:
            # A later request of the same step: the vendor may have been paused since the claim.
            self._unless_paused()
            if self.interval_ms <= 0:
                return
            slot_ms = await self._store.budget_take(self._vendor, self._clock.now_ms(), self.interval_ms)
            due_ms = slot_ms
        wait = slot_ms / 1000 - self._clock.time()
        if wait > 0:
            await asyncio.sleep(wait)
        if reserved is not None:
            self._lateness.observe(max(0.0, self._clock.time() - due_ms / 1000))

    async def settle(self, status: int | None, retry_after: float | None) -> None:
        ticket = self._ticket()
        if status == 429:
            until_ms, streak = await self._store.pause_limited(
                self._vendor,
                self._clock.now_ms(),
                None if retry_after is None else retry_after * 1000,
                self.floor_ms,
                self.cap_ms,
                ticket.token if ticket is not None else None,
            )
            self._until_ms = max(self._until_ms, until_ms)
            VENDOR_PAUSES.labels(self._vendor).inc()
            if ticket is not None:
                ticket.settled = True
            log.info(
                "vendor answered 429: paused for every worker",
                vendor=self._vendor,
                pause_s=round(max(0.0, until_ms / 1000 - self._clock.time()), 3),
                in_a_row=streak,
                probe=ticket is not None,
            )
        elif ticket is not None:
            ticket.settled = True
            if await self._store.pause_settle(
                self._vendor, self._clock.now_ms(), ticket.token, answered=status is not None
            ):
                if status is not None:
                    self._until_ms = 0.0
                    log.info("vendor answered the probe: pause over", vendor=self._vendor, status=status)

    def _unless_paused(self) -> None:
        """Holds a step's later request while this process knows the vendor is paused. It knows of its
        own 429s at once; another worker's reach it through the claim, which hands out nothing while the
        vendor is paused (a Redis read per request here would cost more than the few milliseconds it
        covers)."""
        if self._ticket() is not None:
            return  # this step is the probe
        wait = self._until_ms / 1000 - self._clock.time()
        if wait <= 0:
            return
        wait = max(wait, self.floor_ms / 1000)
        raise VendorRateLimited(
            "not sent: the vendor is paused after a 429", status_code=429, retry_after=wait
        )

    def _ticket(self) -> ProbeTicket | None:
        ticket = probe.get()
        if ticket is None or ticket.vendor != self._vendor or ticket.settled:
            return None
        return ticket


async def release_probe(store: Store, ticket: ProbeTicket, now_ms: int) -> None:
    """A probe step that ended without a vendor answer (it sent nothing, or was cut short)."""
    if not ticket.settled:
        ticket.settled = True
        await store.pause_settle(ticket.vendor, now_ms, ticket.token, answered=False)
