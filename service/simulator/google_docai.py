"""Google Cloud Document AI batch processing, v1 REST (next-vendors.md §3), under ``/google_docai``: so
``DocumentProcessorServiceClient(client_options={"api_endpoint": SIM + "/google_docai"},
transport="rest")`` drives it. Documents are read from, and results written to, the GCS emulator
(storage.py); bearer tokens come from oauth.py.

Each rule and the sentence of next-vendors.md it rests on (§3.x; "ND" = not documented there, and what
the simulator plays):

- "``POST /v1/{name=projects/*/locations/*/processors/*}:batchProcess``, or
  ``.../processorVersions/*:batchProcess``" (§3.2). The project is taken by id or number, and only the
  configured project and location are served: another is 403 ``PERMISSION_DENIED`` (ND; what Google
  answers for a resource the caller cannot see).
- "It requires ``Authorization: Bearer`` (401 ``UNAUTHENTICATED``, 403 ``PERMISSION_DENIED``)" (§3.9.1);
  scope ``https://www.googleapis.com/auth/cloud-platform`` (§3.1). See oauth.py for what is accepted.
- "Input from GCS only: ``BatchDocumentsInputConfig`` is a oneof of ``gcs_prefix`` and
  ``gcs_documents``" and "Output is GCS only" (§3.2); "It rejects anything else with 400
  ``INVALID_ARGUMENT`` in the google.rpc.Status envelope" (§3.9.1). "≤ 5,000 files per batch request"
  and "max 1 GB per file" (§3.2): more files is 400 at submit (or, for a prefix, the operation FAILED);
  a larger file fails that document. Labels: "keys and values ≤ 63 characters, lowercase/digits/
  underscore/dash, and keys must start with a letter" (§3.2). Unknown body fields: ND; 400 ``Invalid JSON
  payload received. Unknown name``, as Google's JSON transcoding answers. ``mimeType`` of each
  ``gcsDocuments`` entry: required (ND; the documented body carries it).
- "HTTP 200 with a ``google.longrunning.Operation``. Its ``name`` ... uses the **project number**" and
  "**no ``done`` field** at first" (§3.3, §3.9.2).
- "``GET /v1/{name=projects/*/locations/*/operations/*}``" (§3.4); ``metadata`` is a
  ``BatchProcessMetadata`` (``@type``) with ``state``, ``stateMessage``, ``createTime``, ``updateTime``,
  and, once it ends ("When the main LRO ends, the detailed status of each document LRO is provided",
  §3.4), ``individualProcessStatuses[]`` of ``inputGcsSource``, ``status``, ``outputGcsDestination``
  ("of the processed document if it was successful, otherwise empty"). ``state`` walks "``WAITING →
  RUNNING → SUCCEEDED | FAILED | CANCELLING → CANCELLED``, with ``done`` flipping only at the end. On
  FAILED, ``error`` is present and ``response`` is absent" (§3.9.3); ``response`` is the empty
  ``BatchProcessResponse`` (§3.3).
- "A partial failure: ``done=true``, ``response:{}`` and ``state:SUCCEEDED``, but one
  ``individualProcessStatuses[i].status.code=3`` and an empty ``outputGcsDestination``" (§3.9.4): a
  document whose name or first bytes say ``fail`` (``_documents.py``), or one that does not exist (code 5
  ``NOT_FOUND``: ND). Every document failed: ND; the operation FAILED with ``error.code`` 3 (contract
  §10 makes such a run ``failed``).
- "Output is written to a fake GCS ... as sharded Document JSON, at paths the adapter must discover from
  ``outputGcsDestination``" (§3.9.5); "split into shards when ``shardingConfig.pagesPerShard`` is set"
  (§3.5). The layout is ND (§3.5 "NOT FOUND"); the simulator writes
  ``{gcsUri}/{operation id}/{input index}/{file stem}-{shard}.json``, one shard without a
  ``pagesPerShard``, each with ``shardInfo``. The shards are written when a poll first finds the
  operation finished (the simulator has no background tasks).
- "Over the concurrent-batch quota, return 429 ``RESOURCE_EXHAUSTED``. Also a mode where the job just
  sits in ``WAITING``" (§3.9.6); "Concurrent batch process requests | 10 per project" (§3.7):
  ``google_docai_max_concurrent`` and ``google_docai_over_quota``; the middleware's ``google_docai_rps``
  bucket answers 429 too. Error body ``{"error": {"code", "message", "status", "details"}}`` (§3.7).
- "``:cancel`` → the next poll shows ``CANCELLING`` and then ``done``, with ``error.code=1``" (§3.6,
  §3.9.7): the first poll after a cancel shows CANCELLING, the next CANCELLED (no shards written).
  Cancelling a finished operation: ND; a no-op ``{}``.
- "After a simulated 30 days, GET → 404 ``NOT_FOUND``" (§3.9.8, §3.5 "approximately 30 days"):
  ``google_docai_retention_s``.
- No idempotency key (§3.6): a retried POST makes a second operation. No Retry-After (§3.4).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, Document, Ending
from ._state import BadRequest, Phase, SimState, Timeline, VendorStore, bounded_body, sim_state
from .oauth import AuthError, OAuthStore, check_bearer
from .storage import Storage, StorageDown, parse_gs_uri

MAX_FILES = 5000
# 5,000 gcsDocuments entries of a long URI fit well within it.
MAX_BODY = 4 * 1024 * 1024
MAX_FILE_BYTES = 1024**3
_METADATA_TYPE = "type.googleapis.com/google.cloud.documentai.v1.BatchProcessMetadata"
_RESPONSE_TYPE = "type.googleapis.com/google.cloud.documentai.v1.BatchProcessResponse"
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
_BODY_FIELDS = frozenset(
    ("inputDocuments", "documentOutputConfig", "skipHumanReview", "processOptions", "labels")
)
_MIME_TYPES = frozenset(
    ("application/pdf", "image/tiff", "image/gif", "image/jpeg", "image/png", "image/bmp", "image/webp")
)
# google.rpc.Code numbers of the per-document and operation errors.
CODE_CANCELLED, CODE_INVALID_ARGUMENT, CODE_NOT_FOUND = 1, 3, 5


def error_response(status: int, message: str, details: list[dict[str, Any]] | None = None) -> Response:
    body: dict[str, Any] = {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}
    if details:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status)


def fault_response(status: int, state: SimState, retry_after_s: float | None = None) -> Response:
    """The middleware's rate-limit refusal and injected server errors, in Google's error shape."""
    del state, retry_after_s  # no Retry-After is documented (§2.4, §3.4)
    if status == 429:
        return _quota_error(
            "Quota exceeded for quota metric 'Requests' of service documentai.googleapis.com."
        )
    return error_response(
        status, "The service is currently unavailable." if status != 500 else "Internal error."
    )


def _quota_error(message: str) -> Response:
    info = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "RATE_LIMIT_EXCEEDED",
        "domain": "googleapis.com",
        "metadata": {"service": "documentai.googleapis.com"},
    }
    return error_response(429, message, [info])


# Decisions -----------------------------------------------------------------------------------------


def operation_state(phase: Phase | None, cancel_polls: int | None, outcome: str | None) -> str:
    """``metadata.state`` from the timeline's phase (None: held in WAITING over the quota), the polls seen
    since a cancel (None: not cancelled) and the materialized outcome ("SUCCEEDED" or "FAILED")."""
    if cancel_polls is not None and outcome is None:
        return "CANCELLING" if cancel_polls <= 1 else "CANCELLED"
    if phase is None or phase is Phase.QUEUED:
        return "WAITING"
    if phase is Phase.RUNNING:
        return "RUNNING"
    return outcome or "RUNNING"


def shard_ranges(pages: int, pages_per_shard: int) -> list[tuple[int, int]]:
    """[(first page, last page)] of each shard, 1-based; one shard when ``pages_per_shard`` is 0."""
    if pages_per_shard <= 0:
        return [(1, pages)]
    return [(s + 1, min(pages, s + pages_per_shard)) for s in range(0, pages, pages_per_shard)]


@dataclass
class BatchOp:
    id: str
    project_number: str
    location: str
    documents: list[tuple[str, str | None]] | None  # (gs uri, mime type); None: the prefix below
    prefix: str | None
    output: tuple[str, str]  # bucket, object prefix ending in "/" (or empty)
    pages_per_shard: int
    timeline: Timeline | None  # None while held in WAITING over the quota
    created_at: float
    cancel_polls: int | None = None
    outcome: str | None = None  # SUCCEEDED or FAILED once the shards are written
    statuses: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    ended_at: float | None = None

    @property
    def name(self) -> str:
        return f"projects/{self.project_number}/locations/{self.location}/operations/{self.id}"

    def phase(self, now: float) -> Phase | None:
        return None if self.timeline is None else self.timeline.phase(now)

    def state(self, now: float) -> str:
        return operation_state(self.phase(now), self.cancel_polls, self.outcome)

    def status(self, now: float) -> str:
        return self.state(now)

    @property
    def done(self) -> bool:
        return self.outcome is not None or (self.cancel_polls is not None and self.cancel_polls > 1)

    @property
    def run_timeline(self) -> Timeline:
        return self.timeline or Timeline(self.created_at, math.inf, None)


@dataclass
class DocaiStore(VendorStore):
    vendor = "google_docai"
    ops: dict[str, BatchOp] = field(default_factory=dict)

    def all_runs(self) -> Iterable[Any]:
        return [_RunView(op) for op in self.ops.values()]

    def unfinished(self, project_number: str) -> int:
        return sum(1 for op in self.ops.values() if op.project_number == project_number and not op.done)


@dataclass
class _RunView:
    op: BatchOp

    @property
    def id(self) -> str:
        return self.op.id

    @property
    def timeline(self) -> Timeline:
        return self.op.run_timeline

    def status(self, now: float) -> str:
        return self.op.state(now)


def _authorize(request: Request, state: SimState) -> Response | None:
    store: OAuthStore = request.app.state.oauth
    try:
        check_bearer(store, request.headers.get("authorization"), state.clock.time())
    except AuthError as exc:
        return error_response(401, f"Request had invalid authentication credentials. {exc}")
    except PermissionError as exc:
        return error_response(403, str(exc))
    return None


def _project(request: Request, state: SimState) -> Response | None:
    config = state.config
    project, location = request.path_params["project"], request.path_params["location"]
    if project not in (config.google_docai_project_id, config.google_docai_project_number) or (
        location != config.google_docai_location
    ):
        return error_response(403, f"Permission denied on resource project {project} (or it may not exist).")
    return None


def _int_field(value: Any, name: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"Invalid value at '{name}': expected a non-negative integer")
    return value


def _parse_input(body: dict[str, Any]) -> tuple[list[tuple[str, str | None]] | None, str | None]:
    inputs = body.get("inputDocuments")
    if not isinstance(inputs, dict) or len(inputs) != 1 or not set(inputs) <= {"gcsPrefix", "gcsDocuments"}:
        raise BadRequest("inputDocuments must hold exactly one of gcsPrefix or gcsDocuments (GCS input only)")
    if "gcsPrefix" in inputs:
        prefix = inputs["gcsPrefix"]
        uri = prefix.get("gcsUriPrefix") if isinstance(prefix, dict) else None
        if set(prefix or {}) - {"gcsUriPrefix"} or parse_gs_uri(uri) is None:
            raise BadRequest("inputDocuments.gcsPrefix.gcsUriPrefix must be a gs:// URI")
        return None, uri
    listed = inputs["gcsDocuments"]
    documents = listed.get("documents") if isinstance(listed, dict) else None
    if not isinstance(documents, list) or not documents:
        raise BadRequest("inputDocuments.gcsDocuments.documents must be a non-empty list")
    if len(documents) > MAX_FILES:
        raise BadRequest(f"at most {MAX_FILES} documents per batch request")
    out: list[tuple[str, str | None]] = []
    for i, doc in enumerate(documents):
        if not isinstance(doc, dict) or set(doc) - {"gcsUri", "mimeType"}:
            raise BadRequest(f"documents[{i}] must be {{gcsUri, mimeType}}")
        located = parse_gs_uri(doc.get("gcsUri"))
        if located is None or not located[1]:
            raise BadRequest(f"documents[{i}].gcsUri must be a gs://bucket/object URI")
        if doc.get("mimeType") not in _MIME_TYPES:
            raise BadRequest(f"documents[{i}].mimeType must be one of {', '.join(sorted(_MIME_TYPES))}")
        out.append((doc["gcsUri"], doc["mimeType"]))
    return out, None


def _parse_output(body: dict[str, Any]) -> tuple[tuple[str, str], int]:
    config = body.get("documentOutputConfig")
    gcs = (
        config.get("gcsOutputConfig")
        if isinstance(config, dict) and set(config) == {"gcsOutputConfig"}
        else None
    )
    if not isinstance(gcs, dict) or set(gcs) - {"gcsUri", "fieldMask", "shardingConfig"}:
        raise BadRequest("documentOutputConfig.gcsOutputConfig is required (GCS output only)")
    located = parse_gs_uri(gcs.get("gcsUri"))
    if located is None:
        raise BadRequest("documentOutputConfig.gcsOutputConfig.gcsUri must be a gs:// URI")
    bucket, prefix = located
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    sharding = gcs.get("shardingConfig", {})
    if not isinstance(sharding, dict) or set(sharding) - {"pagesPerShard", "pagesOverlap"}:
        raise BadRequest("shardingConfig is {pagesPerShard, pagesOverlap}")
    pages = _int_field(sharding.get("pagesPerShard", 0), "shardingConfig.pagesPerShard")
    _int_field(sharding.get("pagesOverlap", 0), "shardingConfig.pagesOverlap")
    return (bucket, prefix), pages


def _check_body(body: dict[str, Any]) -> None:
    unknown = sorted(set(body) - _BODY_FIELDS)
    if unknown:
        raise BadRequest(f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.')
    labels = body.get("labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and _LABEL_KEY_RE.match(k) and _LABEL_VALUE_RE.match(v)
        for k, v in labels.items()
    ):
        raise BadRequest(
            "labels: keys and values of at most 63 lowercase letters, digits, _ or -; "
            "keys start with a letter"
        )
    if not isinstance(body.get("skipHumanReview", False), bool):
        raise BadRequest("skipHumanReview must be a boolean")
    if not isinstance(body.get("processOptions", {}), dict):
        raise BadRequest("processOptions must be an object")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await bounded_body(request, MAX_BODY)
    if raw is None:
        raise BadRequest(f"request body over {MAX_BODY} bytes")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("Invalid JSON payload received.") from None
    if not isinstance(body, dict):
        raise BadRequest("Invalid JSON payload received: the BatchProcessRequest must be an object.")
    return body


def _processor(rest: str) -> bool:
    """Whether the path after ``processors/`` is ``ID:batchProcess`` or
    ``ID/processorVersions/V:batchProcess``."""
    head, sep, verb = rest.rpartition(":")
    if not sep or verb != "batchProcess":
        return False
    parts = head.split("/")
    if len(parts) == 1:
        return bool(_ID_RE.match(parts[0]))
    return len(parts) == 3 and parts[1] == "processorVersions" and all(_ID_RE.match(p) for p in parts[::2])


def operation_json(op: BatchOp, state: SimState, now: float) -> dict[str, Any]:
    current = op.state(now)
    metadata: dict[str, Any] = {
        "@type": _METADATA_TYPE,
        "state": current,
        "createTime": state.wall_iso(op.created_at),
        "updateTime": state.wall_iso(op.ended_at if op.ended_at is not None else now),
    }
    answer: dict[str, Any] = {"name": op.name, "metadata": metadata}
    if current == "CANCELLED":
        metadata["stateMessage"] = "The batch operation was cancelled."
        answer["done"] = True
        answer["error"] = {"code": CODE_CANCELLED, "message": "Operation was cancelled."}
    elif op.outcome is not None:
        metadata["individualProcessStatuses"] = op.statuses
        answer["done"] = True
        if op.outcome == "FAILED":
            metadata["stateMessage"] = op.error["message"] if op.error else "failed"
            answer["error"] = op.error
        else:
            answer["response"] = {"@type": _RESPONSE_TYPE}
    return answer


async def batch_process(request: Request) -> Response:
    state = sim_state(request)
    denied = _authorize(request, state) or _project(request, state)
    if denied is not None:
        return denied
    if not _processor(request.path_params["rest"]):
        return error_response(404, "The requested URL was not found on this server.")
    try:
        body = await _json_body(request)
        _check_body(body)
        documents, prefix = _parse_input(body)
        output, pages_per_shard = _parse_output(body)
    except BadRequest as exc:
        return error_response(400, str(exc))
    config, store = state.config, DocaiStore.of(request)
    number = config.google_docai_project_number
    held = (
        bool(config.google_docai_max_concurrent)
        and store.unfinished(number) >= config.google_docai_max_concurrent
    )
    if held and config.google_docai_over_quota == "429":
        return _quota_error(
            "Quota exceeded for quota metric 'Concurrent batch process requests' of service "
            "documentai.googleapis.com."
        )
    op = BatchOp(
        id=str(int(state.new_uuid().replace("-", "")[:16], 16)),
        project_number=number,
        location=config.google_docai_location,
        documents=documents,
        prefix=prefix,
        output=output,
        pages_per_shard=pages_per_shard,
        timeline=None if held else _timeline(state, documents, prefix),
        created_at=state.now(),
    )
    store.ops[op.id] = op
    # §3.9.2: the first answer has no done field.
    return JSONResponse(operation_json(op, state, state.now()))


def _timeline(
    state: SimState, documents: list[tuple[str, str | None]] | None, prefix: str | None
) -> Timeline:
    names = " ".join(uri for uri, _ in documents) if documents else (prefix or "")
    marker = Document(content=b"", filename=names)
    return state.new_timeline(slow=marker.outcome.slow, never_finishes=marker.outcome.ending is Ending.STUCK)


def _document_json(
    uri: str, mime: str, document: Document, pages: tuple[int, int], count: int, index: int
) -> dict[str, Any]:
    fields = document.fields()
    texts = [
        f"Invoice {fields['invoice_number']}\nTotal {fields['total']} USD\nPage {p}\n"
        for p in range(pages[0], pages[1] + 1)
    ]
    offset, page_json = 0, []
    for n, text in zip(range(pages[0], pages[1] + 1), texts, strict=True):
        segment = {"startIndex": str(offset), "endIndex": str(offset + len(text))}
        page_json.append(
            {
                "pageNumber": n,
                "dimension": {"width": 612.0, "height": 792.0, "unit": "points"},
                "layout": {"textAnchor": {"textSegments": [segment]}, "confidence": 0.98},
            }
        )
        offset += len(text)
    return {
        "uri": uri,
        "mimeType": mime,
        "text": "".join(texts),
        "pages": page_json,
        "entities": [
            {"type": "invoice_id", "mentionText": str(fields["invoice_number"]), "confidence": 0.97}
        ],
        "shardInfo": {"shardIndex": str(index), "shardCount": str(count), "textOffset": "0"},
    }


def _failed(uri: str, code: int, message: str) -> dict[str, Any]:
    return {"inputGcsSource": uri, "status": {"code": code, "message": message}, "outputGcsDestination": ""}


async def _process_one(
    storage: Storage, op: BatchOp, index: int, uri: str, mime: str | None
) -> dict[str, Any]:
    located = parse_gs_uri(uri)
    assert located is not None
    sample = await storage.gcs_sample(*located)
    if sample is None:
        return _failed(uri, CODE_NOT_FOUND, f"Document not found: {uri}")
    if sample.size > MAX_FILE_BYTES:
        return _failed(uri, CODE_INVALID_ARGUMENT, "Document exceeds the 1 GB batch file limit.")
    document = Document(content=sample.head, filename=located[1])
    if document.outcome.ending is Ending.FAIL or document.outcome.reject:
        return _failed(uri, CODE_INVALID_ARGUMENT, FAILURE_MESSAGE)
    found = len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", sample.head))
    pages = found or document.pages
    bucket, prefix = op.output
    folder = f"{prefix}{op.id}/{index}"
    stem = located[1].rsplit("/", 1)[-1].rsplit(".", 1)[0] or "document"
    ranges = shard_ranges(pages, op.pages_per_shard)
    for shard, span in enumerate(ranges):
        shard_json = _document_json(uri, mime or "application/pdf", document, span, len(ranges), shard)
        if not await storage.gcs_put_json(bucket, f"{folder}/{stem}-{shard}.json", shard_json):
            return _failed(uri, CODE_NOT_FOUND, f"Output bucket not found: gs://{bucket}")
    return {"inputGcsSource": uri, "status": {}, "outputGcsDestination": f"gs://{bucket}/{folder}"}


async def _materialize(request: Request, op: BatchOp, now: float) -> None:
    """Reads the inputs and writes the shards, once, when a poll first finds the operation finished."""
    storage: Storage = request.app.state.storage
    try:
        if op.documents is not None:
            inputs = op.documents
        else:
            assert op.prefix is not None
            bucket, name = parse_gs_uri(op.prefix) or ("", "")
            listed = await storage.gcs_list(bucket, name, MAX_FILES + 1)
            inputs = [(f"gs://{bucket}/{n}", None) for n in (listed or [])]
        if len(inputs) > MAX_FILES:
            op.error = {
                "code": CODE_INVALID_ARGUMENT,
                "message": f"more than {MAX_FILES} files under the prefix",
            }
        elif not inputs:
            op.error = {"code": CODE_INVALID_ARGUMENT, "message": "no documents found under the input prefix"}
        else:
            op.statuses = [
                await _process_one(storage, op, i, uri, mime) for i, (uri, mime) in enumerate(inputs)
            ]
            if all(s["status"].get("code") for s in op.statuses):
                op.error = {"code": CODE_INVALID_ARGUMENT, "message": "Every document in the batch failed."}
    except StorageDown:
        op.error = {"code": 13, "message": "storage emulator not running"}
    op.outcome = "FAILED" if op.error else "SUCCEEDED"
    op.ended_at = now


def _find(request: Request, state: SimState) -> BatchOp | Response:
    denied = _authorize(request, state) or _project(request, state)
    if denied is not None:
        return denied
    store, now = DocaiStore.of(request), state.now()
    op_id = request.path_params["op"]
    op = store.ops.get(op_id.removesuffix(":cancel") if request.method == "POST" else op_id)
    if (
        op is not None
        and op.ended_at is not None
        and now >= op.ended_at + state.config.google_docai_retention_s
    ):
        del store.ops[op.id]  # §3.5: an LRO disappears about 30 days after it finished
        op = None
    if op is None:
        return error_response(404, "Operation not found.")
    return op


def _release_held(store: DocaiStore, state: SimState) -> None:
    """Starts operations held in WAITING (``google_docai_over_quota=wait``) while fewer than the cap run."""
    cap = state.config.google_docai_max_concurrent
    for op in store.ops.values():
        if op.timeline is None and op.cancel_polls is None:
            running = sum(1 for o in store.ops.values() if not o.done and o.timeline is not None)
            if not cap or running < cap:
                op.timeline = _timeline(state, op.documents, op.prefix)


async def get_operation(request: Request) -> Response:
    state = sim_state(request)
    found = _find(request, state)
    if isinstance(found, Response):
        return found
    op, now = found, state.now()
    _release_held(DocaiStore.of(request), state)
    if op.cancel_polls is not None and op.outcome is None:
        op.cancel_polls += 1
        if op.cancel_polls == 2:
            op.ended_at = now
    elif op.outcome is None and op.phase(now) is Phase.FINISHED:
        await _materialize(request, op, now)
    return JSONResponse(operation_json(op, state, now))


async def cancel_operation(request: Request) -> Response:
    state = sim_state(request)
    if not request.path_params["op"].endswith(":cancel"):
        return error_response(404, "The requested URL was not found on this server.")
    found = _find(request, state)
    if isinstance(found, Response):
        return found
    if found.outcome is None and found.cancel_polls is None:
        found.cancel_polls = 0
    return JSONResponse({})


def routes() -> list[BaseRoute]:
    base = "/v1/projects/{project}/locations/{location}"
    return [
        Route(base + "/processors/{rest:path}", batch_process, methods=["POST"]),
        Route(base + "/operations/{op}", get_operation, methods=["GET"]),
        Route(base + "/operations/{op}", cancel_operation, methods=["POST"]),
    ]
