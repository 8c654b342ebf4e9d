"""The vendor adapter protocol: four operations over one vendor's async API.

Adapters know nothing of runs, events or delivery. They translate our requests into the vendor's, and
the vendor's answers into :class:`PollResult` and the exceptions below::

    VendorError
    ├── VendorRejected        the vendor refused the submission for good (run error vendor_rejected)
    ├── VendorExpired         the vendor no longer has the run (vendor_expired)
    ├── VendorResultTooLarge  the result asset is past MAX_DOCUMENT_BYTES (result_too_large)
    └── VendorTransient       worth retrying: 5xx, network faults, an early 404
        └── VendorRateLimited 429; ``retry_after`` says when to ask again
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# What a poll can say, in our words (shared/vendors/NOTES.md §0).
QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELED = "queued", "running", "succeeded", "failed", "canceled"


class VendorError(Exception):
    def __init__(self, message: str, *, status_code: int | None = None, vendor_status: str | None = None):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.vendor_status = vendor_status


class VendorRejected(VendorError):
    pass


class VendorExpired(VendorError):
    pass


class VendorTransient(VendorError):
    def __init__(self, message: str, *, status_code: int | None = None, retry_after: float | None = None):
        super().__init__(message, status_code=status_code)
        self.retry_after = retry_after


class VendorRateLimited(VendorTransient):
    pass


@dataclass(frozen=True)
class Document:
    """A document by URL, or its bytes with a filename and media type."""

    url: str | None = None
    content: bytes | None = None
    filename: str = "document"
    media_type: str = "application/octet-stream"


Checkpoint = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class SubmitRequest:
    run_id: str  # stable across retries: the idempotency key where the vendor takes one
    operation: str
    document: Document
    options: dict[str, Any]
    zero_retention: bool
    state: dict[str, Any] = field(default_factory=dict)  # what an earlier attempt checkpointed
    checkpoint: Checkpoint | None = None  # persists adapter state between the calls of one submit


@dataclass(frozen=True)
class Submitted:
    vendor_run_id: str
    vendor_status: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # kept with the run, handed back on every call


@dataclass(frozen=True)
class Progress:
    percent: float | None = None
    phase: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class PollResult:
    status: str  # QUEUED | RUNNING | SUCCEEDED | FAILED | CANCELED; unknown vendor statuses are RUNNING
    vendor_status: str | None
    progress: Progress | None = None
    result: Any = None  # the result, when the poll itself carries it
    needs_fetch: bool = False  # SUCCEEDED, and the result must be fetched with fetch_result
    error: str | None = None  # the vendor's own message on FAILED
    error_details: dict[str, Any] | None = None
    # What the vendor reports the run cost: {"credits": number or None, "reported": its own usage object}.
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class FileResult:
    """A result that is a file rather than JSON (Nutrient split's zip asset), with the JSON beside it."""

    content: bytes
    media_type: str
    data: Any = None  # the vendor's JSON result that names the file


class VendorResultTooLarge(VendorError):
    """A result asset larger than hookbridge keeps (``MAX_DOCUMENT_BYTES``): the run fails."""


@runtime_checkable
class DeletesRuns(Protocol):
    """An adapter whose vendor can delete its copy of a run (for ``zero_retention``)."""

    async def delete(self, vendor_run_id: str, state: dict[str, Any]) -> None:
        """Deletes the vendor's run, canceling it first if the vendor requires; gone already is fine."""


class VendorAdapter(Protocol):
    name: str
    supports_cancel: bool
    operations: frozenset[str]

    async def submit(self, request: SubmitRequest) -> Submitted: ...

    async def poll(self, vendor_run_id: str, state: dict[str, Any]) -> PollResult: ...

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any]) -> Any: ...

    async def cancel(self, vendor_run_id: str, state: dict[str, Any]) -> None: ...
