"""The worker's own pace behind the store's budget (``worker/budget.py:paced``): a stall of the event loop
past several slots never reaches the vendor as a burst, and jitter below half an interval neither delays
a request nor adds up."""

from __future__ import annotations

import itertools

import pytest

from service.core.clock import ManualClock
from service.worker.budget import Pace, paced

INTERVAL = 200.0  # ms: a request every 200 ms: MAX_RPS=5


@pytest.mark.parametrize(
    ("now", "tat", "send", "tat_after"),
    [
        # idle: the request goes out when it wakes, and the pace is one interval past it
        (1000, 0, 1000, 1200),
        (1000, 1000, 1000, 1200),
        # on schedule (woken at its slot, one interval after the last): no wait
        (1200, 1200, 1200, 1400),
        # woken 5 ms early or late against the pace: no wait, and the pace keeps only the later time
        (1195, 1200, 1195, 1400),
        (1205, 1200, 1205, 1405),
        # jitter up to half an interval is absorbed
        (1100, 1200, 1100, 1400),
        # the second of a pair woken together (after a stall): half an interval after the first
        (1000, 1200, 1100, 1400),
        # the third: an interval after the second
        (1000, 1400, 1300, 1600),
    ],
)
def test_paced(now: float, tat: float, send: float, tat_after: float) -> None:
    assert paced(now, tat, INTERVAL) == (send, tat_after)


async def _sends(slots: list[float], clock: ManualClock, interval_ms: float) -> list[float]:
    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    pace = Pace(clock, interval_ms, sleep)
    sent = []
    for slot in slots:  # the order requests wake in: their slots' order
        await pace.until(slot)
        sent.append(clock.time() * 1000)
    return sent


async def test_requests_whose_slots_went_by_in_a_stall_go_out_an_interval_apart() -> None:
    start = 1_800_000_000_000.0
    clock = ManualClock(start / 1000)
    slots = [start + i * INTERVAL for i in range(8)]
    clock.advance(1.6)  # the loop stalled through all eight slots
    sent = await _sends(slots, clock, INTERVAL)
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert sent[0] == pytest.approx(start + 1600, abs=0.01)
    assert gaps[0] == pytest.approx(INTERVAL / 2, abs=0.01)
    assert all(g == pytest.approx(INTERVAL, abs=0.01) for g in gaps[1:])
    # six in a row never come faster than the budget allows, less half an interval
    assert min(sent[i + 5] - sent[i] for i in range(len(sent) - 5)) >= 5 * INTERVAL - INTERVAL / 2 - 0.01


async def test_on_time_requests_go_out_at_their_slots() -> None:
    start = 1_800_000_000_000.0
    clock = ManualClock(start / 1000)
    slots = [start + i * INTERVAL for i in range(6)]
    sent = await _sends(slots, clock, INTERVAL)
    assert sent == pytest.approx(slots, abs=0.01)


async def test_no_budget_means_no_pace() -> None:
    start = 1_800_000_000_000.0
    clock = ManualClock(start / 1000)
    sent = await _sends([start] * 5, clock, 0.0)
    assert sent == [start] * 5
