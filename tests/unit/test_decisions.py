"""The core's decisions (service/core/runs.py, service/core/deliveries.py) and the one exception → fault
map (service/worker/decide.py) as tables: (run, what the vendor or the receiver answered) → the change
that follows. No Redis, no clock, no random: the time and the jitter are arguments."""

from __future__ import annotations

from typing import Any

import pytest

from service.config.settings import RunPolicy, VendorSettings
from service.core import deliveries, domain, runs, trail
from service.core.domain import AttemptOutcome, FaultKind, RunStatus
from service.core.records import Delivery, Run, Subscription, result_in_event
from service.core.runs import Fault
from service.vendors import base
from service.vendors.base import (
    FileResult,
    PollResult,
    Progress,
    Submitted,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorResultTooLarge,
    VendorSubmitUncertain,
    VendorTransient,
)
from service.worker import decide

T0 = 1_700_000_000_000
NOW = T0 + 60_000


class Pinned:
    def __init__(self, share: float) -> None:
        self.share = share

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.share


LOW = Pinned(0.0)
POLICY = VendorSettings(
    name="nutrient",
    base_url="http://vendor.test",
    api_key="k",
    poll_initial_s=2.0,
    poll_max_s=30.0,
    poll_multiplier=2.0,
    max_run_s=1800.0,
    max_rps=0.0,
    pause_max_s=60.0,
)
LIMITS = RunPolicy(
    progress_min_interval_s=5.0,
    retention_s=3600.0,
    max_inline_result_bytes=1000,
    vendor_timeout_s=10.0,
    vendor_max_transient_failures=3,
)
MAX_TRANSIENT = LIMITS.vendor_max_transient_failures


def run(status: str = RunStatus.RUNNING, **fields: Any) -> Run:
    base_fields: dict[str, Any] = {
        "id": "run_01HZZZZZZZZZZZZZZZZZZZZZZZ",
        "client": "acme",
        "vendor": "nutrient",
        "operation": "extract",
        "created_at": T0,
        "updated_at": T0,
        "status": status,
        "version": 3,
        "vendor_run_id": None if status == RunStatus.QUEUED else "v-1",
    }
    return Run(**{**base_fields, **fields})


def error_code(change: Any) -> str | None:
    return (change.run.error or {}).get("code")


# After a poll: (the vendor's status) → (the run's status, error code, next poll in s, events) ----------
@pytest.mark.parametrize(
    ("answer", "status", "code", "due_s", "events"),
    [
        (PollResult(base.QUEUED, "queued"), RunStatus.SUBMITTED, None, 4.0, []),
        (PollResult(base.RUNNING, "processing"), RunStatus.RUNNING, None, 4.0, []),
        (
            PollResult(base.SUCCEEDED, "done", result={"a": 1}),
            RunStatus.SUCCEEDED,
            None,
            None,
            ["run.succeeded"],
        ),
        (
            PollResult(base.FAILED, "error", error="bad scan"),
            RunStatus.FAILED,
            "vendor_failed",
            None,
            ["run.failed"],
        ),
        # Canceled at the vendor by someone else: for our client the run failed there.
        (PollResult(base.CANCELED, "canceled"), RunStatus.FAILED, "vendor_failed", None, ["run.failed"]),
    ],
)
def test_after_poll(
    answer: PollResult, status: str, code: str | None, due_s: float | None, events: list[str]
) -> None:
    before = run(RunStatus.SUBMITTED, delay_s=2.0)
    change = runs.after_poll(before, answer, POLICY, LIMITS, now_ms=NOW, jitter=LOW)
    assert change.run.status == status
    assert error_code(change) == code
    assert [e.type for e in change.events] == events
    assert change.expect_v == before.version and change.run.version == before.version + 1
    if due_s is None:
        assert change.ttl_ms == LIMITS.retention_s * 1000  # a run's end keeps it for the retention
    else:
        assert change.due_ms == NOW + due_s * 1000  # 2 s grown by the multiplier, LOW jitter
        assert change.run.delay_s == due_s
        assert change.run.polls == before.polls + 1


def test_a_poll_resets_the_transient_count_and_traces_the_answer() -> None:
    change = runs.after_poll(
        run(transient=2), PollResult(base.RUNNING, "busy"), POLICY, LIMITS, now_ms=NOW, jitter=LOW
    )
    assert change.run.transient == 0
    assert trail.kind_of(change.run.trail[-1]) == "poll" and change.run.trail[-1][2] == "busy"


def test_a_vendor_failure_keeps_its_message_and_details() -> None:
    answer = PollResult(base.FAILED, "error", error="unreadable", error_details={"quality": 0.1})
    change = runs.after_poll(run(), answer, POLICY, LIMITS, now_ms=NOW, jitter=LOW)
    assert change.run.error == {
        "code": "vendor_failed",
        "message": "unreadable",
        "vendor_status": "error",
        "details": {"quality": 0.1},
    }


def test_progress_is_told_at_most_once_per_interval() -> None:
    moved = PollResult(base.RUNNING, "busy", progress=Progress(percent=40))
    fresh = runs.after_poll(run(progress_event_at=NOW - 1000), moved, POLICY, LIMITS, now_ms=NOW, jitter=LOW)
    assert fresh.run.progress == {"percent": 40, "phase": None, "message": None}
    assert fresh.events == []  # told 1 s ago; PROGRESS_MIN_INTERVAL_S is 5
    due = runs.after_poll(run(progress_event_at=NOW - 6000), moved, POLICY, LIMITS, now_ms=NOW, jitter=LOW)
    assert [e.type for e in due.events] == ["run.progress"]
    assert trail.kind_of(due.run.trail[-1]) == "progress"


def test_a_fetched_result_is_the_one_kept() -> None:
    answer = PollResult(base.SUCCEEDED, "done", needs_fetch=True)
    change = runs.after_poll(run(), answer, POLICY, LIMITS, now_ms=NOW, jitter=LOW, payload={"fetched": True})
    # Inline in the run.succeeded, which keeps it (GET /v1/runs/{id}/result reads it there).
    assert change.result is None
    assert result_in_event(change.events[0].body) == b'{"fetched":true}'


@pytest.mark.parametrize(("zero_retention", "kept"), [(False, b"PK"), (True, None)])
def test_a_file_result_is_kept_as_the_adapter_shaped_it(zero_retention: bool, kept: bytes | None) -> None:
    # The adapter names our copy (Nutrient's _shaped, tests/unit/test_vendor_rules.py); the core keeps the
    # file unless the run keeps nothing.
    shaped = {"output": {"downloadUrl": "/v1/runs/run_01HZZZZZZZZZZZZZZZZZZZZZZZ/result"}}
    file = FileResult(b"PK", "application/zip", shaped)
    data, stored = runs.file_result(run(zero_retention=zero_retention), file)
    assert data == shaped
    assert (stored[0] if stored else None) == kept


# The vendor's own Retry-After on a 202 or a 200: the next poll, within [POLL_INITIAL_S, PAUSE_MAX_S] ----
@pytest.mark.parametrize(
    ("retry_after_s", "due_s"),
    [
        (None, 4.0),  # the schedule's: 2 s grown by the multiplier
        (7.0, 7.0),
        (0.5, 2.0),  # never sooner than the documented minimum
        (45.0, 45.0),  # past POLL_MAX_S (30): the vendor said so
        (600.0, 60.0),  # no later than PAUSE_MAX_S
    ],
)
def test_a_poll_honours_the_vendors_retry_after(retry_after_s: float | None, due_s: float) -> None:
    answer = PollResult(base.RUNNING, "running", retry_after_s=retry_after_s)
    change = runs.after_poll(run(delay_s=2.0), answer, POLICY, LIMITS, now_ms=NOW, jitter=LOW)
    assert change.due_ms == NOW + due_s * 1000
    assert change.run.delay_s == 4.0  # the schedule grows on: a Retry-After is one answer's


@pytest.mark.parametrize(("retry_after_s", "due_s"), [(None, 2.0), (5.0, 5.0), (0.0, 2.0), (90.0, 60.0)])
def test_a_submit_honours_the_vendors_retry_after(retry_after_s: float | None, due_s: float) -> None:
    accepted = Submitted("v-9", "queued", retry_after_s=retry_after_s)
    change = runs.after_submit(run(RunStatus.QUEUED), accepted, {}, POLICY, now_ms=NOW, jitter=LOW)
    assert change.due_ms == NOW + due_s * 1000


@pytest.mark.parametrize(
    "answer",
    [
        PollResult(base.RUNNING, "running", state={"page": "p2"}),
        PollResult(base.SUCCEEDED, "done", result={}, state={"page": "p2"}),
        PollResult(base.FAILED, "failed", error="x", state={"page": "p2"}),
    ],
)
def test_a_poll_merges_its_state_into_the_runs(answer: PollResult) -> None:
    before = run(state={"op": "o1", "page": "p1"})
    change = runs.after_poll(before, answer, POLICY, LIMITS, now_ms=NOW, jitter=LOW)
    assert change.run.state == {"op": "o1", "page": "p2"}
    assert change.expect_v == before.version


# After a fault: (kind, transient faults so far) → (status, error code, due in s, transient) ------------
@pytest.mark.parametrize(
    ("fault", "transient", "status", "code", "due_s", "count"),
    [
        # 429: waits the vendor's Retry-After, not counted as a fault; within [POLL_INITIAL_S, PAUSE_MAX_S].
        (Fault(FaultKind.RATE_LIMITED, "429", retry_after=7.0), 2, RunStatus.RUNNING, None, 7.0, 2),
        (Fault(FaultKind.RATE_LIMITED, "429"), 0, RunStatus.RUNNING, None, 2.0, 0),
        (Fault(FaultKind.RATE_LIMITED, "429", retry_after=0.1), 0, RunStatus.RUNNING, None, 2.0, 0),
        (Fault(FaultKind.RATE_LIMITED, "429", retry_after=3600.0), 0, RunStatus.RUNNING, None, 60.0, 0),
        # Transient: backoff doubled per fault in a row, the 3rd (VENDOR_MAX_TRANSIENT_FAILURES) ends it.
        (Fault(FaultKind.TRANSIENT, "HTTP 502"), 0, RunStatus.RUNNING, None, 2.0, 1),
        (Fault(FaultKind.TRANSIENT, "HTTP 502"), 1, RunStatus.RUNNING, None, 4.0, 2),
        (Fault(FaultKind.TRANSIENT, "HTTP 503", retry_after=20.0), 1, RunStatus.RUNNING, None, 20.0, 2),
        (Fault(FaultKind.TRANSIENT, "HTTP 502"), 2, RunStatus.FAILED, "vendor_unreachable", None, 2),
        # For good: the kind's error code.
        (Fault(FaultKind.REJECTED, "HTTP 401"), 0, RunStatus.FAILED, "vendor_rejected", None, 0),
        (Fault(FaultKind.EXPIRED, "HTTP 404"), 0, RunStatus.FAILED, "vendor_expired", None, 0),
        (Fault(FaultKind.TOO_LARGE, "2 GB"), 0, RunStatus.FAILED, "result_too_large", None, 0),
        (Fault(FaultKind.AMBIGUOUS, "timed out"), 0, RunStatus.FAILED, "vendor_submit_ambiguous", None, 0),
    ],
)
def test_after_fault(
    fault: Fault, transient: int, status: str, code: str | None, due_s: float | None, count: int
) -> None:
    before = run(transient=transient)
    change = runs.after_fault(before, fault, POLICY, LIMITS, MAX_TRANSIENT, now_ms=NOW, jitter=LOW)
    assert change.run.status == status
    assert error_code(change) == code
    assert change.run.transient == count
    if due_s is not None:
        assert change.due_ms == pytest.approx(NOW + due_s * 1000)
        assert change.events == []
    else:
        assert [e.type for e in change.events] == ["run.failed"]


def test_unreachable_says_how_many_faults_and_the_last() -> None:
    change = runs.after_fault(
        run(transient=2),
        Fault(FaultKind.TRANSIENT, "HTTP 502"),
        POLICY,
        LIMITS,
        MAX_TRANSIENT,
        now_ms=NOW,
        jitter=LOW,
    )
    assert change.run.error["message"] == "3 transient faults in a row; the last: HTTP 502"


def test_an_ambiguous_submit_keeps_the_vendor_answer() -> None:
    fault = Fault(FaultKind.AMBIGUOUS, "no job id", answer='{"ok":true}')
    change = runs.after_fault(
        run(RunStatus.QUEUED), fault, POLICY, LIMITS, MAX_TRANSIENT, now_ms=NOW, jitter=LOW
    )
    assert change.run.error["details"] == {"vendor_answer": '{"ok":true}'}
    assert "takes no idempotency key" in change.run.error["message"]
    assert change.run.trail[-1][-1] == 'no job id; vendor answered: {"ok":true}'


# The one exception → fault map: (exception, submitting, idempotent vendor) → kind ---------------------
@pytest.mark.parametrize(
    ("exc", "submitting", "idempotent", "kind"),
    [
        (VendorRateLimited("429", status_code=429, retry_after=3.0), False, True, FaultKind.RATE_LIMITED),
        (VendorRateLimited("429", status_code=429), True, False, FaultKind.RATE_LIMITED),  # nothing created
        (VendorTransient("HTTP 502", status_code=502), False, True, FaultKind.TRANSIENT),
        (VendorTransient("HTTP 502", status_code=502), True, False, FaultKind.TRANSIENT),  # refused: retried
        (VendorTransient("connect refused"), True, False, FaultKind.TRANSIENT),  # never sent
        (VendorSubmitUncertain("read timeout"), True, False, FaultKind.AMBIGUOUS),
        (VendorSubmitUncertain("read timeout"), True, True, FaultKind.TRANSIENT),  # idempotency key
        (VendorSubmitUncertain("read timeout"), False, False, FaultKind.TRANSIENT),  # not a submit
        (TimeoutError(), True, False, FaultKind.AMBIGUOUS),  # the step's deadline cut a sent request
        (TimeoutError(), False, False, FaultKind.TRANSIENT),
        (VendorRejected("HTTP 401", status_code=401), False, True, FaultKind.REJECTED),
        (VendorRejected("HTTP 403", status_code=403), False, True, FaultKind.REJECTED),
        (VendorExpired("HTTP 404", status_code=404), False, True, FaultKind.EXPIRED),
        (VendorResultTooLarge("too big"), False, True, FaultKind.TOO_LARGE),
        (KeyError("status"), False, True, FaultKind.TRANSIENT),  # a missing status field
        (ValueError("not JSON"), False, True, FaultKind.TRANSIENT),
    ],
)
def test_fault_of(exc: BaseException, submitting: bool, idempotent: bool, kind: FaultKind) -> None:
    assert decide.fault_of(exc, submitting=submitting, idempotent=idempotent).kind is kind


def test_a_fault_says_what_happened_and_keeps_retry_after() -> None:
    assert decide.fault_of(VendorTransient("HTTP 503", status_code=503, retry_after=9.0)).retry_after == 9.0
    assert decide.fault_of(KeyError("status")).message == "KeyError: 'status'"
    assert decide.fault_of(TimeoutError()).message == "TimeoutError"


# The rest of a run's decisions ----------------------------------------------------------------------------
@pytest.mark.parametrize(("age_s", "overdue"), [(1799.0, False), (1800.0, False), (1800.001, True)])
def test_is_overdue(age_s: float, overdue: bool) -> None:
    assert runs.is_overdue(run(), POLICY, T0 + int(age_s * 1000)) is overdue


def test_timed_out_tells_what_the_vendor_last_said() -> None:
    before = run(progress={"percent": 40, "phase": None, "message": "OCR"}, polls=7)
    change = runs.timed_out(before, POLICY, LIMITS, now_ms=NOW)
    assert change.run.error["code"] == domain.TIMED_OUT
    assert change.run.error["message"] == (
        "no result after 1800s (HOOKBRIDGE_NUTRIENT_MAX_RUN_S); the vendor last said: OCR"
    )
    assert change.run.error["details"] == {"last_progress": before.progress}
    assert change.run.polls == 7  # not a poll


def test_after_submit_plans_the_first_poll() -> None:
    before = run(RunStatus.QUEUED, document={"url": "https://x"})
    accepted = Submitted("v-9", "queued", {"row": 1})
    change = runs.after_submit(before, accepted, {"a": 1}, POLICY, now_ms=NOW, jitter=LOW)
    assert change.run.status == RunStatus.SUBMITTED and change.run.vendor_run_id == "v-9"
    assert change.run.state == {"a": 1, "row": 1}
    assert change.due_ms == NOW + 2000 and change.delete_document
    assert [e.type for e in change.events] == ["run.submitted"]


def test_a_missing_document_fails_the_run() -> None:
    change = runs.document_gone(run(RunStatus.QUEUED), LIMITS, now_ms=NOW)
    assert error_code(change) == domain.VENDOR_REJECTED


# Which call a claimed run's step makes: (status, age) → action ------------------------------------------
@pytest.mark.parametrize(
    ("status", "age_s", "action"),
    [
        (RunStatus.QUEUED, 1.0, runs.Action.SUBMIT),
        (RunStatus.SUBMITTED, 1.0, runs.Action.POLL),
        (RunStatus.RUNNING, 1.0, runs.Action.POLL),
        (RunStatus.QUEUED, 1800.001, runs.Action.TIME_OUT),  # past MAX_RUN_S before its submit: not sent
        (RunStatus.RUNNING, 1800.001, runs.Action.TIME_OUT),
        (RunStatus.RUNNING, 1800.0, runs.Action.POLL),
        # An ended run is claimed only to tell the vendor (cancel, delete), however old it is.
        (RunStatus.CANCELED, 1.0, runs.Action.TELL),
        (RunStatus.SUCCEEDED, 9999.0, runs.Action.TELL),
        (RunStatus.FAILED, 1.0, runs.Action.TELL),
    ],
)
def test_next_action(status: RunStatus, age_s: float, action: runs.Action) -> None:
    assert runs.next_action(run(status), POLICY, T0 + int(age_s * 1000)) is action


# What the call brought → the decision that follows it (decide picks the one function) -------------------
@pytest.mark.parametrize(
    ("status", "called", "new_status", "code", "events"),
    [
        (
            RunStatus.QUEUED,
            runs.Accepted(Submitted("v-9", "queued")),
            RunStatus.SUBMITTED,
            None,
            ["run.submitted"],
        ),
        (RunStatus.QUEUED, runs.DocumentGone(), RunStatus.FAILED, domain.VENDOR_REJECTED, ["run.failed"]),
        (RunStatus.RUNNING, runs.Polled(PollResult(base.RUNNING, "busy")), RunStatus.RUNNING, None, []),
        (
            RunStatus.RUNNING,
            runs.Polled(PollResult(base.SUCCEEDED, "done", needs_fetch=True), payload={"p": 1}),
            RunStatus.SUCCEEDED,
            None,
            ["run.succeeded"],
        ),
        (RunStatus.RUNNING, runs.Overdue(), RunStatus.FAILED, domain.TIMED_OUT, ["run.failed"]),
        (RunStatus.RUNNING, Fault(FaultKind.TRANSIENT, "HTTP 502"), RunStatus.RUNNING, None, []),
        (
            RunStatus.RUNNING,
            Fault(FaultKind.EXPIRED, "HTTP 404"),
            RunStatus.FAILED,
            "vendor_expired",
            ["run.failed"],
        ),
        (
            RunStatus.QUEUED,
            Fault(FaultKind.AMBIGUOUS, "read timeout"),
            RunStatus.FAILED,
            domain.VENDOR_SUBMIT_AMBIGUOUS,
            ["run.failed"],
        ),
        (RunStatus.CANCELED, runs.Told(deleted=True), RunStatus.CANCELED, None, []),
        (
            RunStatus.CANCELED,
            runs.Told(fault=Fault(FaultKind.TRANSIENT, "HTTP 502")),
            RunStatus.CANCELED,
            None,
            [],
        ),
    ],
)
def test_decide(
    status: RunStatus, called: runs.Called, new_status: RunStatus, code: str | None, events: list[str]
) -> None:
    before = run(status, vendor_cancel_pending=status == RunStatus.CANCELED)
    change = runs.decide(before, called, POLICY, LIMITS, now_ms=NOW, jitter=LOW)
    assert change.run.status == new_status
    assert error_code(change) == code
    assert [e.type for e in change.events] == events


@pytest.mark.parametrize(
    ("called", "expected"),
    [
        (
            runs.Polled(
                PollResult(base.SUCCEEDED, "done", needs_fetch=True), payload={"p": 1}, latency_ms=5.0
            ),
            lambda before: runs.after_poll(
                before,
                PollResult(base.SUCCEEDED, "done", needs_fetch=True),
                POLICY,
                LIMITS,
                now_ms=NOW,
                jitter=LOW,
                payload={"p": 1},
                latency_ms=5.0,
            ),
        ),
        (
            Fault(FaultKind.TRANSIENT, "HTTP 502"),
            lambda before: runs.after_fault(
                before,
                Fault(FaultKind.TRANSIENT, "HTTP 502"),
                POLICY,
                LIMITS,
                MAX_TRANSIENT,
                now_ms=NOW,
                jitter=LOW,
            ),
        ),
        (
            runs.Told(fault=Fault(FaultKind.TRANSIENT, "HTTP 502")),
            lambda before: runs.after_telling(
                before,
                POLICY,
                MAX_TRANSIENT,
                now_ms=NOW,
                jitter=LOW,
                fault=Fault(FaultKind.TRANSIENT, "HTTP 502"),
            ),
        ),
    ],
)
def test_decide_passes_the_whole_answer_on(called: runs.Called, expected: Any) -> None:
    """decide adds nothing of its own: its change is the one the answer's own decision makes, the run
    policy's VENDOR_MAX_TRANSIENT_FAILURES, the fetched payload and the latency included."""
    before = run(RunStatus.RUNNING, transient=1)
    got, want = runs.decide(before, called, POLICY, LIMITS, now_ms=NOW, jitter=LOW), expected(before)
    # Each call mints its events' ids: the two changes are compared with the ids paired up.
    shown = repr(got)
    for mine, theirs in zip([e.id for e in got.events], [e.id for e in want.events], strict=True):
        shown = shown.replace(mine, theirs)
    assert shown == repr(want)


# Telling the vendor: (attempts so far, what happened) → again, or done ------------------------------------
@pytest.mark.parametrize(
    ("attempts", "fault", "again_s", "error"),
    [
        (0, None, None, None),  # told
        (0, Fault(FaultKind.TRANSIENT, "HTTP 502"), 2.0, None),
        (1, Fault(FaultKind.TRANSIENT, "HTTP 502"), 4.0, None),
        (1, Fault(FaultKind.EXPIRED, "HTTP 404"), 4.0, None),  # only a refusal ends it early
        (2, Fault(FaultKind.TRANSIENT, "HTTP 502"), None, "gave up after 3 attempts: HTTP 502"),
        (0, Fault(FaultKind.REJECTED, "HTTP 403"), None, "gave up after 1 attempt: HTTP 403"),
    ],
)
def test_after_telling(attempts: int, fault: Fault | None, again_s: float | None, error: str | None) -> None:
    before = run(
        RunStatus.CANCELED, vendor_cancel_pending=True, vendor_delete_pending=True, vendor_attempts=attempts
    )
    change = runs.after_telling(
        before, POLICY, MAX_TRANSIENT, now_ms=NOW, jitter=LOW, deleted=fault is None, fault=fault
    )
    if again_s is not None:
        assert change.due_ms == pytest.approx(NOW + again_s * 1000)
        assert change.run.vendor_attempts == attempts + 1
    else:
        assert change.remove_due and not change.run.vendor_cancel_pending
        assert change.run.vendor_deleted is (fault is None)
        assert change.run.vendor_delete_error == error


# After a callback attempt: (status code, Retry-After, failures in series) → outcome, due again in s -------
SCHEDULE = (1.0, 10.0, 60.0)


@pytest.mark.parametrize(
    ("status_code", "retry_after", "failures", "outcome", "again_s"),
    [
        (200, None, 1, AttemptOutcome.SUCCEEDED, None),
        (204, None, 3, AttemptOutcome.SUCCEEDED, None),
        (410, None, 1, AttemptOutcome.GONE, None),  # the endpoint is gone: the subscription is disabled
        (500, None, 1, AttemptOutcome.RETRY, 0.8),
        (None, None, 2, AttemptOutcome.RETRY, 8.0),  # no answer (timeout, refused, unsafe URL)
        (302, None, 1, AttemptOutcome.RETRY, 0.8),  # a redirect is not followed: a failure
        (404, None, 1, AttemptOutcome.RETRY, 0.8),
        (429, 30.0, 1, AttemptOutcome.RETRY, 30.0),  # Retry-After honoured on 429 ...
        (503, 30.0, 1, AttemptOutcome.RETRY, 30.0),  # ... and 503
        (500, 30.0, 1, AttemptOutcome.RETRY, 0.8),  # ... not on others
        (429, 999.0, 1, AttemptOutcome.RETRY, 60.0),  # at most the schedule's longest step
        (500, None, 3, AttemptOutcome.RETRY, 48.0),
        (500, None, 4, AttemptOutcome.FAILED, None),  # the schedule is exhausted
        (429, 5.0, 4, AttemptOutcome.FAILED, None),
    ],
)
def test_after_attempt(
    status_code: int | None,
    retry_after: float | None,
    failures: int,
    outcome: AttemptOutcome,
    again_s: float | None,
) -> None:
    verdict = deliveries.after_attempt(
        status_code, retry_after, failures=failures, schedule=SCHEDULE, now_ms=NOW, jitter=LOW
    )
    assert verdict.outcome is outcome
    assert verdict.next_at_ms == (None if again_s is None else NOW + int(again_s * 1000))


@pytest.mark.parametrize(("attempts", "series", "failures"), [(0, 0, 1), (2, 0, 3), (5, 5, 1), (6, 5, 2)])
def test_a_resend_starts_a_new_series(attempts: int, series: int, failures: int) -> None:
    dlv = Delivery(
        id="dlv_0",
        event_id="evt_0",
        event_type="run.succeeded",
        subscription_id="sub_0",
        client="acme",
        status="pending",
        created_at=T0,
        updated_at=T0,
        attempts=attempts,
        series=series,
    )
    assert deliveries.failures_in_series(dlv) == failures


# From what the vendor call raised to the run's end, through the one map and the decision ---------------
@pytest.mark.parametrize(
    ("exc", "status", "idempotent", "code"),
    [
        # A poll answered 401/403: the key is refused for good, the run ends (vendor-fidelity).
        (VendorRejected("HTTP 401", status_code=401), RunStatus.RUNNING, True, "vendor_rejected"),
        (VendorRejected("HTTP 403", status_code=403), RunStatus.RUNNING, True, "vendor_rejected"),
        # A poll whose answer has no status: a transient fault, the run polls again.
        (KeyError("status"), RunStatus.RUNNING, True, None),
        # A submit that may have created a job: ends where the vendor has no idempotency key ...
        (VendorSubmitUncertain("read timeout"), RunStatus.QUEUED, False, "vendor_submit_ambiguous"),
        # ... and is sent again where it has one (Nutrient).
        (VendorSubmitUncertain("read timeout"), RunStatus.QUEUED, True, None),
        (VendorExpired("HTTP 404", status_code=404), RunStatus.RUNNING, True, "vendor_expired"),
        (VendorResultTooLarge("too big"), RunStatus.RUNNING, True, "result_too_large"),
    ],
)
def test_from_exception_to_the_runs_end(
    exc: Exception, status: str, idempotent: bool, code: str | None
) -> None:
    before = run(status)
    fault = decide.fault_of(exc, submitting=status == RunStatus.QUEUED, idempotent=idempotent)
    change = runs.after_fault(before, fault, POLICY, LIMITS, MAX_TRANSIENT, now_ms=NOW, jitter=LOW)
    assert error_code(change) == code
    assert change.run.status == (RunStatus.FAILED if code else status)


def subscription(**fields: Any) -> Subscription:
    values: dict[str, Any] = {"id": "sub_0", "client": "acme", "url": "https://r.test/hook", "created": T0}
    return Subscription.model_construct(**{**values, **fields})


@pytest.mark.parametrize(
    ("sub", "body", "reason"),
    [
        (None, b"{}", "the subscription was deleted"),
        (subscription(disabled=True), b"{}", "the subscription is disabled: by its owner"),
        (
            subscription(disabled=True, disabled_reason="the endpoint answered 410 Gone"),
            b"{}",
            "the subscription is disabled: the endpoint answered 410 Gone",
        ),
        (subscription(), None, "the event is no longer kept (zero retention or past retention)"),
        (subscription(), b"{}", None),  # sent
    ],
)
def test_skip_reason(sub: Subscription | None, body: bytes | None, reason: str | None) -> None:
    assert deliveries.skip_reason(sub, body) == reason
