"""How a run changes: each function takes the current run and returns a :class:`Transition`.

Pure functions of their inputs, so the API (cancel) and the worker (submit, poll, finish) build every
state change the same way and the store applies it in one atomic step.
"""

from __future__ import annotations

import json
from typing import Any

from service import domain
from service.domain import (
    CANCELED,
    EVENT_PROGRESS,
    EVENT_SUBMITTED,
    FAILED,
    RUNNING,
    SUBMITTED,
    SUCCEEDED,
    TERMINAL_EVENT,
)
from service.settings import Settings
from service.store import Transition

Run = dict[str, Any]

PUBLIC_FIELDS = (
    "id",
    "status",
    "vendor",
    "operation",
    "vendor_run_id",
    "vendor_status",
    "progress",
    "metadata",
    "zero_retention",
    "created_at",
    "updated_at",
    "completed_at",
    "polls",
    "error",
    "usage",
    "vendor_deleted",
    "vendor_delete_error",
)


def new_run(
    *,
    run_id: str,
    client: str,
    vendor: str,
    operation: str,
    document: dict[str, Any],
    options: dict[str, Any],
    metadata: dict[str, str],
    subscription_ids: list[str],
    zero_retention: bool,
    now_ms: int,
) -> Run:
    return {
        "_v": 0,
        "id": run_id,
        "client": client,
        "status": domain.QUEUED,
        "vendor": vendor,
        "operation": operation,
        "vendor_run_id": None,
        "vendor_status": None,
        "progress": None,
        "metadata": metadata,
        "zero_retention": zero_retention,
        "created_at": now_ms,
        "updated_at": now_ms,
        "completed_at": None,
        "polls": 0,
        "error": None,
        "document": document,
        "options": options,
        "subscription_ids": subscription_ids,
        "_state": {},  # the vendor adapter's own (e.g. Cloudsquid's row id)
        "_delay": None,  # the current poll interval, seconds
        "_transient": 0,  # transient vendor faults in a row
        "_progress_event_at": 0,
        "_vendor_cancel": False,  # canceled here; the vendor still has to be told
        # Set only when they apply, to keep the run small in Redis (``public`` reads absent ones as null):
        # usage (what the vendor reports the run cost), vendor_deleted and vendor_delete_error (zero
        # retention: whether the vendor's copy is gone, and why not), _vendor_delete (it is still to go).
    }


def public(run: Run) -> dict[str, Any]:
    """The run as the API and the events show it."""
    view = {name: run.get(name) for name in PUBLIC_FIELDS}
    for name in ("created_at", "updated_at", "completed_at"):
        view[name] = domain.rfc3339(view[name])
    return view


def _next(run: Run, now_ms: int) -> Run:
    # A shallow copy is enough: nested values (progress, error, _state) are replaced, never edited.
    new = dict(run)
    new["_v"] = run["_v"] + 1
    new["updated_at"] = now_ms
    return new


def _event(
    run: Run, event_type: str, now_ms: int, *, result: Any = None, result_url: str | None = None
) -> dict[str, Any]:
    data = {"run": public(run), "result": result, "result_url": result_url}
    body = {"type": event_type, "timestamp": domain.rfc3339(now_ms), "data": data}
    event = {
        "id": domain.new_id("evt"),
        "type": event_type,
        "created": now_ms,
        "vendor": run["vendor"],  # the feed's filter
        "body": json.dumps(body, separators=(",", ":")),
    }
    if run.get("zero_retention") and result is not None:
        # The feed keeps the event for RETENTION_S: without the result, which only the callback carries.
        event["feed"] = json.dumps({**body, "data": {**data, "result": None}}, separators=(",", ":"))
    return event


def touched(run: Run, now_ms: int, *, due_ms: float, **internal: Any) -> Transition:
    """No visible change: only internal bookkeeping (transient fault count, adapter state)."""
    new = _next(run, now_ms)
    new.update(internal)
    return Transition(new, run["_v"], due_ms=due_ms)


def submitted(
    run: Run,
    now_ms: int,
    *,
    vendor_run_id: str,
    vendor_status: str | None,
    state: dict[str, Any],
    due_ms: float,
) -> Transition:
    new = _next(run, now_ms)
    new.update(status=SUBMITTED, vendor_run_id=vendor_run_id, vendor_status=vendor_status, _transient=0)
    new["_state"] = {**run.get("_state", {}), **state}
    new.pop("document", None)  # only the submit needed it
    return Transition(
        new, run["_v"], events=[_event(new, EVENT_SUBMITTED, now_ms)], due_ms=due_ms, delete_document=True
    )


def polled(
    run: Run,
    now_ms: int,
    *,
    running: bool,
    vendor_status: str | None,
    progress: dict[str, Any] | None,
    delay_s: float,
    due_ms: float,
    settings: Settings,
) -> Transition:
    """A poll that found the vendor still working. Emits ``run.progress`` when progress moved, at most once
    every ``PROGRESS_MIN_INTERVAL_S``."""
    new = _next(run, now_ms)
    new.update(vendor_status=vendor_status, polls=run["polls"] + 1, _delay=delay_s, _transient=0)
    if running:
        new["status"] = RUNNING
    events = []
    if progress is not None and progress != run.get("progress"):
        new["progress"] = progress
        if now_ms - run.get("_progress_event_at", 0) >= settings.progress_min_interval_s * 1000:
            new["_progress_event_at"] = now_ms
            events.append(_event(new, EVENT_PROGRESS, now_ms))
    return Transition(new, run["_v"], events=events, due_ms=due_ms)


def finished(
    run: Run,
    now_ms: int,
    *,
    status: str,
    settings: Settings,
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
    (``_vendor_delete``; the worker does it after the event is emitted, so it never holds the callback).
    """
    new = _next(run, now_ms)
    vendor_delete = bool(run.get("zero_retention") and run.get("vendor_run_id"))
    new.update(status=status, completed_at=now_ms, error=error, _vendor_cancel=vendor_cancel)
    if vendor_delete:
        new.update(_vendor_delete=True, vendor_deleted=False)
    if usage is not None:
        new["usage"] = usage
    if vendor_status is not None:
        new["vendor_status"] = vendor_status
    if count_poll:
        new["polls"] = run["polls"] + 1
    if status == SUCCEEDED and run.get("progress"):
        new["progress"] = {**run["progress"], "percent": 100}
    result_bytes = None
    inline, url = None, None
    if status == SUCCEEDED:
        json_bytes = json.dumps(result, separators=(",", ":")).encode()
        fits = len(json_bytes) <= settings.max_inline_result_bytes
        if result_file is not None and not run.get("zero_retention"):
            result_bytes, new["_result_type"] = result_file
            inline, url = (result if fits else None), f"/v1/runs/{run['id']}/result"
        else:
            result_bytes = json_bytes
            if run.get("zero_retention") or fits:
                inline = result
            else:
                url = f"/v1/runs/{run['id']}/result"
    event = _event(new, TERMINAL_EVENT[status], now_ms, result=inline, result_url=url)
    keep_result = result_bytes if not run.get("zero_retention") else None
    tell_vendor = vendor_cancel or vendor_delete
    return Transition(
        new,
        run["_v"],
        events=[event],
        due_ms=now_ms if tell_vendor else None,
        remove_due=not tell_vendor,
        result=keep_result,
        delete_document=True,
        ttl_ms=int(settings.retention_s * 1000),
    )


def failed(
    run: Run,
    now_ms: int,
    *,
    code: str,
    message: str,
    settings: Settings,
    details: dict[str, Any] | None = None,
    **kw: Any,
) -> Transition:
    """``error`` is ``{code, message, vendor_status}``, plus ``details`` when the vendor gave any (for
    example Uptiq's ``documentQuality``)."""
    error: dict[str, Any] = {
        "code": code,
        "message": message,
        "vendor_status": kw.get("vendor_status", run.get("vendor_status")),
    }
    if details:
        error["details"] = details
    return finished(run, now_ms, status=FAILED, settings=settings, error=error, **kw)


def canceled(run: Run, now_ms: int, *, settings: Settings, vendor_can_cancel: bool) -> Transition:
    """Canceled here. The vendor is told by the worker (``_vendor_cancel``) when it has the run and can."""
    tell_vendor = vendor_can_cancel and bool(run.get("vendor_run_id"))
    return finished(
        run, now_ms, status=CANCELED, settings=settings, count_poll=False, vendor_cancel=tell_vendor
    )


def vendor_told(run: Run, *, deleted: bool | None = None, error: str | None = None) -> Transition:
    """The vendor was told (cancel, delete), or we gave up telling it: nothing is left to do for this run.

    ``deleted`` records whether the vendor's copy is gone (zero retention), ``error`` why not. The run keeps
    the rest of its retention: writing it again must not drop its expiry.
    """
    new = dict(run)
    new["_v"] = run["_v"] + 1
    new["_vendor_cancel"] = False
    new.pop("_vendor_attempts", None)
    if new.pop("_vendor_delete", False):
        new["vendor_deleted"] = bool(deleted)
        if not deleted:
            new["vendor_delete_error"] = error
    # No ttl_ms: the run keeps the expiry its end set (the store rewrites records with KEEPTTL).
    return Transition(new, run["_v"], remove_due=True)


def vendor_retry(run: Run, *, due_ms: float, attempts: int) -> Transition:
    """Telling the vendor failed for now: again at ``due_ms``, after ``attempts`` (the worker bounds them)."""
    new = dict(run)
    new["_v"] = run["_v"] + 1
    new["_vendor_attempts"] = attempts
    return Transition(new, run["_v"], due_ms=due_ms)
