"""The vendor budget as the worker spends it: a slot prepaid by the claim, then one slot per request."""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar

from service.metrics import POLL_LATENESS
from service.store import Store

# (slot_ms, due_ms) reserved for the first request of the step running in this task.
prepaid: ContextVar[tuple[float, float] | None] = ContextVar("prepaid", default=None)


class StoreBudget:
    """Implements ``vendors.http.Budget`` over the store's GCRA, shared by every worker."""

    def __init__(self, store: Store, vendor: str, max_rps: float) -> None:
        self._store = store
        self._vendor = vendor
        self.interval_ms = 1000.0 / max_rps if max_rps > 0 else 0.0

    async def acquire(self) -> None:
        reserved = prepaid.get()
        if reserved is not None:
            prepaid.set(None)
            slot_ms, due_ms = reserved
        elif self.interval_ms > 0:
            slot_ms = await self._store.budget_take(self._vendor, int(time.time() * 1000), self.interval_ms)
            due_ms = slot_ms
        else:
            return
        wait = slot_ms / 1000 - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        if reserved is not None:
            POLL_LATENESS.labels(self._vendor).observe(max(0.0, time.time() - due_ms / 1000))

    async def pause(self, seconds: float) -> None:
        now = int(time.time() * 1000)
        await self._store.budget_push(self._vendor, now, now + seconds * 1000)
