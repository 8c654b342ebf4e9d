"""A run's vendor trail: what happened at the vendor (the submit, each poll's vendor status and latency,
429s, progress, the result, faults), bounded so that a run in flight stays small in Redis.

Kept on the run record (``Run.trail``), written in the same transition as the step it describes (a 429
writes a transition of its own). Stored compactly as ``[ms since the run was created, kind,
vendor_status, latency_ms, detail]`` with trailing nulls dropped; the first ``HEAD`` entries and the
last ``TAIL`` are kept, and ``Run.trail_dropped`` counts those in between. ``GET /v1/runs/{id}`` shows it
(:func:`public`). About 60 bytes per run in flight; the feed's stream entry about 120 per event.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_args

from service import domain, shapes
from service.lifecycle import Transition
from service.records import Run, replace

KINDS: tuple[str, ...] = get_args(shapes.TrailKind)
HEAD = 2  # the submit and the first poll: what the start looked like
TAIL = 8  # the latest: what it looks like now
MAX_TEXT = 80  # vendor status words and details are cut to this many characters


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
    entry: list[Any] = [
        at_ms - run.created_at,  # fewer digits than the time itself
        kind,
        _text(vendor_status),
        None if latency_ms is None else round(latency_ms),
        _text(detail),
    ]
    while entry[-1] is None:
        entry.pop()
    trail, dropped = [*run.trail], run.trail_dropped
    if len(trail) >= HEAD + TAIL:
        del trail[HEAD]
        dropped += 1
    trail.append(entry)
    limited = run.rate_limited + (kind == "rate_limited")
    return {"trail": trail, "trail_dropped": dropped, "rate_limited": limited}


def public(run: Run) -> dict[str, Any]:
    """``trail`` (oldest first), ``trail_dropped`` (entries left out between the first and the last ones)
    and ``rate_limited`` (the vendor's 429s for this run); ``polls`` is on the run already."""
    entries = []
    for raw in run.trail:
        at, kind, vendor_status, latency, detail = [*raw, None, None, None][:5]
        entries.append(
            {
                "at": domain.rfc3339(at + run.created_at),
                "kind": kind,
                "vendor_status": vendor_status,
                "latency_ms": latency,
                "detail": detail,
            }
        )
    return {"trail": entries, "trail_dropped": run.trail_dropped, "rate_limited": run.rate_limited}
