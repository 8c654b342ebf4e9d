"""The time the worker, the store and the simulator go by: the system's, or one a test moves
(:class:`ManualClock`).

The simulator reads ``monotonic`` (its runs' timelines) and ``time`` (the wall time it shows); one
``ManualClock`` given to both moves hookbridge and the vendors together with one ``advance``.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    def now_ms(self) -> int: ...

    def monotonic(self) -> float:
        """Seconds that only go forward (the simulator's timelines)."""
        ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def time(self) -> float:
        return self._now

    def now_ms(self) -> int:
        return int(self._now * 1000)

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


SYSTEM = SystemClock()
