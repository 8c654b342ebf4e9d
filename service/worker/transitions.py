"""Transitions of the run steps that finish together go to Redis in one call.

A worker polls hundreds of runs at once; their answers arrive in bursts, and each step ends in one state
change (``Runs.transition``, one EVALSHA). One round trip each cost the worker about a sixth of its CPU
(the command's send and the reply's read, per step). Here a step's change waits a little (``LINGER_S``,
from the first change queued), and every change queued by then goes in one call of
the ``transitions`` script (``Runs.transitions``): each is still applied on its own, with its own outcome, so
a step cannot tell the difference but for the time it saves. (A pipeline of one EVALSHA each, the first
version, still cost the worker a timer and a reply's parse per change.)
"""

from __future__ import annotations

import asyncio

from service.core.lifecycle import Transition
from service.observability.metrics import count_run_end
from service.store import Applied, Outcome
from service.store.ports import RunTransitions

# More than this many changes in one turn go in several calls: one call holds Redis for its whole
# batch (about 20-50 us a change), and its reply is one array. Saturated, a turn brings about 74.
MAX_BATCH = 128
# How long the first change queued waits for others before the batch goes (MAX_BATCH sends it at once).
# A worker that is not saturated finishes a step or two a turn: each batch was one change, and each of its
# relay's steps a round trip for one run. Two milliseconds gather several, against a poll's lateness goal
# of a second and a callback's of 50 ms.
LINGER_S = 0.002


class TransitionBatcher:
    def __init__(self, store: RunTransitions, *, linger_s: float = LINGER_S) -> None:
        self._store = store
        self._linger_s = linger_s
        self._timer: asyncio.TimerHandle | None = None
        self._queued: list[tuple[Transition, asyncio.Future[Outcome]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def apply(self, change: Transition) -> Outcome:
        """:meth:`Runs.transition`, sent with the other changes of this turn of the event loop."""
        loop = self._loop
        if loop is None or not loop.is_running():  # get_running_loop() asks the OS for the process id
            loop = self._loop = asyncio.get_running_loop()
        done: asyncio.Future[Outcome] = loop.create_future()
        if not self._queued:
            # Runs after every step that is ready in this turn, and those of the next few milliseconds,
            # have queued (0: those of this turn).
            if self._linger_s > 0:
                self._timer = loop.call_later(self._linger_s, self._flush)
            else:
                loop.call_soon(self._flush)
        self._queued.append((change, done))
        if len(self._queued) >= MAX_BATCH:
            self._flush()
        return await done

    async def settle(self) -> None:
        """Sends what is queued and waits for every change on its way (shutdown, before the store's
        connections close: a change still sending would open a connection of a closed pool, and leave it
        open)."""
        while self._queued or self._sending:
            if self._queued:
                self._flush()
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        queued, self._queued = self._queued, []
        for at in range(0, len(queued), MAX_BATCH):
            task = asyncio.create_task(self._send(queued[at : at + MAX_BATCH]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Transition, asyncio.Future[Outcome]]]) -> None:
        try:
            if len(batch) == 1:  # alone in its turn: no batch to build
                outcomes: list[Outcome | Exception] = [await self._store.transition(batch[0][0])]
            else:
                outcomes = await self._store.transitions([change for change, _ in batch])
        except Exception as exc:  # the connection failed: every step of the batch sees it
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        except BaseException:  # cancelled (shutdown): so are the steps that waited for it
            for _, done in batch:
                done.cancel()
            raise
        for (change, done), outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, Applied) and outcome.ended:  # counted even if its step was cancelled
                count_run_end(change.run.vendor, change.run.status, change.run.client)
            if done.done():  # the step was cancelled meanwhile
                continue
            if isinstance(outcome, Exception):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)
