"""What the store answers to a change: applied, refused (a newer version of the run, or an attempt of the
delivery being sent), or no such record.

Typed values rather than the strings the Lua scripts reply with, so a caller matches on a type that
mypy checks (``isinstance(outcome, Applied)``) and reads only what that outcome carries."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.core.records import Run


@dataclass(frozen=True, slots=True)
class Applied:
    """The change is stored, with everything it implied."""

    deliveries: int = 0  # deliveries its events created
    # The change ended the run (it had no terminal status before): the caller counts the end, once.
    ended: bool = False
    # The shards of its events' deliveries: the delivery pump reads their due sets at its next claim,
    # not at its next look at every shard (WORKER_IDLE_S later). A hint, not part of the outcome.
    due_in: frozenset[int] = field(default=frozenset(), compare=False)


@dataclass(frozen=True, slots=True)
class Conflict:
    """The run is no longer at the change's version (or has ended): nothing was written."""

    current: Run  # the run as stored


@dataclass(frozen=True, slots=True)
class Missing:
    """No such run (it expired, or was never there): nothing was written."""


@dataclass(frozen=True, slots=True)
class Busy:
    """An attempt of the delivery is being sent under a lease: nothing was written (its result would race
    the change)."""


Outcome = Applied | Conflict | Missing
RetryOutcome = Applied | Busy | Missing
