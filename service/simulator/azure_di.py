"""Azure AI Document Intelligence, REST 2024-11-30 (next-vendors.md §1), under ``/documentintelligence``.

The simulator's root is the resource endpoint: a client configured with ``endpoint = http://host:port``
sends ``POST {endpoint}/documentintelligence/documentModels/{modelId}:analyze?api-version=2024-11-30``
("Host template is ``{endpoint}/documentintelligence``", §1.1). The endpoint cannot carry a path of its
own: the official SDK (``azure-ai-documentintelligence`` 1.0.2, ``AnalyzeDocumentLROPoller.details``)
reads the result id out of ``Operation-Location`` with ``[^:]+://[^/]+/documentintelligence/.+/([^?/]+)``,
so the simulator serves these routes at the root's ``/documentintelligence``. Each rule
below cites the sentence of next-vendors.md it rests on, or says that the document is silent and which
readings the simulator plays.

Requests:

- "Every operation requires the query parameter ``api-version``" (§1.1): a request without it, or with any
  other value than ``2024-11-30``, is refused with 400 ``InvalidArgument`` (§1.10.2: "Reject requests without
  ``api-version`` (400 ``InvalidArgument``, an envelope with ``error.code``)"). An unknown version is the
  same refusal: not documented, one reading.
- Auth "either of two schemes": "an API key in header ``Ocp-Apim-Subscription-Key``" or "OAuth2 (Microsoft
  Entra ID)" (§1.1). The key must equal ``azure_di_api_key``; a ``Authorization: Bearer`` token must equal
  ``azure_di_bearer_token`` (the simulator issues no tokens: a test hands its client that string). Anything
  else is 401 (§1.10.2 "Reject a wrong key (401)"; §1.8: 401 is "NOT FOUND as documented", so its body is
  the documented error envelope with code ``401``, a reading).
- ``modelId`` "must match ``^[a-zA-Z0-9][a-zA-Z0-9._~-]{1,63}$``, with ``maxLength`` 64" (§1.2): else 400
  ``InvalidArgument``. A ``prebuilt-`` id must be one of :data:`PREBUILT_MODELS` (404 ``NotFound``
  otherwise); any other valid id plays a custom model (not documented).
- "The same route has two overloads": a JSON body "``{ "urlSource": "<uri>" }`` **or**
  ``{ "base64Source": "<base64>" }``" ("Either urlSource or base64Source must be specified"), and raw bytes
  with a ``Content-Type`` from the spec's ``consumes`` list (§1.2). Neither or both sources: 400
  ``InvalidRequest`` quoting the spec; a ``urlSource`` that is not an http(s) URI or a ``base64Source``
  that is not base64: 400 ``InvalidArgument``; an empty or rejected document: 400 ``InvalidRequest`` with
  ``innererror.code`` ``InvalidContent`` ("Inner codes seen in the sources: ``InvalidContent``", §1.8); any
  other content type: 415 ``UnsupportedMediaType`` (§1.10.2).
- Query parameters (§1.2): ``pages`` must match the documented pattern, ``stringIndexType`` and
  ``outputContentFormat`` their enums, ``features`` and ``output`` CSVs of their enums; ``locale`` and
  ``queryFields`` are free. A bad value is 400 ``InvalidArgument`` with the parameter as ``target``.

Answers:

- Submit: "**202 Accepted** with no body" and ``Operation-Location``, "**absolute** and already carries
  ``api-version``", with "a **uuid**" ``resultId`` (§1.3). "The spec's own 202 example shows **no**
  ``Retry-After``": ``azure_di_retry_after`` plays ``always``, ``never`` or ``random`` (drawn from the
  seeded result id), with ``azure_di_retry_after_s`` seconds.
- Poll: "**200** ``AnalyzeOperation``", with ``status``, ``createdDateTime`` and ``lastUpdatedDateTime``
  "**required**" (§1.4). The status walks ``notStarted`` (queued) → ``running`` → ``succeeded`` | ``failed``;
  ``azure_di_running_polls`` holds a finished operation at ``running`` for that many polls (the document is
  silent on how many polls it takes). "``canceled``" is in the enum but "the 2024-11-30 spec has no cancel
  operation" (§1.7), so it never appears. ``azure_di_unknown_status`` (for example ``skipped``, "future
  values can appear", §1.4) replaces ``running`` with that value and holds finished operations at it while
  it is set (§1.10.4).
- "A failed analysis is **HTTP 200** with ``"status":"failed"`` and an ``error`` object", "the rest are in
  ``error.details[]`` with a ``target``" (§1.4): a ``fail`` document ends so.
- Whether a poll 200 carries ``Retry-After`` is "**NOT FOUND**" (§1.4): the same ``azure_di_retry_after``
  mode plays both readings on polls of unfinished operations.
- "The result is **inline** in the poll response, as ``analyzeResult``", with "required fields:
  ``apiVersion, modelId, stringIndexType, content, pages``" and "There is **no pagination**" (§1.5);
  ``prebuilt-invoice`` also gives ``documents[]``, and ``features=queryFields`` a field per query.
- Delete: "``DELETE .../analyzeResults/{resultId}`` → **204**" (§1.5); afterwards the GET is 404
  ``NotFound`` (§1.10.6). Deleting an unfinished operation (the spec says "Mark the result ...
  for deletion" without a status rule: not documented; ``azure_di_delete_unfinished`` plays ``allow`` (204)
  or ``409`` ``Conflict``).
- Retention: "Your data is then deleted within 24 hours from the time an analyze request was submitted"
  (§1.5; the other staff answer counts from completion): the simulator counts ``azure_di_retention_s``
  from the submit, the earlier of the two, and then answers 404 ``NotFound`` ("[inference: 404 per the error
  table]").

Limits:

- "Analyze (POST) TPS ... 15" and "Get operations TPS ... 50", "Going over any of them gives **HTTP 429**"
  (§1.8): one bucket per key for submits (``azure_di_analyze_tps``) and one for reads and deletes
  (``azure_di_get_tps``), so a 429 on reads never stops submits. "do not call get-analyze-result more than
  **once every 2 seconds** for a given POST" (§1.4): a GET of one operation sooner than
  ``azure_di_min_poll_s`` after its last answered GET is 429 too (§1.10.5).
- "Whether a 429 carries ``Retry-After``, and what its body looks like: **NOT FOUND**" (§1.8): the body is
  the documented error envelope with code ``429``, and ``azure_di_429_retry_after`` plays ``always``,
  ``never`` or ``random`` (§1.10.5 "Include a mode that sends 429 **without** ``Retry-After``").
- Injected 5xx (``rate_5xx``) use the envelope: 503 ``ServiceUnavailable`` ("A transient error occurred.
  Try again."), 500 ``InternalServerError``; 502 is not in the table and uses code ``502`` (§1.8, §1.10.8).

Left out: batch analyze (§1.6, §1.10.7) and the ``/pdf`` and ``/figures`` side outputs: hookbridge's
``analyze`` operation uses neither.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, REJECT_MESSAGE, Document, Ending
from ._state import Phase, SimState, Timeline, TokenBucket, VendorStore, sim_state

API_VERSION = "2024-11-30"
PREBUILT_MODELS = frozenset(
    {
        "prebuilt-read",
        "prebuilt-layout",
        "prebuilt-invoice",
        "prebuilt-receipt",
        "prebuilt-idDocument",
        "prebuilt-businessCard",
        "prebuilt-contract",
        "prebuilt-healthInsuranceCard.us",
        "prebuilt-bankStatement.us",
        "prebuilt-check.us",
        "prebuilt-payStub.us",
        "prebuilt-tax.us",
        "prebuilt-creditCard",
        "prebuilt-marriageCertificate.us",
        "prebuilt-mortgage.us",
    }
)
_MODEL_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._~-]{1,63}$")
_PAGES = re.compile(r"^(\d+(-\d+)?)(,\s*(\d+(-\d+)?))*$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_STRING_INDEX_TYPES = ("textElements", "unicodeCodePoint", "utf16CodeUnit")
_FEATURES = (
    "ocrHighResolution",
    "languages",
    "barcodes",
    "formulas",
    "keyValuePairs",
    "styleFont",
    "queryFields",
)
_CONTENT_FORMATS = ("text", "markdown")
_OUTPUTS = ("pdf", "figures")
# The spec's ``consumes`` of the raw-bytes overload (§1.2).
BINARY_TYPES = frozenset(
    {
        "application/octet-stream",
        "application/pdf",
        "image/jpeg",
        "image/png",
        "image/tiff",
        "image/bmp",
        "image/heif",
        "text/html",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    }
)
_TRANSIENT = {
    500: ("InternalServerError", "An unexpected error occurred."),
    503: ("ServiceUnavailable", "A transient error occurred. Try again."),
}
RETRY_AFTER_MODES = ("always", "never", "random")


@dataclass
class AnalyzeOperation:
    id: str
    model_id: str
    document: Document
    timeline: Timeline
    options: dict[str, Any]
    polls: int = 0
    last_poll_at: float | None = None

    def status(self, now: float) -> str:
        phase = self.timeline.phase(now)
        if phase is Phase.QUEUED:
            return "notStarted"
        if phase is Phase.RUNNING:
            return "running"
        return "failed" if self.document.outcome.ending is Ending.FAIL else "succeeded"


@dataclass
class AzureDiStore(VendorStore):
    vendor = "azure_di"
    operations: dict[str, AnalyzeOperation] = field(default_factory=dict)
    # (request kind, the key as presented) -> its bucket; kinds are "analyze" and "get" (§1.8).
    buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict)

    def all_runs(self) -> Iterable[AnalyzeOperation]:
        return self.operations.values()

    def admit(self, kind: str, key: str, rate: float, now: float) -> bool:
        if rate <= 0:
            return True
        burst = max(1, math.ceil(rate))  # one second's worth: the limits are "TPS"
        bucket = self.buckets.get((kind, key))
        if bucket is None:
            bucket = self.buckets[(kind, key)] = TokenBucket(tokens=float(burst), at=now)
        return bucket.take(now, rate, burst)


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The ``DocumentIntelligenceErrorResponse`` envelope (§1.8): ``error`` is required."""
    return {"error": {"code": code, "message": message, **{k: v for k, v in extra.items() if v is not None}}}


def _error(
    status: int, code: str, message: str, *, target: str | None = None, inner: str | None = None
) -> JSONResponse:
    innererror = {"code": inner, "message": message} if inner is not None else None
    return JSONResponse(error_body(code, message, target=target, innererror=innererror), status_code=status)


def _plays_retry_after(mode: str, seed_text: str) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    # "random": drawn from the seeded id, so a given seed answers the same way every time.
    return int(seed_text.replace("-", "")[-2:], 16) % 2 == 0


def fault_response(status: int, state: SimState, retry_after_s: float | None = None) -> Response:
    """A 429 or an injected 5xx in the documented envelope (§1.8); 429's headers are a reading (NOT FOUND)."""
    if status == 429:
        wait = max(1, math.ceil(retry_after_s if retry_after_s is not None else 1.0))
        response = _error(429, "429", f"Rate limit is exceeded. Try again in {wait} seconds.")
        if _plays_retry_after(state.config.azure_di_429_retry_after, state.new_uuid()):
            response.headers["retry-after"] = str(wait)
        return response
    code, message = _TRANSIENT.get(status, (str(status), "Bad gateway."))
    return _error(status, code, message)


def _authorized(request: Request, state: SimState) -> bool:
    config = state.config
    key = request.headers.get("ocp-apim-subscription-key")
    if key is not None:
        return key == config.azure_di_api_key
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and token.strip() == config.azure_di_bearer_token


def _key_of(request: Request) -> str:
    return request.headers.get("ocp-apim-subscription-key") or request.headers.get("authorization", "")


def _common(request: Request, state: SimState) -> Response | None:
    """Auth, then ``api-version``: the checks every operation makes."""
    if not _authorized(request, state):
        return _error(
            401,
            "401",
            "Access denied due to invalid subscription key or wrong API endpoint.",
        )
    version = request.query_params.get("api-version")
    if version is None:
        return _error(
            400, "InvalidArgument", "The api-version query parameter is required.", target="api-version"
        )
    if version != API_VERSION:
        return _error(
            400,
            "InvalidArgument",
            f"The api-version {version!r} is not supported; use {API_VERSION}.",
            target="api-version",
        )
    return None


class _Refusal(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _csv(request: Request, name: str, allowed: tuple[str, ...] | None) -> list[str] | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    values = [v.strip() for v in raw.split(",")]
    if not all(values) or (allowed is not None and any(v not in allowed for v in values)):
        detail = f"one or more of {', '.join(allowed)}" if allowed else "a comma-separated list"
        raise _Refusal(_error(400, "InvalidArgument", f"{name} must be {detail}.", target=name))
    return values


def _enum(request: Request, name: str, allowed: tuple[str, ...], default: str) -> str:
    value = request.query_params.get(name, default)
    if value not in allowed:
        raise _Refusal(
            _error(400, "InvalidArgument", f"{name} must be one of {', '.join(allowed)}.", target=name)
        )
    return value


def _options(request: Request) -> dict[str, Any]:
    pages = request.query_params.get("pages")
    if pages is not None and not _PAGES.match(pages):
        raise _Refusal(
            _error(400, "InvalidArgument", "pages must be page ranges such as 1-3,5,7-9.", target="pages")
        )
    return {
        "pages": pages,
        "locale": request.query_params.get("locale"),
        "stringIndexType": _enum(request, "stringIndexType", _STRING_INDEX_TYPES, "textElements"),
        "features": _csv(request, "features", _FEATURES) or [],
        "queryFields": _csv(request, "queryFields", None) or [],
        "outputContentFormat": _enum(request, "outputContentFormat", _CONTENT_FORMATS, "text"),
        "output": _csv(request, "output", _OUTPUTS) or [],
    }


_NO_SOURCE = "Either urlSource or base64Source must be specified."


async def _document(request: Request) -> Document:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise _Refusal(_error(400, "InvalidRequest", "The request body is not valid JSON.")) from None
        if not isinstance(body, dict):
            raise _Refusal(_error(400, "InvalidRequest", "The request body must be a JSON object."))
        url, encoded = body.get("urlSource"), body.get("base64Source")
        if (url is None) == (encoded is None):
            raise _Refusal(_error(400, "InvalidRequest", _NO_SOURCE))
        if url is not None:
            if not isinstance(url, str) or not url.startswith(("https://", "http://")):
                raise _Refusal(
                    _error(400, "InvalidArgument", "urlSource must be an absolute URI.", target="urlSource")
                )
            return Document(content=url.encode(), url=url, filename=url.rstrip("/").rsplit("/", 1)[-1])
        if not isinstance(encoded, str):
            raise _Refusal(
                _error(400, "InvalidArgument", "base64Source must be a base64 string.", target="base64Source")
            )
        try:
            content = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise _Refusal(
                _error(400, "InvalidArgument", "base64Source is not valid base64.", target="base64Source")
            ) from None
        return Document(content=content)
    if content_type in BINARY_TYPES:
        return Document(content=await request.body(), media_type=content_type)
    raise _Refusal(
        _error(415, "UnsupportedMediaType", f"Content type {content_type or '(none)'!r} is not supported.")
    )


async def analyze(request: Request) -> Response:
    state, store = sim_state(request), AzureDiStore.of(request)
    refused = _common(request, state)
    if refused is not None:
        return refused
    config = state.config
    model_id = request.path_params["model_id"]
    if not _MODEL_ID.match(model_id):
        return _error(400, "InvalidArgument", "The model id is not valid.", target="modelId")
    if model_id.startswith("prebuilt-") and model_id not in PREBUILT_MODELS:
        return _error(404, "NotFound", f"Model {model_id!r} was not found.", inner="ModelNotFound")
    now = state.now()
    if not store.admit("analyze", _key_of(request), config.azure_di_analyze_tps, now):
        return fault_response(429, state, 1.0 / config.azure_di_analyze_tps)
    try:
        options = _options(request)
        document = await _document(request)
    except _Refusal as refusal:
        return refusal.response
    if not document.content:
        return _error(400, "InvalidRequest", "The document is empty.", inner="InvalidContent")
    if document.outcome.reject:
        return _error(400, "InvalidRequest", REJECT_MESSAGE, inner="InvalidContent")
    timeline = state.new_timeline(
        slow=document.outcome.slow, never_finishes=document.outcome.ending is Ending.STUCK
    )
    operation = AnalyzeOperation(
        id=state.new_uuid(), model_id=model_id, document=document, timeline=timeline, options=options
    )
    store.operations[operation.id] = operation
    location = str(request.url_for("azure_di_result", model_id=model_id, result_id=operation.id))
    response = Response(status_code=202)
    response.headers["operation-location"] = f"{location}?api-version={API_VERSION}"
    if _plays_retry_after(config.azure_di_retry_after, operation.id):
        response.headers["retry-after"] = str(config.azure_di_retry_after_s)
    return _echo(request, response)


def _echo(request: Request, response: Response) -> Response:
    """ "``x-ms-client-request-id`` ... is echoed on some operations" (§1.1): echoed on all of them here."""
    client_id = request.headers.get("x-ms-client-request-id")
    if client_id is not None:
        response.headers["x-ms-client-request-id"] = client_id
    return response


def _page_numbers(operation: AnalyzeOperation) -> list[int]:
    total = operation.document.pages
    spec = operation.options["pages"]
    if spec is None:
        return list(range(1, total + 1))
    wanted: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        wanted.update(range(int(low), int(high or low) + 1))
    return sorted(n for n in wanted if 1 <= n <= total)


def analyze_result(operation: AnalyzeOperation) -> dict[str, Any]:
    """The inline ``analyzeResult`` (§1.5), derived from the document's hash."""
    document, options = operation.document, operation.options
    fields = document.fields()
    markdown = options["outputContentFormat"] == "markdown"
    numbers = _page_numbers(operation)
    lines = [f"Invoice {fields['invoice_number']}", f"Total {fields['total']} {fields['currency']}"]
    page_texts = [f"{'# ' if markdown else ''}{lines[0]}\n{lines[1]} (page {n})" for n in numbers]
    content = "\n\n".join(page_texts)
    pages: list[dict[str, Any]] = []
    offset = 0
    for number, text in zip(numbers, page_texts, strict=True):
        pages.append(
            {
                "pageNumber": number,
                "angle": 0.0,
                "width": 8.5,
                "height": 11.0,
                "unit": "inch",
                "words": [
                    {"content": word, "span": {"offset": offset, "length": len(word)}, "confidence": 0.99}
                    for word in text.split()[:3]
                ],
                "lines": [
                    {"content": text.splitlines()[0], "spans": [{"offset": offset, "length": len(text)}]}
                ],
                "spans": [{"offset": offset, "length": len(text)}],
            }
        )
        offset += len(text) + 2
    result: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "modelId": operation.model_id,
        "stringIndexType": options["stringIndexType"],
        "content": content,
        "contentFormat": "markdown" if markdown else "text",
        "pages": pages,
        "paragraphs": [
            {"content": text, "spans": [{"offset": 0, "length": len(text)}]} for text in page_texts[:1]
        ],
        "warnings": [],
    }
    document_fields: dict[str, Any] = {}
    if operation.model_id == "prebuilt-invoice":
        document_fields = {
            "InvoiceId": {
                "type": "string",
                "valueString": fields["invoice_number"],
                "content": fields["invoice_number"],
                "confidence": 0.98,
            },
            "InvoiceTotal": {
                "type": "currency",
                "valueCurrency": {"amount": fields["total"], "currencyCode": fields["currency"]},
                "content": f"{fields['total']}",
                "confidence": 0.97,
            },
        }
    if "queryFields" in options["features"]:
        for name in options["queryFields"]:
            document_fields[name] = {"type": "string", "valueString": f"{name}-{document.sha256[:6]}"}
    if document_fields:
        result["documents"] = [
            {
                "docType": "invoice" if operation.model_id == "prebuilt-invoice" else operation.model_id,
                "fields": document_fields,
                "confidence": 0.95,
                "spans": [{"offset": 0, "length": len(content)}],
            }
        ]
    if options["locale"] is not None:
        result["languages"] = [{"locale": options["locale"], "spans": [], "confidence": 0.9}]
    return result


def _padded(result: dict[str, Any], pad_bytes: int) -> dict[str, Any]:
    """``analyzeResult`` grown by about ``pad_bytes`` of filler paragraphs (``azure_di_result_pad_bytes``)."""
    if pad_bytes <= 0:
        return result
    line = "lorem ipsum dolor sit amet " * 37  # 999 characters
    count = pad_bytes // len(line) + 1  # each takes a few bytes more than its line: at least pad_bytes
    filler = [{"content": line, "spans": [{"offset": 0, "length": len(line)}]} for _ in range(count)]
    return {**result, "paragraphs": [*result.get("paragraphs", []), *filler]}


def _failure() -> dict[str, Any]:
    # "the top-level ``error.code`` is the most severe one, and the rest are in ``error.details[]`` with a
    # ``target``" (§1.4, the AZ-ERR example).
    return {
        "code": "InvalidRequest",
        "message": "Invalid request.",
        "innererror": {"code": "InvalidContent", "message": FAILURE_MESSAGE},
        "details": [{"code": "InvalidContent", "message": FAILURE_MESSAGE, "target": "1"}],
    }


def operation_json(operation: AnalyzeOperation, state: SimState, now: float, status: str) -> dict[str, Any]:
    timeline = operation.timeline
    updated = {"notStarted": timeline.created_at, "running": timeline.starts_at}.get(
        status,
        timeline.finishes_at if timeline.finishes_at is not None and now >= timeline.finishes_at else now,
    )
    body: dict[str, Any] = {
        "status": status,
        "createdDateTime": state.wall_iso(timeline.created_at),
        "lastUpdatedDateTime": state.wall_iso(min(updated, now)),
    }
    if status == "succeeded":
        body["analyzeResult"] = _padded(analyze_result(operation), state.config.azure_di_result_pad_bytes)
    elif status == "failed":
        body["error"] = _failure()
    return body


def _lookup(request: Request, state: SimState) -> AnalyzeOperation | Response:
    refused = _common(request, state)
    if refused is not None:
        return refused
    store = AzureDiStore.of(request)
    config = state.config
    now = state.now()
    if not store.admit("get", _key_of(request), config.azure_di_get_tps, now):
        return fault_response(429, state, 1.0 / config.azure_di_get_tps)
    result_id = request.path_params["result_id"]
    operation = store.operations.get(result_id) if _UUID.match(result_id) else None
    if (
        operation is None
        or operation.model_id != request.path_params["model_id"]
        or now >= operation.timeline.created_at + config.azure_di_retention_s
    ):
        return _error(404, "NotFound", "Resource not found.", inner="AnalyzeResultNotFound")
    return operation


async def get_result(request: Request) -> Response:
    state = sim_state(request)
    found = _lookup(request, state)
    if isinstance(found, Response):
        return _echo(request, found)
    operation, config, now = found, state.config, state.now()
    if operation.last_poll_at is not None and now - operation.last_poll_at < config.azure_di_min_poll_s:
        return _echo(
            request, fault_response(429, state, operation.last_poll_at + config.azure_di_min_poll_s - now)
        )
    operation.last_poll_at = now
    operation.polls += 1
    status = operation.status(now)
    if status in ("succeeded", "failed") and operation.polls <= config.azure_di_running_polls:
        status = "running"
    if status != "notStarted" and config.azure_di_unknown_status:
        # Held there while the knob is set: the adapter must keep polling and never call it finished.
        status = config.azure_di_unknown_status
    response = JSONResponse(operation_json(operation, state, now, status))
    if status not in ("succeeded", "failed") and _plays_retry_after(
        config.azure_di_retry_after, operation.id
    ):
        response.headers["retry-after"] = str(config.azure_di_retry_after_s)
    return _echo(request, response)


async def delete_result(request: Request) -> Response:
    state = sim_state(request)
    found = _lookup(request, state)
    if isinstance(found, Response):
        return _echo(request, found)
    unfinished = found.status(state.now()) in ("notStarted", "running")
    if unfinished and state.config.azure_di_delete_unfinished == "409":
        # The other reading of a silent spec (config.py): an operation in flight cannot be deleted yet.
        return _echo(request, _error(409, "Conflict", "The operation is still running."))
    del AzureDiStore.of(request).operations[found.id]
    return _echo(request, Response(status_code=204))


async def not_found(request: Request) -> Response:
    state = sim_state(request)
    refused = _common(request, state)
    return refused or _error(404, "NotFound", "Resource not found.")


def routes() -> list[BaseRoute]:
    return [
        Route("/documentModels/{model_id}:analyze", analyze, methods=["POST"]),
        Route(
            "/documentModels/{model_id}/analyzeResults/{result_id}",
            get_result,
            methods=["GET"],
            name="azure_di_result",
        ),
        Route(
            "/documentModels/{model_id}/analyzeResults/{result_id}",
            delete_result,
            methods=["DELETE"],
        ),
        Route("/{rest:path}", not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
