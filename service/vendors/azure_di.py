"""Azure AI Document Intelligence, REST 2024-11-30 (shared/vendors/next-vendors.md §1).

Submit ``POST {endpoint}/documentintelligence/documentModels/{modelId}:analyze?api-version=...`` with the
document by URL (``{"urlSource": ...}``), as base64 (``{"base64Source": ...}``) or as the raw bytes, and
the run's options as query parameters; the answer is a 202 whose ``Operation-Location`` header is the
operation to poll. Poll exactly that URL: the status, and on ``succeeded`` the whole ``analyzeResult``
inline, which is the run's result. Zero retention deletes the result with ``DELETE`` on the same URL.

Each rule and the sentence of next-vendors.md it rests on (§ numbers are that document's):

- Path and query: "``POST {endpoint}/documentintelligence/documentModels/{modelId}:analyze?api-version=
  2024-11-30``" (§1.2); "Every operation requires the query parameter ``api-version``" (§1.1), taken from
  ``HOOKBRIDGE_AZURE_DI_API_VERSION``. Options (§1.2): ``pages`` (its pattern), ``locale``, ``features``
  (CSV of the enum), ``queryFields`` (CSV), ``outputContentFormat`` = ``text`` | ``markdown``. ``model_id``
  "must match ``^[a-zA-Z0-9][a-zA-Z0-9._~-]{1,63}$``" (§1.2): checked at the API, 422 before any request.
- The key: "an API key in header ``Ocp-Apim-Subscription-Key``" (§1.1).
- The document: "``{ "urlSource": "<uri>" }`` **or** ``{ "base64Source": "<base64>" }``" and "**Raw
  bytes** ... with ``Content-Type`` set to one of" the spec's list (§1.2). A URL goes as ``urlSource``;
  bytes go raw (``HOOKBRIDGE_AZURE_DI_UPLOAD=bytes``, a third less on the wire than base64) or as
  ``base64Source`` (``base64``), with the document's media type when the list has it, else
  ``application/octet-stream`` (in the list: the service reads the content).
- The 202: "**202 Accepted** with no body and two headers": ``Operation-Location``, "**absolute** and
  already carries ``api-version``", whose last path segment is "``resultId``, which is a **uuid**" (§1.3),
  and ``Retry-After``, which "can indicate how long the client should wait before polling" and "can
  therefore be missing" (§1.3). The adapter reads the header, never a body. The URL must be on the
  configured endpoint (same scheme, host, port and path prefix, ``vendors.http.same_origin``): our key goes
  with every poll of it, and only there. A 202 without a usable Operation-Location may have created an
  operation that cannot be polled: :class:`VendorSubmitUncertain` (the run fails
  ``vendor_submit_ambiguous``, nothing sent again).
- Poll "exactly that URL. Do not rebuild it from ``resultId`` with a different api-version" (§1.9).
- Cadence: "do not call get-analyze-result more than **once every 2 seconds** for a given POST" (§1.4):
  ``poll_initial_s`` 2 s, the minimum; ``Retry-After`` on the 202 (and on a poll 200, whose presence "is
  **NOT FOUND**; the adapter should honour it if present", §1.4) is the server-directed delay.
- Statuses (§1.4): ``notStarted`` queued, ``running`` running, ``succeeded``, ``failed``, ``canceled``.
  "The enum has ``modelAsString: true``, so future values can appear [inference: treat unknown values as
  non-terminal]": any other value (``skipped``, which the spec uses only for batch details, and
  ``completed``, which "The 2024-11-30 spec does not have") is running, until ``MAX_RUN_S``.
- "A failed analysis is **HTTP 200** with ``"status":"failed"`` and an ``error`` object", the most severe
  code on top and "the rest are in ``error.details[]``" (§1.4): the run fails ``vendor_failed`` with the
  top code and message; the whole ``error`` is kept as the run's error details.
- "The result is **inline** in the poll response, as ``analyzeResult``" with "**no pagination**" (§1.5):
  the run's result. A ``succeeded`` without ``analyzeResult`` (the spec marks it optional) says nothing
  of the result: a transient fault, polled again.
- "max OCR JSON response 500 MB" (§1.5): the poll's answer is read up to the vendor's answer cap
  (``HOOKBRIDGE_AZURE_DI_MAX_ANSWER_BYTES``); past it the run fails ``result_too_large``.
- Delete: "``DELETE .../documentModels/{modelId}/analyzeResults/{resultId}?api-version=2024-11-30`` →
  **204**" (§1.5): the Operation-Location URL itself. Only a 204 (any 2xx) is a deletion; a 404 whose
  envelope says ``NotFound`` for the URL we polled means the result is already gone (deleted or past "within
  24 hours", §1.5), which is what zero retention asks. Anything else is "not deleted".
- Cancel: "the 2024-11-30 spec has no cancel operation" (§1.7): ``supports_cancel = False``.
- Idempotency: "no idempotency key or de-duplication is documented. Two POSTs make two operations"
  (§1.7), and ``x-ms-client-request-id`` "is a tracing ID, not an idempotency key" (§1.1):
  ``submit_idempotent = False``. A submit cut after it went out is never sent again.
- Errors: the envelope ``{"error": {"code", "message", "innererror"}}`` (§1.8). 400 ``InvalidRequest`` /
  ``InvalidArgument``, 403, 404 (an unknown model), 415 on submit: ``vendor_rejected`` with the vendor's
  code. 401 "NOT FOUND as documented" (§1.8): refused, the same. "``ServiceUnavailable`` ("A transient
  error occurred. Try again.")" and 500: transient, the submit sent again (§1.10.8: "The adapter retries
  without resubmitting a job that was already accepted": a 5xx accepted nothing). A 404 on a poll:
  the operation is gone ("[inference: 404 per the error table]", §1.5): ``vendor_expired``.
- Limits: "Analyze (POST) TPS ... 15" and "Get operations TPS ... 50" (§1.8), two budgets
  (``AZURE_DI_SUBMIT_MAX_RPS``, ``AZURE_DI_POLL_MAX_RPS``), each with its own pause after a 429; "on 429
  while polling, back off exponentially, for example with a **2-5-13-34** second pattern" (§1.4), used
  when the 429 has no ``Retry-After`` ("Whether a 429 carries ``Retry-After`` ... **NOT FOUND**", §1.8).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import quote

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from service.vendors import _largejson
from service.vendors.base import (
    CANCELED,
    FAILED,
    NO_CALL,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Call,
    Kind,
    KindBudget,
    PollResult,
    ResultFile,
    SubmitRequest,
    Submitted,
    VendorDefaults,
    VendorExpired,
    VendorRejected,
    VendorResultTooLarge,
    VendorSetting,
    VendorSpec,
    VendorSubmitUncertain,
    VendorTransient,
)
from service.vendors.http import (
    raise_for_transient,
    retry_after_seconds,
    same_origin,
    submit_errors,
    transport_errors,
)

API_VERSION = "2024-11-30"
STATUSES = {
    "notStarted": QUEUED,
    "running": RUNNING,
    "succeeded": SUCCEEDED,
    "failed": FAILED,
    "canceled": CANCELED,
}
MODEL_ID = r"^[a-zA-Z0-9][a-zA-Z0-9._~-]{1,63}$"
PAGES = r"^(\d+(-\d+)?)(,\s*(\d+(-\d+)?))*$"
FEATURES = (
    "ocrHighResolution",
    "languages",
    "barcodes",
    "formulas",
    "keyValuePairs",
    "styleFont",
    "queryFields",
)
# The spec's ``consumes`` of the raw-bytes overload (§1.2).
RAW_TYPES = frozenset(
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
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
# Where the run's adapter state keeps the operation's URL.
OPERATION_KEY = "operation_location"
# "max OCR JSON response 500 MB" (§1.5): the answer cap's default (HOOKBRIDGE_AZURE_DI_MAX_ANSWER_BYTES).
MAX_ANSWER_BYTES = 500 * 1024 * 1024
# A poll's answer past this many bytes goes on to a temporary file instead of memory: an unfinished
# operation's answer is a few hundred bytes; a finished one carries the whole analyzeResult.
SPILL_BYTES = 4 * 1024 * 1024
# An analyzeResult up to this many bytes is handed over as JSON, as every vendor's result is (the store
# keeps a result whole, up to MAX_DOCUMENT_BYTES: the worker passes that); a larger one as a ResultFile.
INLINE_MAX_BYTES = 50 * 1024 * 1024
_ERROR_BODY_BYTES = 64 * 1024


# The pure part: requests and answers -----------------------------------------------------------------


def analyze_query(options: Mapping[str, Any], api_version: str) -> dict[str, str]:
    """The analyze request's query parameters from a run's options (already validated at the API)."""
    query = {"api-version": api_version}
    features = list(options.get("features") or [])
    query_fields = list(options.get("query_fields") or [])
    if query_fields and "queryFields" not in features:
        # The document lists ``features`` (with ``queryFields``) and ``queryFields`` separately and is
        # silent on one without the other; the service's query fields are a feature, so asking for fields
        # turns it on rather than sending a request whose fields would be ignored.
        features.append("queryFields")
    if options.get("pages"):
        query["pages"] = str(options["pages"])
    if options.get("locale"):
        query["locale"] = str(options["locale"])
    if features:
        query["features"] = ",".join(features)
    if query_fields:
        query["queryFields"] = ",".join(query_fields)
    if options.get("output_content_format"):
        query["outputContentFormat"] = str(options["output_content_format"])
    return query


def raw_content_type(media_type: str) -> str:
    """The raw upload's ``Content-Type``: the document's own when the spec lists it, else octet-stream."""
    base = media_type.split(";")[0].strip().lower()
    return base if base in RAW_TYPES else "application/octet-stream"


def operation_of(location: str | None, base: httpx.URL) -> tuple[str, str]:
    """``(resultId, url)`` from a 202's ``Operation-Location``; :class:`ValueError` saying why not."""
    if not location:
        raise ValueError("no Operation-Location header")
    try:
        absolute = not httpx.URL(location).is_relative_url
    except httpx.InvalidURL:
        absolute = False
    if not absolute or not same_origin(location, base):
        raise ValueError(f"Operation-Location {location[:200]!r} is not on the configured endpoint")
    url = httpx.URL(location)
    prefix = base.path.rstrip("/") + "/documentintelligence/documentModels/"
    parts = url.path.removeprefix(prefix).split("/")
    if not url.path.startswith(prefix) or len(parts) != 3 or parts[1] != "analyzeResults":
        raise ValueError(f"Operation-Location {location[:200]!r} is not an analyze operation")
    result_id = parts[2]
    if not _UUID.match(result_id):
        raise ValueError(f"Operation-Location's resultId {result_id[:80]!r} is not a uuid")
    return result_id, location


def azure_error(body: Any) -> tuple[str, dict[str, Any] | None]:
    """The message of an ``error`` object (§1.8): its message, with its code and the innermost code."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "", None
    message = error.get("message") if isinstance(error.get("message"), str) else ""
    codes = [error["code"]] if isinstance(error.get("code"), str) else []
    inner = error.get("innererror")
    depth = 0
    while isinstance(inner, dict) and depth < 8:  # ``innererror`` can nest (§1.8)
        if isinstance(inner.get("code"), str):
            codes.append(inner["code"])
        inner = inner.get("innererror")
        depth += 1
    said = message or "the vendor reported an error"
    if codes:
        said = f"{said} ({'/'.join(dict.fromkeys(codes))})"
    return said, error


def error_text(response: httpx.Response) -> str:
    """An error answer in the vendor's words: the envelope's message and codes, else the body's start."""
    try:
        body = response.json()
    except ValueError:
        body = None
    said, _ = azure_error(body)
    if said:
        return said
    text = response.text.strip()
    return text[:300] if text else f"HTTP {response.status_code}"


def error_code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def poll_result(
    operation: Any, retry_after_s: float | None = None, kept: ResultFile | None = None
) -> PollResult:
    """An ``AnalyzeOperation`` (§1.4) in our words; :class:`VendorTransient` for one that says nothing.
    ``kept``: the ``analyzeResult`` already cut out to a file (a large answer), the rest in ``operation``."""
    if not isinstance(operation, dict):
        raise VendorTransient("the operation answer is not a JSON object")
    vendor_status = operation.get("status")
    if not isinstance(vendor_status, str) or not vendor_status:
        # ``status`` is required (§1.4): an answer without it says nothing of the run.
        raise VendorTransient("the operation answer has no status")
    status = STATUSES.get(vendor_status, RUNNING)  # an unknown status is never terminal
    if status == FAILED:
        message, details = azure_error(operation)
        return PollResult(
            FAILED, vendor_status, error=message or "the analysis failed", error_details=details
        )
    if status == SUCCEEDED:
        if kept is not None:
            return PollResult(SUCCEEDED, vendor_status, result=kept)
        result = operation.get("analyzeResult")
        if not isinstance(result, dict):
            raise VendorTransient("the operation succeeded but carries no analyzeResult")
        return PollResult(SUCCEEDED, vendor_status, result=result)
    if status == CANCELED:
        return PollResult(CANCELED, vendor_status)
    return PollResult(status, vendor_status, retry_after_s=retry_after_s)


# The calls --------------------------------------------------------------------------------------------


class AzureDiAdapter:
    name = "azure_di"
    # "the 2024-11-30 spec has no cancel operation for analyze or analyzeBatch" (§1.7).
    supports_cancel = False
    # "no idempotency key or de-duplication is documented. Two POSTs make two operations" (§1.7): a submit
    # that may have created an operation is never sent again (service/worker/decide.py).
    submit_idempotent = False

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        api_version: str = API_VERSION,
        upload: str = "bytes",
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        inline_max_bytes: int = INLINE_MAX_BYTES,
    ) -> None:
        self._client = client
        self._api_version = api_version
        self._inline_max = inline_max_bytes
        self._upload = upload
        self._max_answer = max_answer_bytes

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        model_id = str(request.options.get("model_id") or "")
        if not re.match(MODEL_ID, model_id):
            raise VendorRejected("options.model_id is missing or not a model id")
        path = f"/documentintelligence/documentModels/{quote(model_id, safe='')}:analyze"
        query = analyze_query(request.options, self._api_version)
        doc = request.document
        kind = call.extensions(Kind.SUBMIT)
        with submit_errors():
            if doc.url is not None:
                response = await self._client.post(
                    path, params=query, json={"urlSource": doc.url}, extensions=kind
                )
            elif self._upload == "base64":
                encoded = base64.b64encode(doc.content or b"").decode()
                response = await self._client.post(
                    path, params=query, json={"base64Source": encoded}, extensions=kind
                )
            else:
                response = await self._client.post(
                    path,
                    params=query,
                    content=doc.content or b"",
                    headers={"Content-Type": raw_content_type(doc.media_type)},
                    extensions=kind,
                )
        # 429 and 5xx accepted nothing: "A transient error occurred. Try again." (§1.8).
        raise_for_transient(response)
        if response.status_code != 202:
            if response.is_success:  # a 2xx that is not the documented 202 may still have started one
                raise _uncertain(response, "a 202 with Operation-Location")
            raise VendorRejected(error_text(response), status_code=response.status_code)
        try:
            result_id, location = operation_of(
                response.headers.get("operation-location"), self._client.base_url
            )
        except ValueError as exc:
            raise _uncertain(response, str(exc)) from None
        return Submitted(
            vendor_run_id=result_id,
            vendor_status="notStarted",
            state={OPERATION_KEY: location},
            retry_after_s=retry_after_seconds(response.headers.get("retry-after")),
        )

    def _operation_url(self, state: Mapping[str, Any]) -> str:
        location = state.get(OPERATION_KEY)
        if not isinstance(location, str) or not same_origin(location, self._client.base_url):
            # Only what submit() checked is ever kept; a state that lost it cannot be polled safely.
            raise VendorRejected("the run's Operation-Location is missing or not on the configured endpoint")
        return location

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        url = self._operation_url(state)
        response, body, spilled = await self._get_operation(url, call)
        self._check(response)
        retry_after = retry_after_seconds(response.headers.get("retry-after"))
        if spilled is None:
            try:
                operation = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise VendorTransient("the operation answer is not JSON") from exc
            return poll_result(operation, retry_after)
        try:
            return await asyncio.to_thread(self._from_file, spilled, retry_after, self._inline_max)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(spilled)

    @staticmethod
    def _from_file(path: str, retry_after: float | None, inline_max: int) -> PollResult:
        """A large answer: ``analyzeResult`` cut out to a file of its own, the rest read (a thread's work:
        about 0.5 s for 55 MB). A result up to ``inline_max`` bytes is read back as JSON, as every
        vendor's result is kept today; a larger one stays a :class:`ResultFile`."""
        try:
            split = _largejson.split_member(path, "analyzeResult")
        except _largejson.NotAnObject as exc:
            raise VendorTransient(f"the operation answer is not usable JSON: {exc}") from None
        kept = None
        if split.path is not None and split.size <= inline_max:
            try:
                with open(split.path, "rb") as f:
                    split.head["analyzeResult"] = orjson.loads(f.read())
            finally:
                _remove(split.path)
            return poll_result(split.head, retry_after)
        if split.path is not None:
            kept = ResultFile(path=split.path, media_type="application/json", size=split.size)
        try:
            polled = poll_result(split.head, retry_after, kept)
        except BaseException:
            if split.path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(split.path)
            raise
        if split.path is not None and polled.result is not kept:  # not succeeded: the file is not the result
            with contextlib.suppress(OSError):
                os.unlink(split.path)
        return polled

    async def _get_operation(self, url: str, call: Call) -> tuple[httpx.Response, bytes, str | None]:
        """GET the operation, read no further than the answer cap: in memory up to :data:`SPILL_BYTES`,
        on to a temporary file past it (whose path is returned, the caller's to remove)."""
        body = bytearray()
        path: str | None = None
        with transport_errors():
            try:
                async with self._client.stream("GET", url, extensions=call.extensions(Kind.POLL)) as response:
                    cap = self._max_answer if response.is_success else _ERROR_BODY_BYTES
                    declared = response.headers.get("content-length", "")
                    if response.is_success and declared.isdigit() and int(declared) > cap:
                        raise _too_large(int(declared), cap)
                    size = 0
                    out = None
                    try:
                        async for chunk in response.aiter_bytes():
                            size += len(chunk)
                            if size > cap:
                                if not response.is_success:
                                    break  # an error's start says enough
                                raise _too_large(size, cap)
                            if out is None and size <= SPILL_BYTES:
                                body += chunk
                                continue
                            if out is None:
                                fd, path = tempfile.mkstemp(prefix="hookbridge-answer-")
                                out = os.fdopen(fd, "wb")
                                out.write(body)
                                body.clear()
                            out.write(chunk)
                    finally:
                        if out is not None:
                            out.close()
            except httpx.DecodingError as exc:
                _remove(path)
                raise VendorTransient(f"the answer does not decode: {exc}") from exc
            except BaseException:
                _remove(path)
                raise
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        read = httpx.Response(response.status_code, headers=headers, content=bytes(body))
        if not response.is_success:
            _remove(path)
            path = None
        return read, bytes(body), path

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        # The result is inline in the poll (§1.5): there is nothing to fetch.
        raise VendorTransient("the result is inline in the poll; nothing to fetch")

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        return None  # no cancel operation (§1.7)

    async def delete(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """``DELETE`` on the operation's URL (§1.5): 204 is deleted; a NotFound there is gone already."""
        url = self._operation_url(state)
        with transport_errors():
            response = await self._client.delete(url, extensions=call.extensions(Kind.DELETE))
        raise_for_transient(response)
        if response.is_success:
            return
        if response.status_code == 404 and error_code(response) == "NotFound":
            return  # deleted before, or past the 24 h retention: not kept either way
        raise VendorRejected(
            f"not deleted: HTTP {response.status_code}: {error_text(response)}",
            status_code=response.status_code,
        )

    @staticmethod
    def _check(response: httpx.Response) -> None:
        raise_for_transient(response)
        if response.status_code == 404:
            raise VendorExpired(error_text(response), status_code=404)
        if 400 <= response.status_code < 500:
            # 400 (a refused api-version), 401, 403: the same request would be refused again.
            raise VendorRejected(error_text(response), status_code=response.status_code)
        if response.status_code != 200:
            raise VendorTransient(f"HTTP {response.status_code}: {error_text(response)}")


def _too_large(size: int, cap: int) -> VendorResultTooLarge:
    return VendorResultTooLarge(
        f"the operation's answer is {size} bytes or more, past the {cap} read "
        "(HOOKBRIDGE_AZURE_DI_MAX_ANSWER_BYTES)"
    )


def _remove(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _uncertain(response: httpx.Response, missing: str) -> VendorSubmitUncertain:
    return VendorSubmitUncertain(
        f"the vendor answered HTTP {response.status_code} without {missing}; "
        "it may have started an operation",
        status_code=response.status_code,
        answer=f"Operation-Location: {response.headers.get('operation-location', '(none)')}",
    )


# Registration -----------------------------------------------------------------------------------------

ModelId = Annotated[str, StringConstraints(pattern=MODEL_ID, max_length=64)]
Feature = Literal[
    "ocrHighResolution", "languages", "barcodes", "formulas", "keyValuePairs", "styleFont", "queryFields"
]


class AzureDiOptions(BaseModel):
    """An ``azure_di`` run's ``options``: the analyze request's parameters (contract §10)."""

    model_config = ConfigDict(extra="forbid")

    model_id: ModelId = Field(
        description="The model to analyze with: `prebuilt-layout`, `prebuilt-invoice`, `prebuilt-read`, ... "
        "or a custom model's id.",
        examples=["prebuilt-invoice"],
    )
    pages: Annotated[str, StringConstraints(pattern=PAGES, max_length=1000)] | None = Field(
        None, description="1-based page ranges, e.g. `1-3,5,7-9`."
    )
    locale: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,35}$")] | None = Field(
        None, description="A locale hint for text recognition, e.g. `en-US`."
    )
    features: list[Feature] = Field(default_factory=list, description="Optional analysis features.")
    query_fields: list[Annotated[str, StringConstraints(pattern=r"^[^,]{1,100}$")]] = Field(
        default_factory=list,
        max_length=100,
        description="Extra fields to extract (turns on the `queryFields` feature).",
    )
    output_content_format: Literal["text", "markdown"] | None = Field(
        None, description="The format of the result's `content`; the vendor's default is `text`."
    )


def parse_upload(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("bytes", "base64"):
        raise ValueError("bytes (the raw document) or base64 (a base64Source JSON body)")
    return value


def parse_api_version(raw: str) -> str:
    value = raw.strip()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}(-preview)?", value):
        raise ValueError("an api-version such as 2024-11-30")
    return value


def _build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> AzureDiAdapter:
    return AzureDiAdapter(
        client,
        api_version=str(extra.get("api_version", API_VERSION)),
        upload=str(extra.get("upload", "bytes")),
        max_answer_bytes=int(extra.get("max_answer_bytes") or MAX_ANSWER_BYTES),
        inline_max_bytes=int(extra.get("max_asset_bytes") or INLINE_MAX_BYTES),
    )


# Registered under the entry point group hookbridge.vendors (pyproject.toml).
SPEC = VendorSpec(
    name=AzureDiAdapter.name,
    operations=("analyze",),
    supports_cancel=AzureDiAdapter.supports_cancel,
    defaults=VendorDefaults(
        # The resource endpoint, e.g. https://myendpoint.cognitiveservices.azure.com (§1.1): each resource
        # has its own, so this default is a placeholder that must be set.
        base_url="https://example.cognitiveservices.azure.com",
        # "do not call get-analyze-result more than once every 2 seconds for a given POST" (§1.4).
        poll_initial_s=2.0,
        poll_max_s=30.0,
        poll_multiplier=1.5,
        # Results are kept about 24 hours (§1.5); a run unfinished in an hour is stuck (§1.4, AZ-QA-STUCK).
        max_run_s=3600.0,
        max_rps=0.0,
        pause_max_s=60.0,
        max_answer_bytes=MAX_ANSWER_BYTES,
        # The same sentence: a POLL_INITIAL_S set lower is raised to it, with a warning at start.
        min_poll_s=2.0,
    ),
    # "Analyze (POST) TPS ... 15" and "Get operations TPS ... 50", "Going over any of them gives HTTP 429"
    # (§1.8): a budget and a 429 pause each, so that a 429 on a read never holds submits back. Which
    # limit a DELETE counts against, the document does not say: it stays on the shared budget
    # (AZURE_DI_MAX_RPS, none by default) and its pause.
    budgets=(
        KindBudget("submit", frozenset({Kind.SUBMIT}), 15.0),
        # "on 429 while polling, back off exponentially, for example with a 2-5-13-34 second pattern"
        # (§1.4), when the 429 says nothing (Retry-After "NOT FOUND", §1.8).
        KindBudget("poll", frozenset({Kind.POLL, Kind.FETCH}), 50.0, pause_schedule_s=(2.0, 5.0, 13.0, 34.0)),
    ),
    auth_headers=lambda key: {"Ocp-Apim-Subscription-Key": key},
    build=_build,
    settings=(
        VendorSetting(
            "API_VERSION",
            API_VERSION,
            parse_api_version,
            description="the `api-version` of every request (the adapter follows 2024-11-30)",
        ),
        VendorSetting(
            "UPLOAD",
            "bytes",
            parse_upload,
            description="how a document's bytes are sent: `bytes` (raw, with its media type) or `base64` "
            "(a `base64Source` JSON body)",
        ),
    ),
    description="Azure AI Document Intelligence, REST 2024-11-30",
    options=AzureDiOptions,
    # Each resource has its own endpoint (§1.1): the default above is a placeholder, never used.
    required=("BASE_URL", "API_KEY"),
)
