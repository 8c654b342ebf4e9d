"""Azure's budgets: reads and submits each have a pause of their own after a 429 ("Analyze (POST) TPS ...
15", "Get operations TPS ... 50", next-vendors.md §1.8), and 429s in a row on reads without Retry-After
pause them 2, 5, 13, 34 s ("back off exponentially, for example with a 2-5-13-34 second pattern", §1.4).
The worker's own budgets over a real Redis, on a manual clock."""

from __future__ import annotations

import pytest

from service.core.clock import ManualClock
from service.store import Store, connect
from service.vendors.base import VendorRateLimited
from service.vendors.registry import load_settings, vendors
from service.worker.budget import GroupBudget, StoreBudget
from tests.conftest import base_env


def _budgets(redis_url: str, clock: ManualClock) -> dict[str, GroupBudget]:
    settings = load_settings(base_env(redis_url))
    store = Store(connect(settings), settings)
    vendor = settings.vendor("azure_di")
    shared = StoreBudget(store.limits, vendor, clock, prepaid=False)
    return {
        group.name: GroupBudget(store.limits, vendor, group.name, 0.0, shared, clock, group.pause_schedule_s)
        for group in vendors()["azure_di"].budgets
    }


async def paused_for(budget: GroupBudget) -> float | None:
    try:
        await budget.acquire()
    except VendorRateLimited as limited:
        return limited.retry_after
    return None


async def test_429s_on_reads_pause_reads_2_5_13_34_and_never_submits(redis_url: str) -> None:
    clock = ManualClock()
    budgets = _budgets(redis_url, clock)
    reads, submits = budgets["poll"], budgets["submit"]
    seen = []
    for _ in range(5):
        await reads.settle(None, 429, None)  # the probe after each pause is refused again
        seen.append(await paused_for(reads))
        assert await paused_for(submits) is None  # a 429 on a read does not stop submits
        clock.advance(seen[-1] or 0)
    assert seen == [2.0, 5.0, 13.0, 34.0, 34.0]
    # An answer ends the streak: the next 429 starts from 2 s again.
    await reads.settle(None, 200, None)
    await reads.settle(None, 429, None)
    assert await paused_for(reads) == 2.0


async def test_a_retry_after_wins_over_the_schedule(redis_url: str) -> None:
    clock = ManualClock()
    reads = _budgets(redis_url, clock)["poll"]
    await reads.settle(None, 429, 7.0)
    assert await paused_for(reads) == pytest.approx(7.0)


async def test_submits_pause_alone_doubling_from_the_floor(redis_url: str) -> None:
    clock = ManualClock()
    budgets = _budgets(redis_url, clock)
    await budgets["submit"].settle(None, 429, None)
    assert await paused_for(budgets["submit"]) == 2.0
    assert await paused_for(budgets["poll"]) is None
