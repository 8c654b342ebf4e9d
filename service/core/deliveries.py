"""What follows one callback attempt: a pure decision (tests/unit/test_decisions.py).

A 2xx delivered it; a 410 ends it and disables the subscription (``gone``); anything else (another
status, a timeout, a refused or unsafe URL, no answer) is a failure, tried again after the
``RETRY_SCHEDULE``'s next step (±20 % jitter, at least the receiver's ``Retry-After`` on 429/503, at most
the schedule's longest step) until the schedule is exhausted (``failed``). The subscription's auto-disable
(failing for ``SUBSCRIPTION_DISABLE_AFTER_S``) reads the subscription's ``failing_since`` in the same
atomic step as the attempt's record, so it stays in ``delivery_result.lua``, its threshold passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core import backoff
from service.core.backoff import Jitter
from service.core.domain import AttemptOutcome
from service.core.records import Delivery, Subscription

# The answers whose Retry-After a receiver may set (RFC 9110 §10.2.3: 503; RFC 6585: 429).
RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Verdict:
    outcome: AttemptOutcome
    next_at_ms: int | None = None  # for RETRY: when the delivery is due again


def skip_reason(subscription: Subscription | None, body: bytes | None) -> str | None:
    """Why a claimed delivery is not attempted (it ends ``skipped``, failed without counting), or None."""
    if subscription is None:
        return "the subscription was deleted"
    if subscription.disabled:
        return f"the subscription is disabled: {subscription.disabled_reason or 'by its owner'}"
    if body is None:
        return "the event is no longer kept (zero retention or past retention)"
    return None


def failures_in_series(delivery: Delivery) -> int:
    """Which failure of its series this attempt is (1 = the first); a resend starts a new series."""
    return delivery.attempts - delivery.series + 1


def after_attempt(
    status_code: int | None,
    retry_after: float | None,
    *,
    failures: int,
    schedule: tuple[float, ...],
    now_ms: int,
    jitter: Jitter,
) -> Verdict:
    """``status_code`` None: no answer (timeout, refused, unsafe URL). ``failures``: this attempt's place in
    its series, counted as if it failed (:func:`failures_in_series`)."""
    if status_code is not None and 200 <= status_code < 300:
        return Verdict(AttemptOutcome.SUCCEEDED)
    if status_code == 410:
        return Verdict(AttemptOutcome.GONE)
    honoured = retry_after if status_code in RETRY_AFTER_STATUSES else None
    wait = backoff.delivery_wait(schedule, failures, honoured, jitter)
    if wait is None:
        return Verdict(AttemptOutcome.FAILED)
    return Verdict(AttemptOutcome.RETRY, now_ms + int(wait * 1000))
