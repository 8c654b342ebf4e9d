"""``asyncio.timeout()`` for the many steps a worker runs at once, on one loop timer instead of one each.

Every step runs under a timeout that almost never fires (twice the vendor timeout). ``asyncio.timeout``
arms and cancels a timer of the event loop per step (a libuv timer under uvloop: allocated, started,
stopped, closed), a few percent of a poll's CPU. Here the deadlines of the steps in flight are kept in
one heap, and one loop timer is armed at the earliest: a step's timeout costs a heap push and a flag.
What a step sees is ``asyncio.timeout``'s: at its deadline its task is cancelled, and the cancellation
becomes ``TimeoutError`` when it leaves the block (unless something else cancelled the task as well).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from types import TracebackType

_ENTERED, _EXPIRING, _LEFT = 0, 1, 2


class Deadlines:
    """The timeouts of one event loop's steps (one per :class:`~service.worker.calls.VendorCalls`)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._live = 0  # entries of the heap still inside their block
        self._seq = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed = math.inf

    def timeout(self, delay: float) -> _Deadline:
        """``async with deadlines.timeout(delay):`` as ``async with asyncio.timeout(delay):``."""
        return _Deadline(self, delay)

    def _add(self, entry: _Deadline, delay: float) -> asyncio.AbstractEventLoop:
        loop = self._loop
        # The loop of the last step while it runs: asyncio.get_running_loop() (which asks the OS for the
        # process id, each time) only when it does not, that is once per loop.
        if loop is None or not loop.is_running():
            loop = asyncio.get_running_loop()
            if loop is not self._loop:  # a new loop (tests run one per test): nothing of the old one is left
                self._heap, self._live, self._loop, self._timer, self._armed = [], 0, loop, None, math.inf
        when = loop.time() + delay
        heapq.heappush(self._heap, (when, next(self._seq), entry))
        self._live += 1
        if when < self._armed:
            self._arm(loop, when)
        return loop

    def _left(self) -> None:
        self._live -= 1
        # The deadlines of the steps that left stay in the heap until they are due or it is compacted.
        if len(self._heap) > 2 * self._live + 256:
            self._heap = [item for item in self._heap if item[2].state == _ENTERED]
            heapq.heapify(self._heap)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = when
        self._timer = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._armed = None, math.inf
        loop = self._loop
        assert loop is not None
        # Within the loop's clock resolution, as its own timers (uvloop's fire on whole milliseconds).
        now = loop.time() + 0.001
        heap = self._heap
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)[2]
            if entry.state == _ENTERED:
                self._live -= 1
                entry.expire()
        if heap:
            self._arm(loop, heap[0][0])


class _Deadline:
    __slots__ = ("_delay", "_owner", "_task", "state")

    def __init__(self, owner: Deadlines, delay: float) -> None:
        self._owner = owner
        self._delay = delay
        self._task: asyncio.Task[object] | None = None
        self.state = _ENTERED

    async def __aenter__(self) -> None:
        loop = self._owner._add(self, self._delay)
        task = asyncio.current_task(loop)
        if task is None:
            self.state = _LEFT
            self._owner._left()
            raise RuntimeError("a timeout should be used inside a task")
        self._task = task

    def expire(self) -> None:
        assert self._task is not None
        self.state = _EXPIRING
        self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None  # what stays in the heap until it is due holds no task
        if self.state == _ENTERED:
            self.state = _LEFT
            self._owner._left()
            return
        self.state = _LEFT
        assert task is not None
        if task.uncancel() == 0 and exc_type is asyncio.CancelledError:
            # No other cancellation is pending: this one was ours.
            raise TimeoutError from exc
