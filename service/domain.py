"""The domain's vocabulary: statuses, event types and ids. The problems the API answers are classes of
``service.api.problems``."""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime

QUEUED, SUBMITTED, RUNNING = "queued", "submitted", "running"
SUCCEEDED, FAILED, CANCELED = "succeeded", "failed", "canceled"
RUN_STATUSES = (QUEUED, SUBMITTED, RUNNING, SUCCEEDED, FAILED, CANCELED)
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELED})

EVENT_SUBMITTED = "run.submitted"
EVENT_PROGRESS = "run.progress"
EVENT_SUCCEEDED = "run.succeeded"
EVENT_FAILED = "run.failed"
EVENT_CANCELED = "run.canceled"
EVENT_TEST = "subscription.test"
RUN_EVENTS = (EVENT_SUBMITTED, EVENT_PROGRESS, EVENT_SUCCEEDED, EVENT_FAILED, EVENT_CANCELED)
EVENT_TYPES = (*RUN_EVENTS, EVENT_TEST)
DEFAULT_EVENT_TYPES = (EVENT_SUCCEEDED, EVENT_FAILED, EVENT_CANCELED)
TERMINAL_EVENT = {SUCCEEDED: EVENT_SUCCEEDED, FAILED: EVENT_FAILED, CANCELED: EVENT_CANCELED}

# The vendors, what each can do and whether it can cancel come from the vendor registry
# (service/vendors/registry.py, entry point group hookbridge.vendors), through Settings.vendors.

# Run error codes (CONTRACT §4).
VENDOR_REJECTED = "vendor_rejected"
VENDOR_FAILED = "vendor_failed"
VENDOR_UNREACHABLE = "vendor_unreachable"
TIMED_OUT = "timed_out"
VENDOR_EXPIRED = "vendor_expired"
# A submit that may have created a vendor job, to a vendor without idempotency: never sent again.
VENDOR_SUBMIT_AMBIGUOUS = "vendor_submit_ambiguous"
RESULT_TOO_LARGE = "result_too_large"  # the vendor's result asset is past MAX_DOCUMENT_BYTES

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_BODY = "[0-9A-HJKMNP-TV-Z]{26}"  # what new_id puts after the prefix
# The exact shapes of the ids we hand out (deliveries: a digest made by store/lua/_fanout.lua). An id from
# a request is checked before it becomes part of a key, so that "sub_X:deliveries" never names another key.
_IDS = {
    "run": re.compile(f"run_{ID_BODY}"),
    "sub": re.compile(f"sub_{ID_BODY}"),
    "dlv": re.compile(r"dlv_[0-9a-f]{26}"),
}


def new_id(prefix: str) -> str:
    """A ULID-like id: 48 bits of milliseconds, 80 random bits, Crockford base32, so ids sort by time."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def is_id(kind: str, value: str) -> bool:
    """Whether ``value`` has the shape of an id of ``kind`` (``run``, ``sub``, ``dlv``) that we issue."""
    return _IDS[kind].fullmatch(value) is not None


def now_ms() -> int:
    return int(time.time() * 1000)


def rfc3339(ms: int | float | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
