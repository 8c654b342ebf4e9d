"""Uptiq DocAI async extraction (NOTES.md §3, uptiq-async-extraction-and-polling.md), under ``/uptiq``.

Read strictly from S004: one of ``documentType`` (string) or ``documentTypes`` (non-empty list of strings)
is required, and a submission is a document to extract, so one without a document is refused (400). The
record is not visible for ``uptiq_early_404_s`` seconds after the submit ("404 right after submitting ...
wait a second and retry"), measured on the simulator's clock, however often it is polled.

GUESSES, where the documents are silent (check before going live: the sync quickstart's ``request.json``
at docs.uptiq.ai/document-ai/developer-documentation/getting-started/quickstart-extract-a-document.md, the
reference pages "Extract document data asynchronously" and "Get extraction details", the Conventions page,
and "Reading fraud and control checks"):

- The document fields: exactly one of ``fileUrl`` (a URL) or ``fileBase64`` (standard base64), with an
  optional ``fileName``; under ``uptiq_body_fields: snake`` their snake_case forms instead. Other JSON
  fields are accepted and ignored, except the echoed ``model``,
  ``enableCaching`` and ``processorId``.
- The shapes of ``creditReservation`` (``{"credits", "status"}``), ``webhookStatus`` (a string) and
  ``fraudResults`` (``{"riskScore", "checks"}``): S004 names these fields of the async record, nothing more.
- Errors (401, 400, 404, 429) use ``{"status": "error", "message": ...}``: the error envelope is not
  published.
- ``billing`` documents succeed: Uptiq has no documented billing failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, REJECT_MESSAGE, Document, Ending
from ._state import BadRequest, Phase, SimState, Timeline, VendorStore, base64_field, sim_state

_CREDITS_PER_PAGE = 10  # a GUESS: Uptiq publishes no prices
_ECHOED_KEYS = ("model", "enableCaching", "processorId")


@dataclass
class Extraction:
    id: str
    request_id: str
    document_type: str
    document_types: list[str] | None
    document: Document
    timeline: Timeline
    nominal_finish: float
    echoed: dict[str, Any]

    def status(self, now: float) -> str:
        phase = self.timeline.phase(now)
        if phase is Phase.QUEUED:
            return "Pending"
        if phase is Phase.RUNNING:
            return "Processing"
        return "Failed" if self.document.outcome.ending is Ending.FAIL else "Processed"


@dataclass
class UptiqStore(VendorStore):
    vendor = "uptiq"
    extractions: dict[str, Extraction] = field(default_factory=dict)

    def all_runs(self) -> Iterable[Extraction]:
        return self.extractions.values()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "error", "message": message}, status_code=status)


# The body's document field names under each reading (``uptiq_body_fields``): S004 shows no schema.
BODY_FIELDS = {
    "camel": ("fileUrl", "fileBase64", "fileName"),
    "snake": ("file_url", "file_base64", "file_name"),
}


def _document(body: dict[str, Any], reading: str = "camel") -> Document:
    """The document of a submission (field names are a GUESS, see the module docstring)."""
    url_key, content_key, name_key = BODY_FIELDS[reading]
    url, content, name = body.get(url_key), body.get(content_key), body.get(name_key)
    if name is not None and not isinstance(name, str):
        raise BadRequest(f"{name_key} must be a string")
    if url is not None and content is not None:
        raise BadRequest(f"send one document: {url_key} or {content_key}, not both")
    if url is not None:
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise BadRequest(f"{url_key} must be an http(s) URL")
        return Document(content=url.encode(), url=url, filename=name or url.rstrip("/").rsplit("/", 1)[-1])
    if content is not None:
        return Document(content=base64_field(content, content_key), filename=name)
    raise BadRequest(f"no document: send {url_key} or {content_key}")


def _stage(extraction: Extraction, state: SimState, status: str, now: float) -> dict[str, Any]:
    timeline = extraction.timeline
    if status == "Pending":
        stage, message, since = "queued", "Waiting for a worker", timeline.created_at
    elif status == "Processing":
        percent = min(99, int(timeline.fraction(now, extraction.nominal_finish) * 100))
        stage, message, since = "extracting", f"Extracting data ({percent}%)", timeline.starts_at
    elif status == "Processed":
        stage, message, since = "completed", "Extraction complete", timeline.finishes_at or now
    else:
        stage, message, since = "failed", FAILURE_MESSAGE, timeline.finishes_at or now
    return {"stage": stage, "message": message, "updatedAt": state.wall_iso(since, zulu=False)}


def _result(extraction: Extraction, status: str) -> dict[str, Any]:
    document = extraction.document
    if status == "Processed":
        score = 0.85 + int(document.sha256[16:18], 16) % 15 / 100
        return {
            "documentType": extraction.document_type,
            "extractedData": document.fields(),
            "extractionMetrics": {"accuracyScore": round(score, 2)},
        }
    if status == "Failed":
        return {"documentQuality": {"score": 0.12, "issues": ["blurry"]}, "error": FAILURE_MESSAGE}
    return {}


def _credit_reservation(extraction: Extraction, status: str) -> dict[str, Any]:
    """A GUESS at the shape: credits held at submit, consumed on success, released on failure."""
    state = {"Processed": "consumed", "Failed": "released"}.get(status, "reserved")
    return {"credits": _CREDITS_PER_PAGE * extraction.document.pages, "status": state}


def _fraud_results(extraction: Extraction, status: str) -> dict[str, Any] | None:
    """A GUESS at the shape; only a processed document has been checked."""
    if status != "Processed":
        return None
    risk = int(extraction.document.sha256[18:20], 16) % 20 / 100
    return {
        "riskScore": risk,
        "checks": [
            {"name": "font_consistency", "result": "pass"},
            {"name": "metadata_tampering", "result": "pass" if risk < 0.15 else "review"},
        ],
    }


def extraction_json(extraction: Extraction, state: SimState, now: float) -> dict[str, Any]:
    status = extraction.status(now)
    record: dict[str, Any] = {
        "_id": extraction.id,
        "status": status,
        "documentType": extraction.document_type,
        "processingStage": _stage(extraction, state, status, now),
        "result": _result(extraction, status),
        "requestId": extraction.request_id,
        **extraction.echoed,
        # S004: "the asynchronous record carries more than the synchronous response does".
        "creditReservation": _credit_reservation(extraction, status),
        "webhookStatus": "NotConfigured",
        "fraudResults": _fraud_results(extraction, status),
    }
    if extraction.document_types is not None:
        record["documentTypes"] = extraction.document_types
    return {"extraction": record, "status": "success"}


async def submit(request: Request) -> Response:
    state = sim_state(request)
    if request.headers.get("x-api-key") != state.config.uptiq_api_key:
        return _error(401, "Unauthorized: missing or invalid X-Api-Key")
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(400, "body is not valid JSON")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object")
    document_type, document_types = body.get("documentType"), body.get("documentTypes")
    if (
        isinstance(document_types, list)
        and document_types
        and all(isinstance(t, str) for t in document_types)
    ):
        document_type, status_code = document_types[0], 202
    elif isinstance(document_type, str) and document_type:
        document_types, status_code = None, 200
    else:
        return _error(400, "documentType (string) or documentTypes (list of strings) is required")
    try:
        document = _document(body, state.config.uptiq_body_fields)
    except BadRequest as exc:
        return _error(400, str(exc))
    if document.outcome.reject:
        return _error(400, REJECT_MESSAGE)
    stuck = document.outcome.ending is Ending.STUCK or state.config.uptiq_stuck
    timeline = state.new_timeline(slow=document.outcome.slow, never_finishes=stuck)
    extraction = Extraction(
        id=state.new_uuid(),
        request_id=state.new_uuid(),
        document_type=document_type,
        document_types=document_types,
        document=document,
        timeline=timeline,
        nominal_finish=timeline.finishes_at or timeline.created_at + state.nominal_duration(timeline),
        echoed={k: body.get(k) for k in _ECHOED_KEYS},
    )
    UptiqStore.of(request).extractions[extraction.id] = extraction
    data: dict[str, Any] = {
        "_id": extraction.id,
        "documentStatus": "Pending",
        "documentType": document_type,
        "requestId": extraction.request_id,
        "subtype": None,
    }
    answer: Any = data
    if document_types is not None:
        data["documentTypes"] = document_types
        # S004 does not show the 202's body: play the reading chosen (config.uptiq_multi_shape).
        shape = state.config.uptiq_multi_shape
        if shape == "list":
            answer = [data]
        elif shape == "ids":
            answer = {k: v for k, v in data.items() if k != "_id"} | {"_ids": [extraction.id]}
    return JSONResponse(
        {"data": answer, "message": "Document queued for extraction", "status": "success"},
        status_code=status_code,
    )


async def get_extraction(request: Request) -> Response:
    state = sim_state(request)
    if request.headers.get("x-api-key") != state.config.uptiq_api_key:
        return _error(401, "Unauthorized: missing or invalid X-Api-Key")
    extraction = UptiqStore.of(request).extractions.get(request.path_params["extraction_id"])
    if extraction is None:
        return _error(404, "Extraction not found")
    now = state.now()
    # The record is not visible for a while after the submit (S004: "404 right after submitting").
    if now < extraction.timeline.created_at + state.config.uptiq_early_404_s:
        return _error(404, "Extraction not found")
    answer = extraction_json(extraction, state, now)
    if state.config.rate_no_status and state.fault_rng.random() < state.config.rate_no_status:
        answer["extraction"].pop("status", None)
    return JSONResponse(answer)


def routes() -> list[BaseRoute]:
    return [
        Route("/extract", submit, methods=["POST"]),
        Route("/document-extractions/{extraction_id}", get_extraction, methods=["GET"]),
    ]
