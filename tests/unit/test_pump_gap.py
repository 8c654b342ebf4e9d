"""The claim loop's pace (``Pump._loop``, ``pumps.next_claim``; ``WORKER_CLAIM_GAP_S`` for run steps,
``DELIVERY_CLAIM_GAP_S`` for callbacks): after a claim that took all there was (under its free slots and
its batch size), the next claim waits out the gap, so that what falls due meanwhile is taken by one claim;
after a full batch (its free slots, or its batch size: WORKER_BATCH), the next claim is at once (a backlog
drains at full speed); a gap of 0 claims again at once. The claims here are scripted (a Pump whose claim
hands out what the test says): the loop's pace is what is under test, not the store's claim, which
tests/store/test_two_phase.py runs on a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from service.vendors.registry import load_settings
from service.worker.pumps import DeliveryPump, Pace, Pump, RunPump, next_claim


@pytest.mark.parametrize(
    ("taken", "free", "batch", "pace"),
    [
        (0, 10, 10, Pace.WHEN_DUE),  # nothing due, or nothing claimable (a vendor's budget): not a spin
        (10, 10, 200, Pace.AT_ONCE),  # every free slot filled
        (200, 500, 200, Pace.AT_ONCE),  # stopped at WORKER_BATCH with slots free: a backlog drains at once
        (250, 500, 200, Pace.AT_ONCE),  # several vendors' batches in one claim
        (3, 10, 200, Pace.AFTER_GAP),  # took all there was
        (199, 500, 200, Pace.AFTER_GAP),  # under its batch: all there was, though more fell due since
    ],
)
def test_the_next_claim_after_a_claim(taken: int, free: int, batch: int, pace: Pace) -> None:
    assert next_claim(taken, free, batch) is pace


def test_run_steps_and_callbacks_each_have_their_gap() -> None:
    settings = load_settings(
        {
            "HOOKBRIDGE_REDIS_URL": "redis://127.0.0.1:1",
            "HOOKBRIDGE_WORKER_CLAIM_GAP_S": "0.1",
            "HOOKBRIDGE_DELIVERY_CLAIM_GAP_S": "0.002",
        }
    )
    runs = RunPump(None, settings, step=_no_step, vendors=["nutrient"], intervals={})  # type: ignore[arg-type]
    deliveries = DeliveryPump(None, settings, attempt=_no_step)  # type: ignore[arg-type]
    assert (runs.gap_s, deliveries.gap_s) == (0.1, 0.002)


async def _no_step(_: Any) -> None:
    return None


class Scripted(Pump):
    """Each claim takes the next count of items from ``batches`` (then none), and notes when it began."""

    def __init__(
        self, batches: list[int], gap_s: float, concurrency: int = 10, batch: int | None = None
    ) -> None:
        super().__init__("test", concurrency, idle_s=0.001, gap_s=gap_s, batch=batch)
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


async def test_a_claim_that_stopped_at_its_batch_size_claims_again_at_once() -> None:
    # Batches of 4 (the pump's batch size) with 10 slots free: none waits for the 5 s gap (before, a claim
    # under the free slots always did, and a backlog drained one batch a gap).
    gaps = await _run(Scripted([4, 4, 4, 1], gap_s=5.0, batch=4), claims=4)
    assert all(g < 5.0 for g in gaps[:3]), gaps
