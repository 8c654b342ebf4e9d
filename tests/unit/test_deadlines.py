"""The steps' shared timeouts (service/worker/deadlines.py) behave as ``asyncio.timeout``."""

from __future__ import annotations

import asyncio

import pytest

from service.worker.deadlines import Deadlines


async def test_a_block_past_its_deadline_raises_timeout_error() -> None:
    deadlines = Deadlines()
    never = asyncio.Event()
    with pytest.raises(TimeoutError):
        async with deadlines.timeout(0.01):
            await never.wait()
    # The task is not left cancelled: it goes on.
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_blocks_that_end_in_time_leave_nothing_armed_for_them() -> None:
    deadlines = Deadlines()
    for _ in range(5000):
        async with deadlines.timeout(60):
            pass
    # What was left behind is compacted away, not kept until its deadline.
    assert len(deadlines._heap) <= 256 + 2


async def test_only_the_late_ones_of_many_concurrent_blocks_time_out() -> None:
    deadlines = Deadlines()
    gates = [asyncio.Event() for _ in range(40)]

    async def step(i: int) -> str:
        try:
            async with deadlines.timeout(60 if i % 2 else 0.02):
                await gates[i].wait()
        except TimeoutError:
            return "timeout"
        return "done"

    tasks = [asyncio.create_task(step(i)) for i in range(40)]
    for i in range(1, 40, 2):
        gates[i].set()
    results = await asyncio.gather(*tasks)
    assert results == ["timeout" if i % 2 == 0 else "done" for i in range(40)]


async def test_a_later_earlier_deadline_rearms_the_timer() -> None:
    deadlines = Deadlines()
    long_gate, entered = asyncio.Event(), asyncio.Event()

    async def long() -> None:
        async with deadlines.timeout(60):
            entered.set()
            await long_gate.wait()

    first = asyncio.create_task(long())
    await entered.wait()
    with pytest.raises(TimeoutError):
        async with deadlines.timeout(0.01):
            await asyncio.Event().wait()
    long_gate.set()
    await first


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    deadlines = Deadlines()
    entered = asyncio.Event()

    async def step() -> None:
        async with deadlines.timeout(60):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(step())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_exception_inside_the_block_passes_through() -> None:
    deadlines = Deadlines()
    with pytest.raises(ValueError, match="boom"):
        async with deadlines.timeout(60):
            raise ValueError("boom")
    assert deadlines._live == 0
