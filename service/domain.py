"""The domain's vocabulary: statuses, event types, ids and the exception tree.

Exceptions::

    HookbridgeError
    ├── NotFound                 404 not_found / result_not_ready
    ├── Conflict                 409 run_not_cancelable / idempotency_key_reused
    ├── Gone                     410 result_gone
    ├── InvalidInput             400/413/415/422 (invalid_json, validation_error, ...)
    ├── RateLimited              429 rate_limited (a per-client quota), with Retry-After
    └── Unauthorized             401 unauthorized

A Redis that cannot be reached is not a domain error: the API maps redis-py's errors to 503.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

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
RESULT_TOO_LARGE = "result_too_large"  # the vendor's result asset is past MAX_DOCUMENT_BYTES

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id(prefix: str) -> str:
    """A ULID-like id: 48 bits of milliseconds, 80 random bits, Crockford base32, so ids sort by time."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def now_ms() -> int:
    return int(time.time() * 1000)


def rfc3339(ms: int | float | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class HookbridgeError(Exception):
    status = 500
    code = "internal_error"
    title = "Internal error"

    def __init__(self, detail: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.extra = extra


class NotFound(HookbridgeError):
    status, code, title = 404, "not_found", "Not found"


class Conflict(HookbridgeError):
    status, code, title = 409, "conflict", "Conflict"


class Gone(HookbridgeError):
    status, code, title = 410, "result_gone", "Gone"


class InvalidInput(HookbridgeError):
    status, code, title = 422, "validation_error", "Invalid request"

    def __init__(self, detail: str, *, code: str | None = None, status: int | None = None, **extra: Any):
        super().__init__(detail, code=code, **extra)
        if status is not None:
            self.status = status


class RateLimited(HookbridgeError):
    status, code, title = 429, "rate_limited", "Too many requests"


class Unauthorized(HookbridgeError):
    status, code, title = 401, "unauthorized", "Unauthorized"


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str


@dataclass
class ValidationErrors:
    errors: list[FieldError] = field(default_factory=list)

    def add(self, name: str, message: str) -> None:
        self.errors.append(FieldError(name, message))

    def raise_if_any(self) -> None:
        if self.errors:
            raise InvalidInput(
                "The request has invalid fields.",
                errors=[{"field": e.field, "message": e.message} for e in self.errors],
            )
