"""The vendor adapter protocol: four operations over one vendor's async API.

Adapters know nothing of runs, events or delivery. They translate our requests into the vendor's, and
the vendor's answers into :class:`PollResult` and the exceptions below. A vendor is registered by a
:class:`VendorSpec` under the entry point group ``hookbridge.vendors`` (see ``service.vendors.registry``):
the spec says what the vendor can do, its settings and their defaults, and how to build its adapter::

    VendorError
    ├── VendorRejected        the vendor refused the submission for good (run error vendor_rejected)
    │   └── DocumentUnavailable  the document URL hookbridge fetches cannot be had (document_unavailable)
    ├── VendorExpired         the vendor no longer has the run (vendor_expired)
    ├── VendorResultTooLarge  the result asset is past MAX_DOCUMENT_BYTES (result_too_large)
    └── VendorTransient       worth retrying: 5xx, network faults, an early 404
        ├── VendorRateLimited 429; ``retry_after`` says when to ask again
        └── VendorSubmitUncertain  a submit that may have created a vendor job (a timeout or a dropped
                              connection after the request went out, a 2xx of an unexpected shape):
                              retried only where the adapter's ``submit_idempotent`` says so

Every message is vendor text: cut short and scrubbed of our credentials as the error is made
(``service.vendors.text``), so that no log line, span, run record or callback carries more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from service.vendors import text

if TYPE_CHECKING:
    import httpx

# What a poll can say, in our words (shared/vendors/NOTES.md §0).
QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELED = "queued", "running", "succeeded", "failed", "canceled"


class VendorError(Exception):
    def __init__(self, message: str, *, status_code: int | None = None, vendor_status: str | None = None):
        message = text.clean(message)
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.vendor_status = text.clean_optional(vendor_status, 200)


class VendorRejected(VendorError):
    pass


class VendorExpired(VendorError):
    pass


class DocumentUnavailable(VendorRejected):
    """The run's document URL cannot be fetched for good (a blocked address, a refused or missing document,
    past ``MAX_DOCUMENT_BYTES``): the run fails ``document_unavailable`` and nothing reaches the vendor."""


class VendorTransient(VendorError):
    def __init__(self, message: str, *, status_code: int | None = None, retry_after: float | None = None):
        super().__init__(message, status_code=status_code)
        self.retry_after = retry_after


class VendorRateLimited(VendorTransient):
    pass


class VendorSubmitUncertain(VendorTransient):
    """The submit's request went out and what happened to it is unknown: a timeout or a dropped connection
    after sending, or a 2xx whose body does not name the job. The vendor may have created a job (and may
    bill it). ``answer`` is what the vendor said, if anything (cut and scrubbed), for the run's trail."""

    def __init__(self, message: str, *, status_code: int | None = None, answer: str | None = None):
        super().__init__(message, status_code=status_code)
        self.answer = text.clean_optional(answer, 1024)


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


class DocumentTooLarge(DocumentUnavailable):
    """A fetched document is past ``MAX_DOCUMENT_BYTES``."""


@runtime_checkable
class Fetcher(Protocol):
    """Fetches a URL outside a vendor's API (a run's document, a presigned asset) without our key, under
    the callback address rules and ``MAX_DOCUMENT_BYTES`` (``service.delivery.fetch.DocumentFetcher``).
    Raises :class:`DocumentUnavailable` (for good) or :class:`VendorTransient`."""

    async def fetch(self, url: str) -> bytes: ...


@runtime_checkable
class UploadsUrlInput(Protocol):
    """An adapter whose vendor must get a URL input's bytes, not the URL: the worker fetches the URL once
    (``fetch_document``), keeps the bytes as a bytes submit keeps them, and submits those on every try.
    ``uploads_url_input`` False hands the URL to the vendor as before."""

    uploads_url_input: bool

    async def fetch_document(self, url: str) -> bytes:
        """The document at ``url``, fetched once under the callback address rules, bounded."""


@runtime_checkable
class DeletesRuns(Protocol):
    """An adapter whose vendor can delete its copy of a run (for ``zero_retention``)."""

    async def delete(self, vendor_run_id: str, state: dict[str, Any]) -> None:
        """Deletes the vendor's run, canceling it first if the vendor requires; gone already is fine."""


class VendorAdapter(Protocol):
    name: str
    supports_cancel: bool
    # The one place a vendor's submit rule is named: True only where the vendor documents an idempotency
    # key that makes a repeated submit return the first job. False: after a submit that may have created a
    # job (VendorSubmitUncertain, a step timeout) the worker never asks again (service/worker/decide.py).
    submit_idempotent: bool

    async def submit(self, request: SubmitRequest) -> Submitted: ...

    async def poll(self, vendor_run_id: str, state: dict[str, Any]) -> PollResult: ...

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any]) -> Any: ...

    async def cancel(self, vendor_run_id: str, state: dict[str, Any]) -> None: ...


class OpenOptions(BaseModel):
    """The ``options`` of a vendor that declares none: any JSON object, passed to the adapter as sent."""

    model_config = ConfigDict(extra="allow")


# Registration ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VendorDefaults:
    """The defaults of a vendor's common settings, from the vendor's own documents.

    ``poll_initial_s`` is the vendor's documented minimum interval between two requests about one run; it
    is also the shortest pause after a 429, whatever ``Retry-After`` says.
    """

    base_url: str
    poll_initial_s: float
    poll_max_s: float
    poll_multiplier: float
    max_run_s: float
    max_rps: float = 0.0  # 0: no request budget
    pause_max_s: float = 60.0  # the longest pause after a 429 (a growing one, or a long Retry-After)


@dataclass(frozen=True)
class VendorSetting:
    """A setting of one vendor beyond the common ones: ``HOOKBRIDGE_{VENDOR}_{name}``.

    ``parse`` turns the environment's text into the value (raise ``ValueError`` to refuse it); the value
    reaches :attr:`VendorSpec.build` under ``attr`` (``name`` in lower case unless given).
    """

    name: str
    default: Any = ""
    parse: Callable[[str], Any] = str
    description: str = ""
    attr: str = ""

    @property
    def key(self) -> str:
        return self.attr or self.name.lower()


# Builds the adapter from its HTTP client (base URL, auth headers, budget and timeouts already set) and
# the values of the vendor's own settings (``VendorSetting.key`` -> value), beside which the host puts
# ``max_asset_bytes``: the most bytes an adapter may read of one result asset (MAX_DOCUMENT_BYTES), and
# ``fetcher``: a :class:`Fetcher` for URLs outside the vendor's API (no key sent).
AdapterFactory = Callable[["httpx.AsyncClient", Mapping[str, Any]], "VendorAdapter"]


@dataclass(frozen=True)
class VendorSpec:
    """One vendor, as a plugin registers it (the entry point's object).

    ``name`` is the vendor's name in the API (``"vendor": name``) and, upper-cased, in its settings
    (``HOOKBRIDGE_{NAME}_BASE_URL``, ``_API_KEY``, ``_POLL_INITIAL_S``, ...). ``auth_headers`` turns the
    configured API key into the request headers. ``options`` is the model of the run's ``options``: the
    API validates them with it at submit (422 with every bad field) and the OpenAPI document shows it.
    """

    name: str
    operations: tuple[str, ...]
    supports_cancel: bool
    defaults: VendorDefaults
    auth_headers: Callable[[str], dict[str, str]]
    build: AdapterFactory
    settings: tuple[VendorSetting, ...] = ()
    description: str = ""
    options: type[BaseModel] = OpenOptions
