"""What a step does at the vendor, and what follows its answer: pure decisions, each returning the one
:class:`Transition` the worker applies (tests/unit/test_decisions.py).

A step is claim → call → decide → apply: :func:`next_action` says which call (before any), the worker makes
it and brings back what it got as one :data:`Called` value, and :func:`decide` turns that into the change.
Each kind of answer has its own function, which :func:`decide` picks:

- :func:`after_submit`: the vendor took the run; its first poll is due after the poll policy's first step.
- :func:`after_poll`: still working (next poll with the grown interval and its jitter), succeeded (the
  result, a file result made ours), failed or canceled at the vendor (``vendor_failed``).
- :func:`after_fault`: a :class:`Fault` (its kind from ``worker/decide.py``'s one exception map): wait for a
  429's ``Retry-After``, retry a transient fault with backoff until ``VENDOR_MAX_TRANSIENT_FAILURES``, or
  fail with the kind's error code.
- :func:`is_overdue` / :func:`timed_out`: ``MAX_RUN_S``.
- :func:`after_telling`: telling the vendor (cancel, delete) succeeded, failed for now, or is given up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, assert_never

import msgspec

from service.core import answers, backoff, domain, lifecycle, trail
from service.core.answers import FileResult, PollResult, Submitted, cut
from service.core.backoff import Jitter, VendorPolicy
from service.core.domain import FaultKind
from service.core.lifecycle import RunLimits, Transition
from service.core.records import Run

# The vendor's own usage object is kept on the run up to this size; past it only the credits are kept.
MAX_USAGE_BYTES = 1024

# The error code a fault of each kind ends a run with (TRANSIENT and RATE_LIMITED end it only when
# transient faults reach VENDOR_MAX_TRANSIENT_FAILURES: vendor_unreachable).
FAULT_CODE: dict[FaultKind, str] = {
    FaultKind.RATE_LIMITED: domain.VENDOR_UNREACHABLE,
    FaultKind.TRANSIENT: domain.VENDOR_UNREACHABLE,
    FaultKind.REJECTED: domain.VENDOR_REJECTED,
    FaultKind.EXPIRED: domain.VENDOR_EXPIRED,
    FaultKind.TOO_LARGE: domain.RESULT_TOO_LARGE,
    FaultKind.AMBIGUOUS: domain.VENDOR_SUBMIT_AMBIGUOUS,
    FaultKind.DOCUMENT_UNAVAILABLE: domain.DOCUMENT_UNAVAILABLE,
}


@dataclass(frozen=True)
class Fault:
    """A vendor call that did not answer as hoped, in the core's words."""

    kind: FaultKind
    message: str  # what the vendor (or the transport) said, already cleaned
    retry_after: float | None = None  # seconds, when the vendor said (429, 503)
    answer: str | None = None  # the vendor's answer to an ambiguous submit, when it gave one


class StepLimits(RunLimits, Protocol):
    """What a step's decision reads of the run policy (``settings.RunPolicy``)."""

    @property
    def vendor_max_transient_failures(self) -> int: ...


# Which call -----------------------------------------------------------------------------------------------


class Action(StrEnum):
    """What a step does at the vendor, chosen before any call by :func:`next_action`."""

    TELL = "tell"  # a run that ended here, with a cancel or a delete at the vendor still to send
    TIME_OUT = "time_out"  # past MAX_RUN_S: cancel at the vendor (best effort), then end timed_out
    SUBMIT = "submit"
    POLL = "poll"


def next_action(run: Run, policy: VendorPolicy, now_ms: int) -> Action:
    """A claimed run's call: told (ended runs), timed out, submitted (queued), else polled."""
    if run.status in domain.TERMINAL:
        return Action.TELL
    if is_overdue(run, policy, now_ms):
        return Action.TIME_OUT
    if run.status == domain.QUEUED:
        return Action.SUBMIT
    return Action.POLL


# What the call brought ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """The vendor took the submit: its answer (made safe by the worker) and the adapter's state before it."""

    answer: Submitted
    state: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None


@dataclass(frozen=True)
class Polled:
    """A poll's answer (made safe), and the result when it was fetched apart (``needs_fetch``)."""

    result: PollResult
    payload: Any = None
    latency_ms: float | None = None


@dataclass(frozen=True)
class Overdue:
    """``MAX_RUN_S`` passed; the vendor was asked to cancel (best effort, whatever it said)."""


@dataclass(frozen=True)
class DocumentGone:
    """A queued run whose document is no longer here: nothing could be submitted."""


@dataclass(frozen=True)
class Told:
    """Cancel and delete at the vendor for an ended run: done, refused (``error``) or failed (``fault``)."""

    deleted: bool | None = None
    error: str | None = None
    fault: Fault | None = None


# One step's call, as the decision sees it: an answer, or the fault it raised (worker/decide.py's map).
Called = Accepted | Polled | Overdue | DocumentGone | Told | Fault


def decide(
    run: Run, called: Called, policy: VendorPolicy, limits: StepLimits, *, now_ms: int, jitter: Jitter
) -> Transition:
    """What the call brought → the run's one change (the run as it stood after the call: a submit may have
    checkpointed it)."""
    max_transient = limits.vendor_max_transient_failures
    match called:
        case Accepted():
            return after_submit(
                run,
                called.answer,
                called.state,
                policy,
                now_ms=now_ms,
                jitter=jitter,
                latency_ms=called.latency_ms,
            )
        case Polled():
            return after_poll(
                run,
                called.result,
                policy,
                limits,
                now_ms=now_ms,
                jitter=jitter,
                payload=called.payload,
                latency_ms=called.latency_ms,
            )
        case Fault():
            return after_fault(run, called, policy, limits, max_transient, now_ms=now_ms, jitter=jitter)
        case Told():
            return after_telling(
                run,
                policy,
                max_transient,
                now_ms=now_ms,
                jitter=jitter,
                deleted=called.deleted,
                error=called.error,
                fault=called.fault,
            )
        case Overdue():
            return timed_out(run, policy, limits, now_ms=now_ms)
        case DocumentGone():
            return document_gone(run, limits, now_ms=now_ms)
        case _:
            assert_never(called)


# After a submit -------------------------------------------------------------------------------------------


def after_submit(
    run: Run,
    accepted: Submitted,
    state: dict[str, Any],
    policy: VendorPolicy,
    *,
    now_ms: int,
    jitter: Jitter,
    latency_ms: float | None = None,
) -> Transition:
    """The vendor accepted the run (``accepted`` already made safe by the worker, as a poll's answer is):
    ``submitted``, first poll after ``POLL_INITIAL_S`` (+ jitter), or when the vendor said
    (``retry_after_s``, within ``POLL_INITIAL_S`` and ``PAUSE_MAX_S``)."""
    shown, delay = backoff.poll_delay(policy, None, jitter)
    if accepted.retry_after_s is not None:
        delay = backoff.directed_delay(policy, accepted.retry_after_s)
    status = accepted.vendor_status
    change = lifecycle.submitted(
        run,
        now_ms,
        vendor_run_id=accepted.vendor_run_id,
        vendor_status=status,
        state={**state, **accepted.state},
        due_ms=now_ms + delay * 1000,
        delay_s=shown,
    )
    return trail.record(change, "submitted", at_ms=now_ms, vendor_status=status, latency_ms=latency_ms)


def document_gone(run: Run, limits: RunLimits, *, now_ms: int) -> Transition:
    """Accepted with a document that is no longer here: the run cannot be submitted."""
    return lifecycle.failed(
        run, now_ms, code=domain.VENDOR_REJECTED, message="the document is gone", settings=limits
    )


# After a poll ---------------------------------------------------------------------------------------------


def after_poll(
    run: Run,
    result: PollResult,
    policy: VendorPolicy,
    limits: RunLimits,
    *,
    now_ms: int,
    jitter: Jitter,
    payload: Any = None,
    latency_ms: float | None = None,
) -> Transition:
    """A poll's answer (already made safe by the worker, ``untrusted``) → the run's change. ``payload``:
    the result when it was fetched apart (``needs_fetch``, made safe too), else the poll's own ``result``.
    What the poll adds to the adapter's state (``result.state``) goes with the change, whatever it is."""
    if result.state:
        run = msgspec.structs.replace(run, state={**run.state, **result.state})
    if result.status == answers.SUCCEEDED:
        body = payload if result.needs_fetch else result.result
        return _succeeded(run, result, body, limits, now_ms=now_ms, latency_ms=latency_ms)
    if result.status in (answers.FAILED, answers.CANCELED):
        return _failed_at_vendor(run, result, limits, now_ms=now_ms, latency_ms=latency_ms)
    return _still_working(run, result, policy, limits, now_ms=now_ms, jitter=jitter, latency_ms=latency_ms)


def _succeeded(
    run: Run, result: PollResult, body: Any, limits: RunLimits, *, now_ms: int, latency_ms: float | None
) -> Transition:
    result_file = None
    if isinstance(body, FileResult):
        body, result_file = file_result(run, body)
    done = lifecycle.finished(
        run,
        now_ms,
        status=domain.SUCCEEDED,
        settings=limits,
        vendor_status=result.vendor_status,
        result=body,
        usage=bounded_usage(result.usage),
        result_file=result_file,
    )
    status = result.vendor_status
    return trail.record(done, "result", at_ms=now_ms, vendor_status=status, latency_ms=latency_ms)


def _failed_at_vendor(
    run: Run, result: PollResult, limits: RunLimits, *, now_ms: int, latency_ms: float | None
) -> Transition:
    # Canceled at the vendor by someone else than us: for our client the run failed there.
    message = result.error or "the vendor reported a failure"
    if result.status == answers.CANCELED:
        message = "the run was canceled at the vendor"
    status = result.vendor_status
    change = lifecycle.failed(
        run,
        now_ms,
        code=domain.VENDOR_FAILED,
        message=message,
        details=result.error_details,
        settings=limits,
        vendor_status=status,
    )
    return trail.record(
        change, "error", at_ms=now_ms, vendor_status=status, latency_ms=latency_ms, detail=message
    )


def _still_working(
    run: Run,
    result: PollResult,
    policy: VendorPolicy,
    limits: RunLimits,
    *,
    now_ms: int,
    jitter: Jitter,
    latency_ms: float | None,
) -> Transition:
    """Queued or running at the vendor: the next poll after the grown interval (+ jitter); the progress
    kept, and told when it moved (``lifecycle.polled``). The vendor's own ``retry_after_s`` sets the next
    poll instead (within ``POLL_INITIAL_S`` and ``PAUSE_MAX_S``); the interval's growth goes on."""
    shown, delay = backoff.poll_delay(policy, run.delay_s, jitter)
    if result.retry_after_s is not None:
        delay = backoff.directed_delay(policy, result.retry_after_s)
    progress = progress_of(result)
    moved = progress is not None and progress != run.progress
    # The trail's entry goes in the same copy of the run as the poll's own fields.
    entry = trail.appended(
        run,
        "progress" if moved else "poll",
        at_ms=now_ms,
        vendor_status=result.vendor_status,
        latency_ms=latency_ms,
        detail=progress_text(progress) if moved else None,
    )
    return lifecycle.polled(
        run,
        now_ms,
        running=result.status == answers.RUNNING,
        vendor_status=result.vendor_status,
        progress=progress,
        delay_s=shown,
        due_ms=now_ms + delay * 1000,
        settings=limits,
        also=entry,
    )


# After a fault --------------------------------------------------------------------------------------------


def after_fault(
    run: Run,
    fault: Fault,
    policy: VendorPolicy,
    limits: RunLimits,
    max_transient: int,
    *,
    now_ms: int,
    jitter: Jitter,
) -> Transition:
    """A fault of a step → wait, retry with backoff, or fail with the kind's code.

    - rate-limited: the transport already paused the whole vendor; this run waits its turn
      (:func:`rate_limited_wait`) and does not fail, nor count a fault;
    - transient: the ``n``-th in a row waits :func:`backoff.fault_delay`; the ``max_transient``-th ends
      the run ``vendor_unreachable``;
    - rejected, expired, too large: the run fails with ``vendor_rejected``, ``vendor_expired``,
      ``result_too_large``;
    - ambiguous (a submit that may have created a job at a vendor without idempotency): the run fails
      ``vendor_submit_ambiguous`` and is never submitted again.
    """
    if fault.kind is FaultKind.RATE_LIMITED:
        delay = rate_limited_wait(policy, fault.retry_after)
        change = lifecycle.touched(run, now_ms, due_ms=now_ms + delay * 1000)
        return trail.record(change, "rate_limited", at_ms=now_ms, detail=f"retry after {delay:g}s")
    if fault.kind is FaultKind.TRANSIENT:
        count = run.transient + 1
        if count >= max_transient:
            message = cut(f"{count} transient faults in a row; the last: {fault.message}")
            change = lifecycle.failed(
                run, now_ms, code=FAULT_CODE[fault.kind], message=message, settings=limits, count_poll=False
            )
            return trail.record(change, "error", at_ms=now_ms, detail=fault.message)
        delay = backoff.fault_delay(policy, count, fault.retry_after, jitter)
        change = lifecycle.touched(run, now_ms, due_ms=now_ms + delay * 1000, transient=count)
        return trail.record(change, "error", at_ms=now_ms, detail=fault.message)
    if fault.kind is FaultKind.AMBIGUOUS:
        message = cut(
            f"the submit may have created a job at {run.vendor}, which takes no idempotency key, so it "
            f"is not sent again; check the vendor before resubmitting ({fault.message})"
        )
        change = lifecycle.failed(
            run,
            now_ms,
            code=FAULT_CODE[fault.kind],
            message=message,
            details={"vendor_answer": fault.answer} if fault.answer else None,
            settings=limits,
            count_poll=False,
        )
        return trail.record(change, "error", at_ms=now_ms, detail=ambiguous_detail(fault))
    # Rejected, expired, too large: the vendor said no for good (401/403/404, a result past the limit).
    change = lifecycle.failed(
        run, now_ms, code=FAULT_CODE[fault.kind], message=fault.message, settings=limits
    )
    return trail.record(change, "error", at_ms=now_ms, detail=fault.message)


def rate_limited_wait(policy: VendorPolicy, retry_after: float | None) -> float:
    """How long a run waits after a 429: the vendor's ``Retry-After``, within the bounds of the vendor's
    own pause (``worker/budget.py``): never under ``POLL_INITIAL_S`` (the vendor's documented minimum
    between two requests), never past ``PAUSE_MAX_S``."""
    wanted = retry_after if retry_after is not None else policy.poll_initial_s
    return min(policy.pause_max_s, max(policy.poll_initial_s, wanted))


def ambiguous_detail(fault: Fault) -> str:
    """The trail's (and the log's) words for an ambiguous submit: what was said, and the vendor's answer."""
    return cut(f"{fault.message}; vendor answered: {fault.answer}" if fault.answer else fault.message, 1024)


# MAX_RUN_S ------------------------------------------------------------------------------------------------


def is_overdue(run: Run, policy: VendorPolicy, now_ms: int) -> bool:
    """Whether the run has been running for longer than the vendor's ``MAX_RUN_S``."""
    return now_ms - run.created_at > policy.max_run_s * 1000


def timed_out(run: Run, policy: VendorPolicy, limits: RunLimits, *, now_ms: int) -> Transition:
    """The run ends ``timed_out``, with what the vendor last said it was doing (Uptiq: "check
    processingStage.message")."""
    message = f"no result after {policy.max_run_s:g}s (HOOKBRIDGE_{run.vendor.upper()}_MAX_RUN_S)"
    progress = run.progress or {}
    if progress.get("message"):
        message += f"; the vendor last said: {progress['message']}"
    change = lifecycle.failed(
        run,
        now_ms,
        code=domain.TIMED_OUT,
        message=message,
        details={"last_progress": progress} if progress else None,
        settings=limits,
        count_poll=False,
    )
    return trail.record(change, "timeout", at_ms=now_ms, detail=message)


# Telling the vendor ---------------------------------------------------------------------------------------


def after_telling(
    run: Run,
    policy: VendorPolicy,
    max_transient: int,
    *,
    now_ms: int,
    jitter: Jitter,
    deleted: bool | None = None,
    error: str | None = None,
    fault: Fault | None = None,
) -> Transition:
    """Cancel and delete at the vendor, done (``fault`` None), or failed: again after the fault backoff,
    until ``max_transient`` attempts or a refusal, then given up with the reason recorded
    (``vendor_deleted: false``, ``vendor_delete_error``). It never loops."""
    if fault is not None:
        attempts = run.vendor_attempts + 1
        if fault.kind is not FaultKind.REJECTED and attempts < max_transient:
            delay = backoff.fault_delay(policy, attempts, fault.retry_after, jitter)
            return lifecycle.vendor_retry(run, due_ms=now_ms + delay * 1000, attempts=attempts)
        error = f"gave up after {attempts} attempt{'s' if attempts > 1 else ''}: {fault.message}"
    return lifecycle.vendor_told(run, deleted=deleted, error=error)


# The result's shape ---------------------------------------------------------------------------------------


def file_result(run: Run, file: FileResult) -> tuple[Any, tuple[bytes, str] | None]:
    """The event's JSON and the file to keep, as the adapter shaped them (its JSON names the file at the
    ``call.result_url`` it was given). Under zero retention an adapter returns no file; one that does
    anyway has it dropped, since nothing of such a run is kept."""
    if run.zero_retention:
        return file.data, None
    return file.data, (file.content, file.media_type)


def bounded_usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    if len(json.dumps(usage, separators=(",", ":"), default=str)) <= MAX_USAGE_BYTES:
        return usage
    return {"credits": usage.get("credits"), "reported": None}


def progress_of(result: PollResult) -> dict[str, Any] | None:
    if result.progress is None:
        return None
    p = result.progress
    return {"percent": p.percent, "phase": p.phase, "message": p.message}


def progress_text(progress: dict[str, Any] | None) -> str | None:
    if not progress:
        return None
    parts = [f"{progress['percent']:g}%" if progress.get("percent") is not None else None]
    parts += [progress.get("phase"), progress.get("message")]
    return " ".join(str(p) for p in parts if p) or None
