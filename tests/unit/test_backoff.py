"""The three backoffs (service/core/backoff.py) as tables: the poll interval, the wait after a vendor
fault, the wait after a failed callback. The jitter source is pinned: ``Pinned(share)`` answers
``uniform(a, b)`` with the point ``share`` of the way from a to b."""

from __future__ import annotations

import random
from typing import Any

import pytest

from service.config.settings import VendorSettings
from service.core import backoff
from service.vendors import cloudsquid, nutrient, uptiq


class Pinned:
    def __init__(self, share: float) -> None:
        self.share = share

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.share


LOW, MID, HIGH = Pinned(0.0), Pinned(0.5), Pinned(1.0)


def policy(spec: Any) -> VendorSettings:
    d = spec.defaults
    return VendorSettings(
        name=spec.name,
        base_url=d.base_url,
        api_key="k",
        poll_initial_s=d.poll_initial_s,
        poll_max_s=d.poll_max_s,
        poll_multiplier=d.poll_multiplier,
        max_run_s=d.max_run_s,
        max_rps=d.max_rps,
    )


CLOUDSQUID, UPTIQ, NUTRIENT = policy(cloudsquid.SPEC), policy(uptiq.SPEC), policy(nutrient.SPEC)


# The poll interval: (policy, current planned interval, jitter) → (planned, wait) ------------------------
@pytest.mark.parametrize(
    ("p", "current", "jitter", "planned", "wait"),
    [
        # Cloudsquid: "poll every 2-5 seconds" (docs/vendors.md): the first poll at 2 s, +0-15 %.
        (CLOUDSQUID, None, LOW, 2.0, 2.0),
        (CLOUDSQUID, None, HIGH, 2.0, 2.3),
        # Grown by the multiplier, never past 5 s with the jitter included: at the top it goes below.
        (CLOUDSQUID, 5.0, HIGH, 5.0, 4.25),
        (CLOUDSQUID, 5.0, LOW, 5.0, 5.0),
        # Uptiq: "poll every 5-10 seconds".
        (UPTIQ, None, HIGH, 5.0, 5.75),
        (UPTIQ, 10.0, HIGH, 10.0, 8.5),
        # Nutrient: "wait at least two seconds", "delay = Math.min(delay * 2, 30000)".
        (NUTRIENT, None, LOW, 2.0, 2.0),
        (NUTRIENT, 2.0, LOW, 4.0, 4.0),
        (NUTRIENT, 4.0, MID, 8.0, 8.6),
        (NUTRIENT, 16.0, LOW, 30.0, 30.0),
        (NUTRIENT, 30.0, HIGH, 30.0, 25.5),
    ],
)
def test_poll_delay(
    p: VendorSettings, current: float | None, jitter: Pinned, planned: float, wait: float
) -> None:
    assert backoff.poll_delay(p, current, jitter) == (pytest.approx(planned), pytest.approx(wait))


@pytest.mark.parametrize(
    ("p", "low", "high"), [(CLOUDSQUID, 2.0, 5.0), (UPTIQ, 5.0, 10.0), (NUTRIENT, 2.0, 30.0)]
)
def test_poll_waits_stay_in_the_documented_range_whatever_the_jitter(
    p: VendorSettings, low: float, high: float
) -> None:
    rng = random.Random(3)
    for _ in range(100):
        current = None
        for _ in range(12):
            current, wait = backoff.poll_delay(p, current, rng)
            assert low <= wait <= high


# The wait after a vendor fault: (attempt, Retry-After, jitter) → seconds ------------------------------
@pytest.mark.parametrize(
    ("attempt", "retry_after", "jitter", "wait"),
    [
        (1, None, LOW, 2.0),  # POLL_INITIAL_S
        (1, None, HIGH, 2.4),  # times up to 1.2
        (2, None, LOW, 4.0),  # doubled per fault in a row
        (3, None, LOW, 8.0),
        (5, None, LOW, 30.0),  # capped at POLL_MAX_S
        (9, None, HIGH, 36.0),  # the cap, times the jitter
        (1, 10.0, LOW, 10.0),  # never earlier than the vendor's Retry-After
        (3, 1.0, LOW, 8.0),  # a shorter Retry-After does not shorten the backoff
        (1, 0.0, LOW, 2.0),
    ],
)
def test_fault_delay(attempt: int, retry_after: float | None, jitter: Pinned, wait: float) -> None:
    assert backoff.fault_delay(NUTRIENT, attempt, retry_after, jitter) == pytest.approx(wait)


# The wait after a failed callback: (failures, Retry-After, jitter) → seconds or None -------------------
SCHEDULE = (1.0, 10.0, 60.0)


@pytest.mark.parametrize(
    ("failures", "retry_after", "jitter", "wait"),
    [
        (1, None, MID, 1.0),  # the schedule's first step
        (1, None, LOW, 0.8),  # -20 %
        (1, None, HIGH, 1.2),  # +20 %
        (2, None, MID, 10.0),
        (3, None, HIGH, 72.0),
        (4, None, MID, None),  # exhausted: the delivery fails
        (0, None, MID, None),  # no failure yet: nothing to wait for
        (1, 5.0, MID, 5.0),  # Retry-After honoured: never earlier than asked
        (1, 999.0, MID, 60.0),  # but never later than the schedule's longest step
        (2, 3.0, MID, 10.0),  # a shorter Retry-After does not shorten the step
    ],
)
def test_delivery_wait(failures: int, retry_after: float | None, jitter: Pinned, wait: float | None) -> None:
    got = backoff.delivery_wait(SCHEDULE, failures, retry_after, jitter)
    assert got == (None if wait is None else pytest.approx(wait))


@pytest.mark.parametrize(
    ("planned", "share", "expected"),
    [(2.0, 0.1, 2.2), (5.0, 0.1, 4.5), (4.8, 0.1, 4.32), (2.0, 0.0, 2.0), (1.0, 0.1, 2.0)],
)
def test_jittered(planned: float, share: float, expected: float) -> None:
    assert backoff.jittered(planned, 2.0, 5.0, share) == pytest.approx(expected)
