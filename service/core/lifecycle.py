"""How a run changes: each function takes the current run and returns a :class:`Transition`.

Pure functions of their inputs, so the API (cancel) and the worker (submit, poll, finish) build every
state change the same way and the store applies it in one atomic step.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import msgspec

from service.core import domain
from service.core.domain import (
    CANCELED,
    EVENT_PROGRESS,
    EVENT_SUBMITTED,
    FAILED,
    RUNNING,
    SUBMITTED,
    SUCCEEDED,
    TERMINAL_EVENT,
)
from service.core.records import Event, Run, Transition, public_run, replace, result_in_event

__all__ = ["Run", "RunLimits", "Transition", "public"]

# An event's body, compact (msgspec: about a microsecond where the standard library took thirteen
# for a body with the whole public run, written for every event; non-ASCII text as UTF-8, not escaped).
_BODY_ENCODER = msgspec.json.Encoder()


def _body_json(body: dict[str, Any]) -> str:
    return _BODY_ENCODER.encode(body).decode()


class RunLimits(Protocol):
    """What the lifecycle reads of the run policy (``settings.RunPolicy``; the whole ``Settings`` has the
    same fields, which the API's cancel passes): nothing else of the configuration reaches a transition."""

    @property
    def progress_min_interval_s(self) -> float: ...
    @property
    def retention_s(self) -> float: ...
    @property
    def max_inline_result_bytes(self) -> int: ...


def new_run(*, run_id: str, now_ms: int, **fields: Any) -> Run:
    """A run just accepted: queued, at version 0. ``fields`` are the record's own (client, vendor,
    operation, document, options, metadata, subscription_ids, zero_retention, traceparent), checked by it."""
    return Run(id=run_id, created_at=now_ms, updated_at=now_ms, status=domain.QUEUED, version=0, **fields)


# The run as the API and the events show it (records.public_run).
public = public_run


def _next(run: Run, now_ms: int, **changes: Any) -> Run:
    # Nested values (progress, error, state) are replaced, never edited, so sharing them is safe.
    return replace(run, version=run.version + 1, updated_at=now_ms, **changes)


def _event(
    run: Run,
    event_type: str,
    now_ms: int,
    *,
    result: Any = None,
    result_url: str | None = None,
    event_id: str | None = None,
) -> Event:
    """The event, with ``event_id`` when the run records it (``Run.event_ids``: every type but progress)."""
    data = {"run": public_run(run), "result": result, "result_url": result_url}
    body = {"type": event_type, "timestamp": domain.rfc3339(now_ms), "data": data}
    feed = None
    if run.zero_retention and result is not None:
        # The feed keeps the event for RETENTION_S: without the result, which only the callback carries.
        feed = _body_json({**body, "data": {**data, "result": None}})
    return Event(
        id=event_id or domain.new_id_beside("evt", run.id),
        type=event_type,
        created=now_ms,
        body=_body_json(body),
        vendor=run.vendor,
        feed=feed,
    )


def touched(run: Run, now_ms: int, *, due_ms: float, **internal: Any) -> Transition:
    """No visible change: only internal bookkeeping (transient fault count, adapter state)."""
    return Transition(_next(run, now_ms, **internal), run.version, due_ms=due_ms)


def submitted(
    run: Run,
    now_ms: int,
    *,
    vendor_run_id: str,
    vendor_status: str | None,
    state: dict[str, Any],
    due_ms: float,
    delay_s: float | None = None,
) -> Transition:
    new = _next(
        run,
        now_ms,
        status=SUBMITTED,
        vendor_run_id=vendor_run_id,
        vendor_status=vendor_status,
        transient=0,
        state={**run.state, **state},
        delay_s=delay_s,
        document=None,  # only the submit needed it
        event_ids=[*run.event_ids, event_id := domain.new_id_beside("evt", run.id)],
    )
    event = _event(new, EVENT_SUBMITTED, now_ms, event_id=event_id)
    return Transition(new, run.version, events=[event], due_ms=due_ms, delete_document=True)


def polled(
    run: Run,
    now_ms: int,
    *,
    running: bool,
    vendor_status: str | None,
    progress: dict[str, Any] | None,
    delay_s: float,
    due_ms: float,
    settings: RunLimits,
    also: dict[str, Any] | None = None,
) -> Transition:
    """A poll that found the vendor still working. Emits ``run.progress`` when progress moved, at most once
    every ``PROGRESS_MIN_INTERVAL_S``. ``also``: fields this change leaves alone, written with it (the
    trail's entry for the poll, ``trail.appended``), so that the run is copied once."""
    changes: dict[str, Any] = {
        **(also or {}),
        "vendor_status": vendor_status,
        "polls": run.polls + 1,
        "delay_s": delay_s,
        "transient": 0,
    }
    if running:
        changes["status"] = RUNNING
    emit = False
    if progress is not None and progress != run.progress:
        changes["progress"] = progress
        if now_ms - run.progress_event_at >= settings.progress_min_interval_s * 1000:
            changes["progress_event_at"] = now_ms
            emit = True
    new = _next(run, now_ms, **changes)
    events = [_event(new, EVENT_PROGRESS, now_ms)] if emit else []
    return Transition(new, run.version, events=events, due_ms=due_ms)


def finished(
    run: Run,
    now_ms: int,
    *,
    status: str,
    settings: RunLimits,
    vendor_status: str | None = None,
    result: Any = None,
    error: dict[str, Any] | None = None,
    count_poll: bool = True,
    vendor_cancel: bool = False,
    usage: dict[str, Any] | None = None,
    result_file: tuple[bytes, str] | None = None,
) -> Transition:
    """The run reached ``succeeded``, ``failed`` or ``canceled``: the last change it will ever see
    (apart from the vendor's acknowledgement, :func:`vendor_told`).

    The result goes inline in the event when it fits ``MAX_INLINE_RESULT_BYTES`` (always with zero
    retention), else the event carries ``result_url``. With zero retention nothing is stored. A
    ``result_file`` (bytes, media type: Nutrient split's zip) is what ``/v1/runs/{id}/result`` serves, so the
    event always carries ``result_url``, with ``result`` (the vendor's JSON that names the file) inline
    when it fits. With zero retention and a vendor run, the vendor's copy is deleted next
    (``vendor_delete_pending``; the worker does it after the event is emitted, so it never holds the
    callback).
    """
    vendor_delete = bool(run.zero_retention and run.vendor_run_id)
    changes: dict[str, Any] = {
        "status": status,
        "completed_at": now_ms,
        "error": error,
        "vendor_cancel_pending": vendor_cancel,
        # What only the polls read (the poll interval, the last run.progress): the record is kept for
        # RETENTION_S, and these are never read again.
        **_POLLS_ONLY,
    }
    if vendor_delete:
        changes.update(vendor_delete_pending=True, vendor_deleted=False)
    if usage is not None:
        changes["usage"] = usage
    if vendor_status is not None:
        changes["vendor_status"] = vendor_status
    if count_poll:
        changes["polls"] = run.polls + 1
    if status == SUCCEEDED and run.progress:
        changes["progress"] = {**run.progress, "percent": 100}
    result_bytes, inline, url = _result(run, status, result, result_file, settings, changes)
    event_id = domain.new_id_beside("evt", run.id)
    new = _next(run, now_ms, event_ids=[*run.event_ids, event_id], **changes)
    event = _event(new, TERMINAL_EVENT[status], now_ms, result=inline, result_url=url, event_id=event_id)
    kept = result_bytes if not run.zero_retention else None
    if (
        kept is not None
        and result_file is None
        and inline is not None
        and result_in_event(event.body) == kept
    ):
        # The event keeps it for as long (both expire RETENTION_S after the end): the result's own key
        # would be a second copy. GET /v1/runs/{id}/result reads it from there (store.runs.get_result).
        kept = None
    tell_vendor = vendor_cancel or vendor_delete
    return Transition(
        new,
        run.version,
        events=[event],
        due_ms=now_ms if tell_vendor else None,
        remove_due=not tell_vendor,
        result=kept,
        delete_document=True,
        ttl_ms=int(settings.retention_s * 1000),
    )


# A run's fields at their defaults (left out of the stored record) once its end leaves no poll to read them.
_POLLS_ONLY: dict[str, Any] = {"delay_s": None, "progress_event_at": 0}


def _result(
    run: Run,
    status: str,
    result: Any,
    result_file: tuple[bytes, str] | None,
    settings: RunLimits,
    changes: dict[str, Any],
) -> tuple[bytes | None, Any, str | None]:
    """What to keep, what goes inline in the event and the event's ``result_url`` (see :func:`finished`)."""
    if status != SUCCEEDED:
        return None, None, None
    url = f"/v1/runs/{run.id}/result"
    json_bytes = json.dumps(result, separators=(",", ":")).encode()
    fits = len(json_bytes) <= settings.max_inline_result_bytes
    if result_file is not None and not run.zero_retention:
        content, changes["result_type"] = result_file
        return content, (result if fits else None), url
    if run.zero_retention or fits:
        return json_bytes, result, None
    return json_bytes, None, url


def failed(
    run: Run,
    now_ms: int,
    *,
    code: str,
    message: str,
    settings: RunLimits,
    details: dict[str, Any] | None = None,
    **kw: Any,
) -> Transition:
    """``error`` is ``{code, message, vendor_status}``, plus ``details`` when the vendor gave any (for
    example Uptiq's ``documentQuality``)."""
    error: dict[str, Any] = {
        "code": code,
        "message": message,
        "vendor_status": kw.get("vendor_status", run.vendor_status),
    }
    if details:
        error["details"] = details
    return finished(run, now_ms, status=FAILED, settings=settings, error=error, **kw)


def canceled(run: Run, now_ms: int, *, settings: RunLimits, vendor_can_cancel: bool) -> Transition:
    """Canceled here. The vendor is told by the worker (``vendor_cancel_pending``) when it has the run and
    can."""
    tell_vendor = vendor_can_cancel and bool(run.vendor_run_id)
    return finished(
        run, now_ms, status=CANCELED, settings=settings, count_poll=False, vendor_cancel=tell_vendor
    )


def vendor_told(run: Run, *, deleted: bool | None = None, error: str | None = None) -> Transition:
    """The vendor was told (cancel, delete), or we gave up telling it: nothing is left to do for this run.

    ``deleted`` records whether the vendor's copy is gone (zero retention), ``error`` why not. The run keeps
    the rest of its retention: writing it again must not drop its expiry.
    """
    changes: dict[str, Any] = {"vendor_cancel_pending": False, "vendor_attempts": 0}
    if run.vendor_delete_pending:
        changes.update(vendor_delete_pending=False, vendor_deleted=bool(deleted))
        if not deleted:
            changes["vendor_delete_error"] = error
    # No ttl_ms: the run keeps the expiry its end set (the store rewrites records with KEEPTTL).
    return Transition(replace(run, version=run.version + 1, **changes), run.version, remove_due=True)


def vendor_retry(run: Run, *, due_ms: float, attempts: int) -> Transition:
    """Telling the vendor failed for now: again at ``due_ms``, after ``attempts`` (the worker bounds them)."""
    new = replace(run, version=run.version + 1, vendor_attempts=attempts)
    return Transition(new, run.version, due_ms=due_ms)
