"""When to try a failed delivery again: ``RETRY_SCHEDULE`` with ±20 % jitter, and ``Retry-After``."""

from __future__ import annotations

import random


def next_wait(
    schedule: tuple[float, ...], failed_attempts: int, retry_after: float | None, rng: random.Random
) -> float | None:
    """Seconds to wait after the ``failed_attempts``-th failure of a series, or None when it is exhausted.

    ``Retry-After`` (on 429/503) is honoured within the schedule's bounds: never earlier than the
    receiver asked, never later than the schedule's longest step.
    """
    if failed_attempts < 1 or failed_attempts > len(schedule):
        return None
    wait = schedule[failed_attempts - 1] * rng.uniform(0.8, 1.2)
    if retry_after is not None:
        wait = max(wait, min(retry_after, max(schedule)))
    return wait


# A subscription's rate limit, from one delivery every 1,000 s to 10,000 a second: the API's bounds
# (service/api/models.py), and the claim's clamp for a record written before them
# (store/lua/claim_deliveries.lua repeats the two numbers). Slower than one an hour would outlive the
# claim's rate budget key (an hour) and never be spaced at all.
RATE_LIMIT_MIN_PER_S = 0.001
RATE_LIMIT_MAX_PER_S = 10_000.0
MAX_IN_FLIGHT_MAX = 1000
