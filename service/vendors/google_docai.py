"""Google Cloud Document AI, batch processing v1 (next-vendors.md §3): ``process`` (batchProcess).

The document is read from Cloud Storage only: bytes and ``https`` URLs are staged in
``GOOGLE_DOCAI_GCS_BUCKET`` at ``GOOGLE_DOCAI_GCS_PREFIX`` + run id + ``/`` + file name (an ``https`` URL
fetched by the host's fetcher, under the callback address rules and ``MAX_DOCUMENT_BYTES``); a ``gs://``
URL is passed as it is, and one that ends in ``/`` is a prefix: every object under it is processed
(``gcsPrefix``), so one run may hold several documents, each with its own status. The output goes to
``gs://{GCS_BUCKET}/{GCS_PREFIX}{run id}/output/`` (contract §10). Tokens come from google-auth
(``gcp.GoogleTokens``: ADC or ``GOOGLE_DOCAI_CREDENTIALS_FILE``).

Each rule, and the sentence of next-vendors.md it rests on ("silent": the document says nothing, and the
simulator plays each reading):

- "``POST /v1/{name=projects/*/locations/*/processors/*}:batchProcess``, or
  ``.../processorVersions/*:batchProcess``"; body ``inputDocuments.gcsDocuments.documents[{gcsUri,
  mimeType}]`` and ``documentOutputConfig.gcsOutputConfig.gcsUri`` (§3.2): :func:`batch_request`. "Input
  from GCS only ... Output is GCS only" (§3.2): :func:`input_uri`. ``process_options`` is passed as the
  request's ``processOptions`` (contract §10).
- "Its ``name`` is the job ID ... uses the project number" (§3.3): the Operation's ``name`` is the
  vendor run id, polled as it is at ``GET /v1/{name}`` (§3.4), on the regional host of the location
  ("Polling must use the regional host that matches the location", §3.8).
- "``done`` (bool) ... when done, either ``error`` or ``response``"; ``metadata.state`` WAITING, RUNNING,
  SUCCEEDED, CANCELLING, CANCELLED, FAILED (§3.4): :func:`poll_result`. WAITING is queued; CANCELLING
  running; an unknown state running (§0).
- "**Success is not success.** ``done=true`` with ``response`` (empty) can still carry failed documents
  in ``metadata.individualProcessStatuses[].status``. The adapter must check each document" (§3.8):
  every document failed is FAILED (contract §10: ``vendor_failed``); some failed is SUCCEEDED, each
  document's status in the result.
- "Results are **not** in the API response ... written to GCS"; "Use
  ``individualProcessStatuses[].outputGcsDestination`` and list that prefix, rather than building paths"
  (§3.5): :meth:`fetch_result` lists each destination and reads every shard, bounded, in shard order
  (the names' natural order, ``{stem}-{index}.json``; the layout itself is silent, §3.5 "NOT FOUND").
- "Cancel: ``POST /v1/{name}:cancel``. The state passes through CANCELLING → CANCELLED" (§3.6), and
  ``error.code=1`` when done (§3.9.7 [inference]): CANCELED.
- "BatchProcessRequest has no request-ID or idempotency field ... a retried POST creates a second LRO"
  (§3.6): ``submit_idempotent = False``; a submit that may have reached Google is never sent again.
- "Error body is the Google API error model ... ``{"error": {"code": 429, "status":
  "RESOURCE_EXHAUSTED"}}``" (§3.7): a 429 is rate limiting (the vendor's budget pauses, the run waits);
  5xx transient; a 401 is retried once with a fresh token (``gcp.GoogleAuth``), 403 and other 4xx refuse
  the run. A 404 on a poll: "An LRO disappears from get/list about 30 days after finishing" (§3.8):
  ``vendor_expired``.
- "Poll interval: **NOT FOUND** ... client libraries poll internally" (§3.4): the interval of Google's
  own client library, google-api-core's ``DEFAULT_POLLING`` (``initial=1.0``, ``multiplier=1.5``,
  ``maximum=20.0``, google/api_core/future/polling.py), which ``operation.result()`` of
  google-cloud-documentai uses; at most one poll a second per run is far inside "Requests per minute
  1,800 per user" with "Concurrent batch process requests 10 per project" (§3.7).
- Zero retention: the staged document and every output object are deleted after delivery
  (contract §10); Document AI keeps the operation record "approximately 30 days" (§3.5), which has no
  delete binding (§3.6: "NOT AVAILABLE"), and holds no document content.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Mapping
from typing import Any

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field

from service.vendors import gcp, staging
from service.vendors.base import (
    CANCELED,
    FAILED,
    NO_CALL,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Call,
    Document,
    Fetcher,
    Kind,
    PollResult,
    SubmitRequest,
    Submitted,
    VendorDefaults,
    VendorError,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorResultTooLarge,
    VendorSetting,
    VendorSpec,
    VendorTransient,
    no_auth_headers,
)
from service.vendors.http import error_message, submit_errors, transport_errors, unexpected_answer
from service.vendors.results import JsonWriter, hand_over

NAME = "google_docai"
# The placeholder base URL: the real one is the location's, https://{LOCATION}-documentai.googleapis.com.
DEFAULT_BASE_URL = "https://documentai.googleapis.com"
MAX_ASSET_BYTES = 50 * 1024 * 1024
SPILL_BYTES = 8 * 1024 * 1024
MAX_SHARDS = 10_000
CODE_CANCELLED = 1  # google.rpc.Code
# What batch processing reads (the simulator's list; Google's "supported files" page gives the same set).
_MIME_BY_MAGIC = (
    (b"%PDF", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
)
_NUMBER = re.compile(r"(\d+)")


# Decisions -----------------------------------------------------------------------------------------


def media_type(document: Document) -> str:
    """The ``mimeType`` Document AI is told: the run's own unless it is the generic one, else the bytes'
    magic, else the name's extension, else PDF."""
    if document.media_type and document.media_type != "application/octet-stream":
        return document.media_type
    head = (document.content or b"")[:16]
    for magic, kind in _MIME_BY_MAGIC:
        if head.startswith(magic):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    guessed, _ = mimetypes.guess_type(document.url or document.filename)
    return guessed or "application/pdf"


def input_uri(url: str | None, bucket: str, prefix: str, run_id: str, filename: str) -> str:
    """The document's ``gs://`` URI: a ``gs://`` URL as given, else the staged object (contract §10)."""
    if url is not None and (gcp.parse_gs_url(url) is not None or gcp.parse_gs_prefix(url) is not None):
        return url
    name = filename.replace("/", "_").strip() or "document"
    return f"gs://{bucket}/{prefix}{run_id}/{name}"


def output_uri(bucket: str, prefix: str, run_id: str) -> str:
    return f"gs://{bucket}/{prefix}{run_id}/output/"


def processor_path(project: str, location: str, processor: str, version: str | None) -> str:
    name = f"projects/{project}/locations/{location}/processors/{processor}"
    return f"{name}/processorVersions/{version}" if version else name


def batch_request(
    uri: str, mime: str, output: str, process_options: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The BatchProcessRequest (§3.2): one document (``gcsDocuments``), or every object under a
    ``gs://`` URL that ends in ``/`` (``gcsPrefix``: "a oneof of gcs_prefix and gcs_documents")."""
    if uri.endswith("/"):
        inputs: dict[str, Any] = {"gcsPrefix": {"gcsUriPrefix": uri}}
    else:
        inputs = {"gcsDocuments": {"documents": [{"gcsUri": uri, "mimeType": mime}]}}
    body: dict[str, Any] = {
        "inputDocuments": inputs,
        "documentOutputConfig": {"gcsOutputConfig": {"gcsUri": output}},
    }
    if process_options:
        body["processOptions"] = dict(process_options)
    return body


def _failed(status: Any) -> bool:
    return isinstance(status, dict) and bool(status.get("code"))


def document_statuses(operation: Mapping[str, Any]) -> list[dict[str, Any]]:
    metadata = operation.get("metadata")
    statuses = metadata.get("individualProcessStatuses") if isinstance(metadata, dict) else None
    return [s for s in statuses or [] if isinstance(s, dict)]


def poll_result(operation: Mapping[str, Any]) -> PollResult:
    """An Operation in our words (§3.4, §3.8)."""
    raw_metadata = operation.get("metadata")
    metadata: Mapping[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    state = metadata.get("state")
    vendor_status = state if isinstance(state, str) and state else None
    if not operation.get("done"):
        # Not done is never terminal, whatever the state says; WAITING is queued (§3.4).
        return PollResult(QUEUED if vendor_status == "WAITING" else RUNNING, vendor_status)
    error = operation.get("error")
    if isinstance(error, dict):
        if error.get("code") == CODE_CANCELLED:
            return PollResult(CANCELED, vendor_status or "CANCELLED")
        message = str(error.get("message") or metadata.get("stateMessage") or "the batch operation failed")
        return PollResult(FAILED, vendor_status or "FAILED", error=message, error_details={"error": error})
    statuses = document_statuses(operation)
    if statuses and all(_failed(s.get("status")) for s in statuses):
        first = statuses[0]["status"]
        return PollResult(
            FAILED,
            vendor_status or "SUCCEEDED",
            error=f"every document failed; the first: {first.get('message') or first.get('code')}",
            error_details={"documents": [_document_status(s) for s in statuses]},
        )
    return PollResult(SUCCEEDED, vendor_status or "SUCCEEDED", needs_fetch=True)


def _document_status(status: Mapping[str, Any]) -> dict[str, Any]:
    return {"input": status.get("inputGcsSource"), "status": status.get("status") or {}}


def shard_order(name: str) -> tuple[Any, ...]:
    """Natural order of shard names: ``doc-2.json`` before ``doc-10.json``."""
    return tuple(int(part) if part.isdigit() else part for part in _NUMBER.split(name))


def classify(response: httpx.Response) -> VendorError:
    said = f"HTTP {response.status_code}: {error_message(response)}"
    if response.status_code == 429:
        return VendorRateLimited(said, status_code=429)
    if response.status_code >= 500:
        return VendorTransient(said, status_code=response.status_code)
    return VendorRejected(said, status_code=response.status_code)


# The adapter ----------------------------------------------------------------------------------------


class GoogleDocaiAdapter:
    name = NAME
    supports_cancel = True
    # "BatchProcessRequest has no request-ID or idempotency field ... a retried POST creates a second LRO"
    # (§3.6): a submit that may have been received is never sent again.
    submit_idempotent = False

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        project: str,
        location: str,
        processor: str,
        bucket: str,
        prefix: str = "",
        gcs_base_url: str = "",
        tokens: gcp.GoogleTokens | None = None,  # default: the client's GoogleAuth's
        fetcher: Fetcher | None = None,
        max_asset_bytes: int = MAX_ASSET_BYTES,
        max_answer_bytes: int = 0,
        spill_bytes: int = SPILL_BYTES,
    ) -> None:
        # As Textract's: JSON up to what the store keeps whole, a file up to the answer cap.
        self._max_answer_bytes = max(max_answer_bytes, max_asset_bytes)
        self._client = client
        self._project = project
        self._location = location
        self._processor = processor
        self._bucket = bucket
        self._prefix = prefix
        auth = client.auth
        if tokens is None:
            tokens = auth.tokens if isinstance(auth, gcp.GoogleAuth) else gcp.GoogleTokens()
        # As Textract's: each storage request the vendor client's timeout, staging at most as long.
        timeout_s = client.timeout.read or 30.0
        self._tokens = tokens
        self._gcs = gcp.GcsObjects(gcp.GoogleAuth(tokens), gcs_base_url, timeout_s)
        self._stage_timeout_s = timeout_s
        self._fetcher = fetcher
        self._max_asset_bytes = max_asset_bytes
        self._spill_bytes = spill_bytes
        base = str(client.base_url).rstrip("/")
        # https://{LOCATION}-documentai.googleapis.com unless GOOGLE_DOCAI_BASE_URL says otherwise (§3.1).
        self._root = f"https://{location}-documentai.googleapis.com" if base == DEFAULT_BASE_URL else ""

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        if not self._bucket:
            raise VendorRejected("HOOKBRIDGE_GOOGLE_DOCAI_GCS_BUCKET is not set: the output is written there")
        options = request.options
        processor = str(options.get("processor") or self._processor)
        if not processor:
            raise VendorRejected("no processor: set HOOKBRIDGE_GOOGLE_DOCAI_PROCESSOR or options.processor")
        doc = request.document
        uri = input_uri(doc.url, self._bucket, self._prefix, request.run_id, doc.filename)
        staged = uri != doc.url
        async with staging.before_submit(self._stage_timeout_s):
            await self._tokens.token()  # a refresh here, not in the submit's own request
            if staged:
                await self._stage(doc, uri)
        output = output_uri(self._bucket, self._prefix, request.run_id)
        body = batch_request(uri, media_type(doc), output, options.get("process_options"))
        path = processor_path(self._project, self._location, processor, options.get("processor_version"))
        with submit_errors():
            response = await self._client.post(
                f"{self._root}/v1/{path}:batchProcess",
                json=body,
                extensions=call.extensions(Kind.SUBMIT),
            )
        if not response.is_success:
            raise classify(response)
        try:
            operation = response.json()
        except ValueError:
            raise unexpected_answer(response, "an Operation") from None
        name = operation.get("name") if isinstance(operation, dict) else None
        if not isinstance(name, str) or "/operations/" not in name:
            raise unexpected_answer(response, "the Operation's name")
        state = {"output": output, **({"staged": uri} if staged else {})}
        return Submitted(vendor_run_id=name, vendor_status=poll_result(operation).vendor_status, state=state)

    async def _stage(self, doc: Document, uri: str) -> None:
        if doc.content is not None:
            content = doc.content
        elif doc.url is not None and self._fetcher is not None:
            content = await self._fetcher.fetch(doc.url)  # the callback address rules, MAX_DOCUMENT_BYTES
        else:
            raise VendorRejected("this Document AI adapter was built without a document fetcher")
        located = gcp.parse_gs_url(uri)
        assert located is not None
        async with self._gcs.session() as gcs:
            await gcs.put(*located, content, media_type(doc))

    async def _operation(self, name: str, call: Call, kind: Kind) -> dict[str, Any]:
        with transport_errors():
            response = await self._client.get(f"{self._root}/v1/{name}", extensions=call.extensions(kind))
        if response.status_code == 404:
            raise VendorExpired(f"the operation is gone: {error_message(response)}", status_code=404)
        if not response.is_success:
            raise classify(response)
        try:
            operation = response.json()
        except ValueError:
            raise VendorTransient("the Operation is not JSON") from None
        if not isinstance(operation, dict):
            raise VendorTransient("the Operation is not a JSON object")
        return operation

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        return poll_result(await self._operation(vendor_run_id, call, Kind.POLL))

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        """``{"documents": [{"input", "status", "shards": [Document, ...]}]}`` (contract §10), each
        document's shards read from its ``outputGcsDestination`` (§3.5), in shard order."""
        statuses = document_statuses(await self._operation(vendor_run_id, call, Kind.FETCH))
        writer = JsonWriter(cap=self._max_answer_bytes, spill_bytes=self._spill_bytes)
        try:
            async with self._gcs.session() as gcs:
                await _write_documents(gcs, statuses, writer, self._max_answer_bytes)
            assembled = writer.finish()
        except BaseException:
            writer.discard()
            raise
        return hand_over(assembled, self._max_asset_bytes)

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        with transport_errors():
            response = await self._client.post(
                f"{self._root}/v1/{vendor_run_id}:cancel", json={}, extensions=call.extensions(Kind.CANCEL)
            )
        # Gone already (404): nothing to stop.
        if not response.is_success and response.status_code != 404:
            raise classify(response)

    async def delete(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """Deletes the staged document and every object of the run's output prefix; raises unless each
        deletion is confirmed (a missing object is gone already)."""
        staged = gcp.parse_gs_url(str(state.get("staged") or ""))
        output = gcp.parse_gs_url(str(state.get("output") or ""))
        async with self._gcs.session() as gcs:
            if staged is not None:
                await gcs.delete(*staged)
            if output is not None:
                bucket, prefix = output
                for name in [n async for n in gcs.names(bucket, prefix)]:
                    await gcs.delete(bucket, name)


async def _write_documents(
    gcs: gcp.GcsSession, statuses: list[dict[str, Any]], writer: JsonWriter, cap: int
) -> None:
    """``{"documents": [{"input", "status", "shards": [...]}]}``, one document after another."""
    writer.raw(b'{"documents":[')
    for status in statuses:
        writer.begin_item()
        writer.raw(b"{")
        writer.key("input", status.get("inputGcsSource"))
        writer.key("status", status.get("status") or {})
        writer.raw(b'"shards":[')
        destination = str(status.get("outputGcsDestination") or "")
        if destination and not _failed(status.get("status")):
            await _write_shards(gcs, destination, writer, cap)
        writer.raw(b"]}")
    writer.raw(b"]}")


async def _write_shards(gcs: gcp.GcsSession, destination: str, writer: JsonWriter, cap: int) -> None:
    """Every JSON object under the document's ``outputGcsDestination`` (§3.5), in shard order."""
    located = gcp.parse_gs_url(destination.rstrip("/") + "/")
    if located is None:
        raise VendorTransient(f"outputGcsDestination is not a gs:// URI: {destination[:200]}")
    bucket, prefix = located
    names = [n async for n in gcs.names(bucket, prefix, MAX_SHARDS) if n.endswith(".json")]
    for name in sorted(names, key=shard_order):
        room = cap - writer.size
        if room <= 0:
            raise VendorResultTooLarge(f"the result is larger than {cap} bytes")
        content = await gcs.read(bucket, name, room)
        try:
            orjson.loads(content)  # a shard is a Document's JSON; anything else is not passed on
        except orjson.JSONDecodeError:
            raise VendorTransient(f"gs://{bucket}/{name} is not JSON") from None
        writer.item_raw(content.strip())


# Registration ---------------------------------------------------------------------------------------


class GoogleDocaiOptions(BaseModel):
    """A Document AI run's ``options`` (contract §10)."""

    model_config = ConfigDict(extra="forbid")

    processor: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Processor id (default GOOGLE_DOCAI_PROCESSOR)."
    )
    processor_version: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Processor version id."
    )
    process_options: dict[str, Any] | None = Field(
        None, description="The REST JSON (camelCase) of Document AI's `ProcessOptions`."
    )


def _auth(api_key: str, settings: Mapping[str, Any]) -> httpx.Auth:
    return gcp.GoogleAuth(gcp.GoogleTokens(str(settings.get("credentials_file", ""))))


def _build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> GoogleDocaiAdapter:
    fetcher = extra.get("fetcher")
    return GoogleDocaiAdapter(
        client,
        project=str(extra.get("project", "")),
        location=str(extra.get("location", "us")),
        processor=str(extra.get("processor", "")),
        bucket=str(extra.get("gcs_bucket", "")),
        prefix=str(extra.get("gcs_prefix", "")),
        gcs_base_url=str(extra.get("gcs_base_url", "")),
        fetcher=fetcher if isinstance(fetcher, Fetcher) else None,
        max_asset_bytes=int(extra.get("max_asset_bytes", MAX_ASSET_BYTES)),
        max_answer_bytes=int(extra.get("max_answer_bytes", 0)),
    )


def _location(raw: str) -> str:
    value = raw.strip()
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", value):
        raise ValueError("a location such as us or eu")
    return value


SPEC = VendorSpec(
    name=NAME,
    operations=("process",),
    supports_cancel=GoogleDocaiAdapter.supports_cancel,
    defaults=VendorDefaults(
        base_url=DEFAULT_BASE_URL,
        poll_initial_s=1.0,
        poll_max_s=20.0,
        poll_multiplier=1.5,
        max_run_s=86400.0,
        max_rps=0.0,
    ),
    auth_headers=no_auth_headers,
    # OAuth2 bearer tokens from google-auth on every request (GOOGLE_DOCAI_API_KEY is not used).
    auth=_auth,
    build=_build,
    # An ``gs://`` document URL is passed as it is (contract §10).
    document_schemes=("gs",),
    # Without a project and a bucket there is no processor name and no output place (contract §10).
    required=("PROJECT", "GCS_BUCKET"),
    settings=(
        VendorSetting("PROJECT", "", str, "Google Cloud project id or number of the processor"),
        VendorSetting("LOCATION", "us", _location, "the processor's location (us, eu)"),
        VendorSetting("PROCESSOR", "", str, "default processor id (options.processor overrides it)"),
        VendorSetting("GCS_BUCKET", "", str, "bucket for staged documents and Document AI's output"),
        VendorSetting("GCS_PREFIX", "", str, "object prefix (run id + / follow) in GCS_BUCKET"),
        VendorSetting(
            "GCS_BASE_URL",
            "",
            staging.endpoint_override,
            "Cloud Storage API root override (without /storage/v1)",
        ),
        VendorSetting(
            "CREDENTIALS_FILE",
            "",
            str,
            "a service-account key file (its token_uri honoured); unset: Application Default Credentials",
        ),
    ),
    description="Google Cloud Document AI, batch processing",
    options=GoogleDocaiOptions,
)
