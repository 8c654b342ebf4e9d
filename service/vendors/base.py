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

Protocol v2 (contract §10): what an adapter may say and use beyond "submit, then poll".

- **The call.** Every adapter method takes ``call`` (:class:`Call`), the one thing the worker hands the
  step: the run's id, its zero retention, where hookbridge serves the run's kept file, and the step's
  budget ticket (opaque to the adapter). Every request the adapter sends carries
  ``extensions=call.extensions(Kind.POLL)`` (httpx's public request extensions): its :class:`Kind`, by
  which the vendor client picks the budget and the 429 pause, and the ticket, which is how the budget
  knows the step's prepaid slot and whether the step is the probe after a pause. Nothing else crosses
  the seam: no context variable, no store.
- **Kinds and budgets.** ``submit``, ``poll``, ``fetch`` (a result, a page, an asset), ``cancel``,
  ``delete``; ``auth`` (a token request an :class:`httpx.Auth` sends) is never budgeted. By default
  every kind spends the vendor's one budget (``{V}_MAX_RPS``) and shares its pause after a 429. A vendor
  with separate documented limits declares :attr:`VendorSpec.budgets`: each :class:`KindBudget` is a
  group of kinds with a rate of its own (``{V}_{NAME}_MAX_RPS``: ``{V}_SUBMIT_MAX_RPS``,
  ``{V}_POLL_MAX_RPS``) and a pause of its own, so that a 429 on a read does not stop submits. Kinds no
  group names stay on the shared budget.
- **A server-directed delay.** ``Submitted.retry_after_s`` and ``PollResult.retry_after_s``: the
  vendor's "ask again in N s" (``Retry-After`` on a 202 or a 200). The worker schedules the run's next
  poll at it, never sooner than the vendor's documented minimum (``POLL_INITIAL_S``) and never later
  than ``{V}_PAUSE_MAX_S``, even past ``POLL_MAX_S``. None: the poll schedule decides, as before.
- **Auth per request.** :attr:`VendorSpec.auth`, when set, builds an :class:`httpx.Auth` from the API
  key and the vendor's settings; every request goes through its ``async_auth_flow`` after the request is
  complete (final body and headers: a signer such as SigV4 sets ``requires_request_body = True``), and
  a token request it yields goes through the same client as kind ``auth``. ``auth_headers`` stays the
  simple form: a static header set once on the client. ``service.vendors.http`` has
  ``StaticHeaderAuth`` and ``RefreshingBearerAuth``. An auth that learns a secret (a token) registers it
  with ``text.register`` before sending it, so that no vendor answer can echo it into a run.
- **Results, the adapter's to shape.** Inline (``PollResult.result``), fetched (``needs_fetch``, then
  ``fetch_result``), paged (``fetch_result`` loops the pages itself, bounded by the answer cap and a
  page count of its own) or in object storage (read by the adapter, with the fetcher or its own
  client). What the adapter returns is the run's result as the client sees it: JSON, a
  :class:`FileResult` (JSON and a small file beside it, the JSON already naming ``call.result_url``), or
  a :class:`ResultFile` (a large result streamed to a bounded temporary file, never held whole:
  ``http.stream_to_file``), which the worker is to move into the store in slices and remove. (Not yet:
  the store takes a result whole, so the worker refuses a ResultFile, ``result_too_large``, and removes
  the file.)
- **The answer cap.** ``VendorDefaults.max_answer_bytes`` (setting ``{V}_MAX_ANSWER_BYTES``): the most
  of one answer the vendor client reads, and the bound of a :class:`ResultFile`. 0: hookbridge's
  ``MAX_DOCUMENT_BYTES`` and an envelope's room, as before. Azure's results can reach 500 MB.
- **State from a poll.** ``PollResult.state``: keys merged into the run's adapter state by the same
  atomic change that records the poll (a next page token, a resource name learned late).
- **Absolute URLs from the vendor** (Azure's ``Operation-Location``, a presigned asset):
  ``http.same_origin(url, base)`` says whether our key may go there; elsewhere, the fetcher (no key).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

# The answers' plain values live in the core, which decides on them; adapters and plugins import them
# from here, by the same names.
from service.core.answers import CANCELED as CANCELED
from service.core.answers import FAILED as FAILED
from service.core.answers import QUEUED as QUEUED
from service.core.answers import RUNNING as RUNNING
from service.core.answers import SUCCEEDED as SUCCEEDED
from service.core.answers import FileResult as FileResult
from service.core.answers import PollProgress
from service.core.answers import PollResult as PollResult
from service.core.answers import Submitted as Submitted
from service.vendors import text

if TYPE_CHECKING:
    import httpx

# A poll's progress: the core's PollProgress (the API's own Progress is core/shapes.py's).
Progress = PollProgress


class Kind(StrEnum):
    """What a request to the vendor is for: its budget group, its 429 pause, its metrics label."""

    SUBMIT = "submit"  # everything a submit sends (an upload before it included)
    POLL = "poll"
    FETCH = "fetch"  # a result, a page of one, an asset
    CANCEL = "cancel"
    DELETE = "delete"
    AUTH = "auth"  # a token request of an httpx.Auth: never budgeted, never paused


# The request extensions a vendor client reads (httpx's public ``Request.extensions``).
KIND_EXTENSION = "kind"
TICKET_EXTENSION = "hookbridge.ticket"


@dataclass(frozen=True)
class Call:
    """What the worker hands every adapter call of one step (Protocol v2, module docstring).

    ``ticket`` is the step's budget ticket: opaque here, read by the vendor client's budget from each
    request's extensions. ``result_url`` is where hookbridge serves the run's kept file
    (``/v1/runs/{id}/result``): an adapter whose result names a file (Nutrient's ``output.downloadUrl``)
    writes it there. ``zero_retention``: the run keeps nothing, so a file travels inline instead.
    """

    run_id: str = ""
    zero_retention: bool = False
    result_url: str = ""
    ticket: object | None = None

    def extensions(self, kind: Kind) -> dict[str, Any]:
        """A request's ``extensions=``: its kind and the step's ticket."""
        if self.ticket is None:
            return {KIND_EXTENSION: str(kind)}
        return {KIND_EXTENSION: str(kind), TICKET_EXTENSION: self.ticket}


# A call outside a step (a test, a tool): no ticket, no run.
NO_CALL = Call()


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
class ResultFile:
    """A result too large to hold in memory, streamed to a temporary file (``http.stream_to_file``) no
    larger than the vendor's answer cap. The worker is to move it into the store in slices, then remove
    it (until the store takes one, it refuses it: module docstring); an adapter that raises after writing
    one removes it itself.

    ``media_type`` ``application/json``: the file is the result's JSON (served by ``result_url``, not
    inline in the callback past ``MAX_INLINE_RESULT_BYTES``). Any other: a file beside ``data``, as a
    :class:`FileResult`."""

    path: str
    media_type: str
    size: int
    data: Any = None


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

    async def delete(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """Deletes the vendor's run, canceling it first if the vendor requires; gone already is fine.
        Returns only when the vendor confirmed it (contract §10: a deletion is reported only then)."""


class VendorAdapter(Protocol):
    name: str
    supports_cancel: bool
    # The one place a vendor's submit rule is named: True only where the vendor documents an idempotency
    # key that makes a repeated submit return the first job. False: after a submit that may have created a
    # job (VendorSubmitUncertain, a step timeout) the worker never asks again (service/worker/decide.py).
    submit_idempotent: bool

    # Each method takes the step's ``call`` (keyword ``call=`` from the worker) and tags every request
    # it sends with ``call.extensions(kind)``.
    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted: ...

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult: ...

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        """The result, shaped as the client sees it: JSON, a :class:`FileResult` or a :class:`ResultFile`."""

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None: ...


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
    # The most bytes of one answer the client reads, and the bound of a ResultFile ({V}_MAX_ANSWER_BYTES).
    # 0: MAX_DOCUMENT_BYTES and an envelope's room.
    max_answer_bytes: int = 0
    # The vendor's documented minimum between two requests about one run (Azure: 2 s): a POLL_INITIAL_S
    # set below it is raised to it, with a warning at start (contract §10). 0: none documented.
    min_poll_s: float = 0.0


@dataclass(frozen=True)
class KindBudget:
    """Requests of some kinds with a budget and a 429 pause of their own (Azure: analyze 15 TPS, reads
    50 TPS). ``name`` (lower case) names the setting ``HOOKBRIDGE_{V}_{NAME}_MAX_RPS`` (``submit``,
    ``poll``), whose default is ``max_rps`` (0: no rate, a pause still)."""

    name: str
    kinds: frozenset[Kind]
    max_rps: float = 0.0
    # The pauses after 429s in a row that carry no Retry-After, as the vendor documents them (Azure's
    # "2-5-13-34"); the last repeats, each within [POLL_INITIAL_S, PAUSE_MAX_S]. Empty: POLL_INITIAL_S
    # doubling, as the shared pause does.
    pause_schedule_s: tuple[float, ...] = ()


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


# Builds the adapter from its HTTP client (base URL, auth, budgets and timeouts already set) and
# the values of the vendor's own settings (``VendorSetting.key`` -> value), beside which the host puts
# ``max_asset_bytes``: the most bytes an adapter may read of one result asset (MAX_DOCUMENT_BYTES), and
# ``fetcher``: a :class:`Fetcher` for URLs outside the vendor's API (no key sent).
AdapterFactory = Callable[["httpx.AsyncClient", Mapping[str, Any]], "VendorAdapter"]

# Builds the per-request auth from the API key ("" when not set) and the vendor's own settings' values.
AuthFactory = Callable[[str, Mapping[str, Any]], "httpx.Auth"]


@dataclass(frozen=True)
class VendorSpec:
    """One vendor, as a plugin registers it (the entry point's object).

    ``name`` (``^[a-z][a-z0-9_]{0,30}$``) is the vendor's name in the API (``"vendor": name``) and,
    upper-cased, in its settings (``HOOKBRIDGE_{NAME}_BASE_URL``, ``_API_KEY``, ``_POLL_INITIAL_S``, ...).
    ``auth_headers`` turns the configured API key into static request headers (:func:`no_auth_headers`
    for none). ``auth``, when set, builds an :class:`httpx.Auth` run on every request instead (a token
    that expires, a signature): from the API key and the values of the vendor's own settings.
    ``budgets``: groups of request kinds with a rate and a 429 pause of their own (module docstring).
    ``options`` is the model of the run's ``options``: the API validates them with it at submit (422
    with every bad field) and the OpenAPI document shows it. ``required`` names the settings (common,
    such as ``API_KEY``, or the vendor's own) without which the vendor cannot work: while one is unset,
    a submit to it is refused (``422 vendor_not_configured``, naming them) and everything else starts.
    ``document_schemes``: URL schemes besides ``https`` that the vendor reads itself (Textract ``s3``,
    Document AI ``gs``, contract §10): a ``document.url`` of such a scheme is passed as it is; any other
    vendor refuses it (422). ``throttled``: for a vendor that throttles with another status than 429
    (Textract: 400 ``ProvisionedThroughputExceededException``, 500 ``ThrottlingException``), tells such
    an answer (its body read, when short), so that it pauses the vendor for every worker as a 429 does.
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
    auth: AuthFactory | None = None
    budgets: tuple[KindBudget, ...] = ()
    required: tuple[str, ...] = ()
    document_schemes: tuple[str, ...] = ()
    throttled: Callable[[httpx.Response], bool] | None = None


def no_auth_headers(api_key: str) -> dict[str, str]:
    """``auth_headers`` of a vendor that authenticates otherwise (``auth``) or not at all."""
    return {}
