"""The claim loop's pace (``Pump._loop``, ``WORKER_CLAIM_GAP_S``): after a claim that took all there was
(slots left free), the next claim waits out the gap, so that what falls due meanwhile is taken by one claim;
after a full batch the next claim is at once (a backlog drains at full speed); a gap of 0 claims again at
once. The claims here are scripted (a Pump whose claim hands out what the test says): the loop's pace is
what is under test, not the store's claim, which tests/store/test_two_phase.py runs on a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from service.worker.pumps import Pump


class Scripted(Pump):
    """Each claim takes the next count of items from ``batches`` (then none), and notes when it began."""

    def __init__(self, batches: list[int], gap_s: float, concurrency: int = 10) -> None:
        super().__init__("test", concurrency, idle_s=0.001, gap_s=gap_s)
        self.batches = batches
        self.at: list[float] = []
        self.done = asyncio.Event()

    async def claim(self, free: int) -> tuple[list[Coroutine[Any, Any, None]], float | None]:
        self.at.append(time.monotonic())
        if not self.batches:
            self.done.set()
            return [], None
        n = min(self.batches.pop(0), free)
        return [self._item() for _ in range(n)], None

    async def _item(self) -> None:
        return None


async def _run(pump: Scripted, claims: int) -> list[float]:
    stop = asyncio.Event()
    task = asyncio.create_task(pump.run(stop))
    try:
        async with asyncio.timeout(10):
            while len(pump.at) < claims:
                await asyncio.sleep(0.001)
    finally:
        stop.set()
        await task
    return [b - a for a, b in zip(pump.at, pump.at[1:], strict=False)][: claims - 1]


async def test_after_a_claim_that_left_slots_free_the_next_waits_out_the_gap() -> None:
    gaps = await _run(Scripted([2, 3, 1], gap_s=0.05), claims=4)
    assert all(g >= 0.05 for g in gaps), gaps


async def test_after_a_full_batch_the_next_claim_is_at_once() -> None:
    # Three full batches of the pump's 10 slots (their items end at once): none waits for the gap.
    gaps = await _run(Scripted([10, 10, 10, 1], gap_s=5.0), claims=4)
    assert all(g < 5.0 for g in gaps[:3]), gaps


async def test_a_gap_of_zero_claims_again_at_once() -> None:
    # idle_s is 1 ms and no claim names a next due time: with no gap, claims follow within the idle wait.
    gaps = await _run(Scripted([1, 1, 1, 1], gap_s=0.0), claims=5)
    assert all(g < 1.0 for g in gaps), gaps
