"""The one map from what a vendor call raised to a :class:`~service.core.runs.Fault` of the core, and
what the worker does after a submit did not come back cleanly: pure functions, tested as tables
(tests/unit/test_submit_decision.py, test_decisions.py).

The rule: a request that may have created a job at the vendor is sent again only to a vendor whose
adapter says ``submit_idempotent`` (a documented idempotency key makes the repeat return the first job).
Anywhere else a second submit could create and bill a second job, so the run ends
``vendor_submit_ambiguous``, with what the vendor said in its trail.
"""

from __future__ import annotations

from enum import Enum

import httpx

from service.core import domain
from service.core.domain import FaultKind
from service.core.runs import Fault
from service.vendors import text
from service.vendors.base import (
    DocumentUnavailable,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorResultTooLarge,
    VendorSubmitUncertain,
    VendorTransient,
)
from service.vendors.http import nothing_sent

# The run's error code when a submit may have created a vendor job that we cannot name (README, errors).
VENDOR_SUBMIT_AMBIGUOUS = domain.VENDOR_SUBMIT_AMBIGUOUS


class SubmitFault(Enum):
    NOT_SENT = "not_sent"  # refused before a byte left (connect error), or a 429: nothing was created
    REFUSED_TRANSIENT = "refused_transient"  # an answer that says "not now" (5xx, 408): retried as before
    MAYBE_CREATED = "maybe_created"  # sent, and no usable answer: a timeout, a drop, a 2xx of another shape


class AfterSubmit(Enum):
    RETRY = "retry"  # the transient path: backoff, counted toward VENDOR_MAX_TRANSIENT_FAILURES
    END_AMBIGUOUS = "end_ambiguous"  # the run fails vendor_submit_ambiguous, never submitted again


def submit_fault(exc: BaseException) -> SubmitFault:
    """What a fault of a submit step says about the vendor's side. A step timeout (``TimeoutError``) cut
    a request that may have been sent. A transport fault that an adapter mapped with the plain
    ``transport_errors()`` (a plugin's, say) is judged by its cause, so that an adapter which forgot
    ``submit_errors()`` cannot make a dropped submit look unsent."""
    if isinstance(exc, VendorSubmitUncertain | TimeoutError):
        return SubmitFault.MAYBE_CREATED
    if isinstance(exc, VendorRateLimited):
        return SubmitFault.NOT_SENT
    if isinstance(exc, VendorTransient) and exc.status_code is not None:
        return SubmitFault.REFUSED_TRANSIENT
    if isinstance(exc.__cause__, httpx.TransportError) and not nothing_sent(exc.__cause__):
        return SubmitFault.MAYBE_CREATED
    return SubmitFault.NOT_SENT


def after_submit_fault(*, idempotent: bool, fault: SubmitFault) -> AfterSubmit:
    """Whether a submit that failed this way may be sent again."""
    if fault is SubmitFault.MAYBE_CREATED and not idempotent:
        return AfterSubmit.END_AMBIGUOUS
    return AfterSubmit.RETRY


# What a vendor call raised → the fault's kind (a 429 is a VendorRateLimited, checked first: it is also a
# VendorTransient).
# Anything else an adapter raises (a non-JSON answer, a field of the wrong type, an URL that httpx refuses)
# is transient: it counts toward VENDOR_MAX_TRANSIENT_FAILURES, a bounded outcome instead of a lease that
# comes back for ever. (A RedisError never gets here: the worker lets the lease hand the step back.)
KINDS: tuple[tuple[type[BaseException], FaultKind], ...] = (
    (VendorResultTooLarge, FaultKind.TOO_LARGE),
    (VendorExpired, FaultKind.EXPIRED),
    (DocumentUnavailable, FaultKind.DOCUMENT_UNAVAILABLE),  # a VendorRejected: before it
    (VendorRejected, FaultKind.REJECTED),
)


def said(exc: BaseException) -> str:
    """What a fault said: the vendor's own (scrubbed) message, else the exception's type and text."""
    return text.clean(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}".rstrip(": "))


def fault_of(exc: BaseException, *, submitting: bool = False, idempotent: bool = True) -> Fault:
    """The one exception → outcome map. ``submitting``: the fault cut a submit (of a run still queued),
    where a request that may have created a job is ambiguous unless the vendor is ``idempotent``."""
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(exc, VendorRateLimited):
        return Fault(FaultKind.RATE_LIMITED, said(exc), retry_after)
    if isinstance(exc, VendorTransient | TimeoutError):
        if submitting and after_submit_fault(idempotent=idempotent, fault=submit_fault(exc)) is (
            AfterSubmit.END_AMBIGUOUS
        ):
            answer = getattr(exc, "answer", None)
            return Fault(FaultKind.AMBIGUOUS, said(exc), retry_after, answer)
        return Fault(FaultKind.TRANSIENT, said(exc), retry_after)
    kind = next((k for cls, k in KINDS if isinstance(exc, cls)), FaultKind.TRANSIENT)
    return Fault(kind, said(exc), retry_after)
