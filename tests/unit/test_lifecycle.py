"""The lifecycle's transitions (service/core/lifecycle.py) called directly, as tables: (the run, the input) →
the change the store will apply. No Redis: a transition is a value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from service.config.settings import RunPolicy
from service.core import lifecycle
from service.core.domain import RunStatus
from service.core.records import Run, result_in_event

T0 = 1_700_000_000_000
NOW = T0 + 10_000
LIMITS = RunPolicy(
    progress_min_interval_s=5.0,
    retention_s=3600.0,
    max_inline_result_bytes=20,
    vendor_timeout_s=10.0,
    vendor_max_transient_failures=3,
)


def run(status: str = RunStatus.RUNNING, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "id": "run_01HZZZZZZZZZZZZZZZZZZZZZZZ",
        "client": "acme",
        "vendor": "nutrient",
        "operation": "extract",
        "created_at": T0,
        "updated_at": T0,
        "status": status,
        "version": 4,
        "vendor_run_id": None if status == RunStatus.QUEUED else "v-1",
    }
    return Run(**{**values, **fields})


def event_data(change: lifecycle.Transition) -> dict[str, Any]:
    (event,) = change.events
    data: dict[str, Any] = json.loads(event.body)["data"]
    return data


def test_a_new_run_is_queued_at_version_zero() -> None:
    new = lifecycle.new_run(run_id="run_1", now_ms=T0, client="acme", vendor="nutrient", operation="extract")
    assert (new.status, new.version, new.created_at, new.updated_at) == (RunStatus.QUEUED, 0, T0, T0)


def test_every_change_is_one_version_on_and_expects_the_one_before() -> None:
    before = run()
    for change in (
        lifecycle.touched(before, NOW, due_ms=NOW),
        lifecycle.polled(
            before,
            NOW,
            running=True,
            vendor_status="x",
            progress=None,
            delay_s=2,
            due_ms=NOW,
            settings=LIMITS,
        ),
        lifecycle.failed(before, NOW, code="vendor_failed", message="m", settings=LIMITS),
        lifecycle.vendor_retry(before, due_ms=NOW, attempts=1),
    ):
        assert (change.expect_v, change.run.version) == (4, 5)


# A poll that found the vendor working: (status before, running?, progress, last told) → status, events
@pytest.mark.parametrize(
    ("status", "running", "progress", "told_ms_ago", "after", "events"),
    [
        (RunStatus.SUBMITTED, False, None, 0, RunStatus.SUBMITTED, []),  # still queued at the vendor
        (RunStatus.SUBMITTED, True, None, 0, RunStatus.RUNNING, []),
        (RunStatus.RUNNING, True, {"percent": 50}, 10_000, RunStatus.RUNNING, ["run.progress"]),
        (RunStatus.RUNNING, True, {"percent": 50}, 1_000, RunStatus.RUNNING, []),  # told 1 s ago: not yet
        (RunStatus.RUNNING, True, {"percent": 10}, 10_000, RunStatus.RUNNING, []),  # progress did not move
    ],
)
def test_polled(
    status: str,
    running: bool,
    progress: dict[str, Any] | None,
    told_ms_ago: int,
    after: str,
    events: list[str],
) -> None:
    before = run(status, progress={"percent": 10}, progress_event_at=NOW - told_ms_ago, transient=2, polls=3)
    change = lifecycle.polled(
        before,
        NOW,
        running=running,
        vendor_status="busy",
        progress=progress,
        delay_s=4.0,
        due_ms=NOW + 4000,
        settings=LIMITS,
    )
    assert change.run.status == after
    assert [e.type for e in change.events] == events
    assert (change.run.polls, change.run.transient, change.run.delay_s) == (4, 0, 4.0)
    assert change.due_ms == NOW + 4000 and change.ttl_ms is None


def test_submitted_forgets_the_document_and_tells_the_client() -> None:
    before = run(RunStatus.QUEUED, document={"url": "https://x"}, transient=2, state={"a": 1})
    change = lifecycle.submitted(
        before,
        NOW,
        vendor_run_id="v-9",
        vendor_status="queued",
        state={"b": 2},
        due_ms=NOW + 2000,
        delay_s=2.0,
    )
    new = change.run
    assert (new.status, new.vendor_run_id, new.transient, new.document) == (
        RunStatus.SUBMITTED,
        "v-9",
        0,
        None,
    )
    assert new.state == {"a": 1, "b": 2}
    assert change.delete_document and change.due_ms == NOW + 2000
    assert [e.type for e in change.events] == ["run.submitted"]
    assert change.events[0].id in new.event_ids


# The result of a run that succeeded: (zero retention, result, file) → stored, inline, result_url --------
URL = "/v1/runs/run_01HZZZZZZZZZZZZZZZZZZZZZZZ/result"
SMALL, BIG = {"a": 1}, {"text": "x" * 50}
# A result whose JSON read back is another: its keys collide once written ({"1": "a", "1": "b"}).
COLLIDING = {1: "a", "1": "b"}


@pytest.mark.parametrize(
    ("zero_retention", "result", "file", "stored", "inline", "url"),
    [
        # Fits MAX_INLINE_RESULT_BYTES: inline, and kept only there (the result is read from the event).
        (False, SMALL, None, None, SMALL, None),
        # Inline, but the event's JSON would read back as another result: kept in its own key as well.
        (False, COLLIDING, None, b'{"1":"a","1":"b"}', {"1": "b"}, None),
        (False, BIG, None, json.dumps(BIG, separators=(",", ":")).encode(), None, URL),  # too big: a URL
        (True, BIG, None, None, BIG, None),  # zero retention: inline whatever its size, nothing stored
        (False, SMALL, (b"PK", "application/zip"), b"PK", SMALL, URL),  # a file: always its URL
        (False, BIG, (b"PK", "application/zip"), b"PK", None, URL),
    ],
)
def test_finished_succeeded(
    zero_retention: bool,
    result: Any,
    file: tuple[bytes, str] | None,
    stored: bytes | None,
    inline: Any,
    url: str | None,
) -> None:
    before = run(zero_retention=zero_retention, vendor_run_id=None)
    change = lifecycle.finished(
        before, NOW, status=RunStatus.SUCCEEDED, settings=LIMITS, result=result, result_file=file
    )
    assert change.result == stored
    assert event_data(change)["result"] == inline
    served = change.result if change.result is not None else result_in_event(change.events[0].body)
    if not zero_retention and file is None:  # what GET /v1/runs/{id}/result serves: the compact JSON
        assert served == json.dumps(result, separators=(",", ":")).encode()
    assert event_data(change)["result_url"] == url
    assert change.ttl_ms == 3600 * 1000 and change.delete_document
    if file is not None:
        assert change.run.result_type == "application/zip"


def test_success_completes_the_progress() -> None:
    change = lifecycle.finished(
        run(progress={"percent": 80}), NOW, status=RunStatus.SUCCEEDED, settings=LIMITS
    )
    assert change.run.progress == {"percent": 100}


# A run's end: (how, zero retention, vendor can cancel) → what is left to tell the vendor -------------------
@pytest.mark.parametrize(
    ("how", "zero_retention", "can_cancel", "cancel_pending", "delete_pending"),
    [
        ("failed", False, False, False, False),
        ("failed", True, False, False, True),  # zero retention: the vendor's copy is deleted next
        ("canceled", False, True, True, False),  # canceled here: the vendor is told
        ("canceled", False, False, False, False),  # a vendor that cannot cancel is not told
        ("canceled", True, True, True, True),
    ],
)
def test_what_is_left_to_tell_the_vendor(
    how: str, zero_retention: bool, can_cancel: bool, cancel_pending: bool, delete_pending: bool
) -> None:
    before = run(zero_retention=zero_retention)
    if how == "failed":
        change = lifecycle.failed(before, NOW, code="vendor_failed", message="m", settings=LIMITS)
    else:
        change = lifecycle.canceled(before, NOW, settings=LIMITS, vendor_can_cancel=can_cancel)
    new = change.run
    assert (new.vendor_cancel_pending, new.vendor_delete_pending) == (cancel_pending, delete_pending)
    tell = cancel_pending or delete_pending
    assert (change.due_ms, change.remove_due) == ((NOW, False) if tell else (None, True))
    assert new.completed_at == NOW


def test_failed_carries_the_error() -> None:
    change = lifecycle.failed(
        run(vendor_status="error"),
        NOW,
        code="vendor_failed",
        message="bad",
        settings=LIMITS,
        details={"q": 1},
    )
    assert change.run.error == {
        "code": "vendor_failed",
        "message": "bad",
        "vendor_status": "error",
        "details": {"q": 1},
    }
    assert [e.type for e in change.events] == ["run.failed"]


@pytest.mark.parametrize(
    ("deleted", "error", "vendor_deleted", "delete_error"),
    [(True, None, True, None), (None, "gave up", False, "gave up")],
)
def test_vendor_told(
    deleted: bool | None, error: str | None, vendor_deleted: bool, delete_error: str | None
) -> None:
    before = run(
        RunStatus.CANCELED, vendor_cancel_pending=True, vendor_delete_pending=True, vendor_attempts=2
    )
    change = lifecycle.vendor_told(before, deleted=deleted, error=error)
    new = change.run
    assert (new.vendor_cancel_pending, new.vendor_delete_pending, new.vendor_attempts) == (False, False, 0)
    assert (new.vendor_deleted, new.vendor_delete_error) == (vendor_deleted, delete_error)
    # The run keeps the expiry its end set: no new ttl.
    assert change.remove_due and change.ttl_ms is None and change.events == []


# What a run keeps once no poll reads it: its end drops the poll interval and the last progress event's time
# (the record is kept for RETENTION_S); what telling the vendor needs stays -------------------------------
@pytest.mark.parametrize("tell_vendor", [False, True])
def test_the_end_drops_what_only_the_polls_read(tell_vendor: bool) -> None:
    before = run(delay_s=30.0, progress_event_at=NOW - 9000, state={"row": "r-1"}, transient=2)
    change = lifecycle.canceled(before, NOW, settings=LIMITS, vendor_can_cancel=tell_vendor)
    new = change.run
    assert (new.delay_s, new.progress_event_at) == (None, 0)
    assert "delay_s" not in new.to_json() and "progress_event_at" not in new.to_json()
    assert (new.vendor_cancel_pending, new.state, new.transient) == (tell_vendor, {"row": "r-1"}, 2)
