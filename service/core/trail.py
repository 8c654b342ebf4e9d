"""A run's vendor trail: what happened at the vendor (the submit, each poll's vendor status and latency,
429s, progress, the result, faults), bounded so that a run in flight stays small in Redis.

Kept on the run record (``Run.trail``), written in the same transition as the step it describes (a 429
writes a transition of its own). Stored compactly as ``[ms since the run was created, kind,
vendor_status, latency_ms, detail]`` with trailing nulls dropped, the kind as its place in
:data:`STORED_KINDS` (a trail written before spells it out, and still reads: :func:`kind_of`), and a vendor
status that repeats the entry before it stored as ``SAME`` (0): a poll that finds the run as it was is
``[at, 1, 0, ms]``. The first ``HEAD`` entries and the last ``TAIL`` are kept, and ``Run.trail_dropped``
counts those in between. ``GET /v1/runs/{id}`` shows it whole (:func:`public`). A full trail of polls is
~190 bytes of JSON, and filling one adds ~130 bytes to a run in flight in Redis (docs/performance.md,
Redis memory).
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_args

from service.core import domain, shapes
from service.core.lifecycle import Transition
from service.core.records import Run, replace

KINDS: tuple[str, ...] = get_args(shapes.TrailKind)
# The kinds as a trail stores them: an entry holds its kind's place here, one digit where the word took up to
# 14 bytes (a full trail of polls and progress ~80 bytes fewer). Stored trails depend on the order: never
# reorder it; a new kind goes last (tests/unit/test_trail.py pins it and holds it to KINDS).
STORED_KINDS: tuple[str, ...] = (
    "submitted",
    "poll",
    "rate_limited",
    "progress",
    "result",
    "error",
    "timeout",
)
_CODES = {kind: code for code, kind in enumerate(STORED_KINDS)}
HEAD = 2  # the submit and the first poll: what the start looked like
TAIL = 8  # the latest: what it looks like now
MAX_TEXT = 80  # vendor status words and details are cut to this many characters
SAME = 0  # in an entry's vendor status: the one of the entry before it (a status is a string or null)


def _text(value: str | None) -> str | None:
    return None if value is None else value[:MAX_TEXT]


def record(
    change: Transition,
    kind: str,
    *,
    at_ms: int,
    vendor_status: str | None = None,
    latency_ms: float | None = None,
    detail: str | None = None,
) -> Transition:
    """``change`` with an entry appended to the trail of the run it writes."""
    fields = appended(
        change.run, kind, at_ms=at_ms, vendor_status=vendor_status, latency_ms=latency_ms, detail=detail
    )
    return dataclasses.replace(change, run=replace(change.run, **fields))


def appended(
    run: Run,
    kind: str,
    *,
    at_ms: int,
    vendor_status: str | None = None,
    latency_ms: float | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    """The fields (``trail``, ``trail_dropped``, ``rate_limited``) of ``run`` with an entry appended: what
    :func:`record` writes, for a change that sets them along with its own (one copy of the run, not two:
    the worker's poll, ``lifecycle.polled(..., also=...)``). A change leaves these fields alone, so they
    may be taken from the run before it."""
    trail, dropped = [*run.trail], run.trail_dropped  # the entries themselves are shared: never edited
    status = _text(vendor_status)
    entry: list[Any] = [
        at_ms - run.created_at,  # fewer digits than the time itself
        _CODES[kind],
        SAME if status is not None and trail and status == _status_at(trail, len(trail) - 1) else status,
        None if latency_ms is None else round(latency_ms),
        _text(detail),
    ]
    while entry[-1] is None:
        entry.pop()
    if len(trail) >= HEAD + TAIL:
        if _is_same(_status_of(trail[HEAD + 1])):  # it names the dropped entry's status: spelled out
            trail[HEAD + 1] = [*trail[HEAD + 1][:2], _status_at(trail, HEAD + 1), *trail[HEAD + 1][3:]]
        del trail[HEAD]
        dropped += 1
    trail.append(entry)
    limited = run.rate_limited + (kind == "rate_limited")
    return {"trail": trail, "trail_dropped": dropped, "rate_limited": limited}


def public(run: Run) -> dict[str, Any]:
    """``trail`` (oldest first), ``trail_dropped`` (entries left out between the first and the last ones)
    and ``rate_limited`` (the vendor's 429s for this run); ``polls`` is on the run already."""
    entries = []
    for raw, vendor_status in zip(run.trail, _statuses(run.trail), strict=True):
        at, _, _, latency, detail = [*raw, None, None, None][:5]
        entries.append(
            {
                "at": domain.rfc3339(at + run.created_at),
                "kind": kind_of(raw),
                "vendor_status": vendor_status,
                "latency_ms": latency,
                "detail": detail,
            }
        )
    return {"trail": entries, "trail_dropped": run.trail_dropped, "rate_limited": run.rate_limited}


def kind_of(entry: list[Any]) -> str:
    """An entry's kind, as :data:`KINDS` spells it (stored as its place in :data:`STORED_KINDS`, or spelled
    out by a trail written before the codes)."""
    kind = entry[1]
    return STORED_KINDS[kind] if type(kind) is int else str(kind)


def _status_of(entry: list[Any]) -> Any:
    return entry[2] if len(entry) > 2 else None


def _is_same(status: Any) -> bool:
    # Only SAME itself is an int (a status is a string or null; bool is no int here: its type is bool).
    return type(status) is int


def _status_at(trail: list[list[Any]], index: int) -> str | None:
    """The vendor status of ``trail[index]``, ``SAME`` resolved by walking back to a spelled-out one."""
    while index >= 0:
        entry = trail[index]
        status = entry[2] if len(entry) > 2 else None
        if type(status) is not int:
            return status
        index -= 1
    return None


def _statuses(trail: list[list[Any]]) -> list[str | None]:
    """Each entry's vendor status, ``SAME`` resolved (a trail written before it has none)."""
    out: list[str | None] = []
    last: str | None = None
    for entry in trail:
        status = _status_of(entry)
        last = last if _is_same(status) else status
        out.append(last)
    return out
