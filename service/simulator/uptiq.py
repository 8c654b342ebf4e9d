"""Uptiq DocAI async extraction (NOTES.md §3, uptiq-async-extraction-and-polling.md), under ``/uptiq``.

Choices where the documents are silent:

- The ``/extract`` body schema is not published. One of ``documentType`` (string) or ``documentTypes``
  (non-empty list of strings) is required; the document may come as ``fileUrl`` (or ``url``,
  ``documentUrl``) or as ``fileBase64`` (or ``file``, ``fileContent``) with ``fileName``; any other JSON
  is accepted, and a body without a document is its own identity.
- Errors (401, 400, 404) use ``{"status": "error", "message": ...}``: the error envelope is not published.
- The early 404 counts polls per extraction against the current ``uptiq_early_404s``.
- ``billing`` documents succeed: Uptiq has no documented billing failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, REJECT_MESSAGE, Document, Ending, decode_base64_lenient
from ._state import Phase, SimState, Timeline, sim_state

_URL_KEYS = ("fileUrl", "url", "documentUrl")
_CONTENT_KEYS = ("fileBase64", "file", "fileContent")
_NAME_KEYS = ("fileName", "filename")
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
    polls: int = 0

    def status(self, now: float) -> str:
        phase = self.timeline.phase(now)
        if phase is Phase.QUEUED:
            return "Pending"
        if phase is Phase.RUNNING:
            return "Processing"
        return "Failed" if self.document.outcome.ending is Ending.FAIL else "Processed"


@dataclass
class UptiqStore:
    extractions: dict[str, Extraction] = field(default_factory=dict)

    def status_counts(self, now: float) -> dict[str, int]:
        counts: dict[str, int] = {}
        for extraction in self.extractions.values():
            status = extraction.status(now)
            counts[status] = counts.get(status, 0) + 1
        return counts

    def summaries(self, now: float) -> list[tuple[str, str, float, float | None]]:
        """(id, status, created_at, ended or planned end) of every extraction, for ``GET /_sim/runs``."""
        return [
            (x.id, x.status(now), x.timeline.created_at, x.timeline.finishes_at)
            for x in self.extractions.values()
        ]


def _store(request: Request) -> UptiqStore:
    store = request.app.state.uptiq
    assert isinstance(store, UptiqStore)
    return store


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": "error", "message": message}, status_code=status)


def _first_str(body: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _document(body: dict[str, Any]) -> Document:
    name = _first_str(body, _NAME_KEYS)
    url = _first_str(body, _URL_KEYS)
    if url is not None:
        return Document(content=url.encode(), url=url, filename=name or url.rstrip("/").rsplit("/", 1)[-1])
    content = _first_str(body, _CONTENT_KEYS)
    if content is not None:
        return Document(content=decode_base64_lenient(content), filename=name)
    return Document(content=json.dumps(body, sort_keys=True).encode(), filename=name)


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
    document = _document(body)
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
    _store(request).extractions[extraction.id] = extraction
    data: dict[str, Any] = {
        "_id": extraction.id,
        "documentStatus": "Pending",
        "documentType": document_type,
        "requestId": extraction.request_id,
        "subtype": None,
    }
    if document_types is not None:
        data["documentTypes"] = document_types
    return JSONResponse(
        {"data": data, "message": "Document queued for extraction", "status": "success"},
        status_code=status_code,
    )


async def get_extraction(request: Request) -> Response:
    state = sim_state(request)
    if request.headers.get("x-api-key") != state.config.uptiq_api_key:
        return _error(401, "Unauthorized: missing or invalid X-Api-Key")
    extraction = _store(request).extractions.get(request.path_params["extraction_id"])
    if extraction is None:
        return _error(404, "Extraction not found")
    extraction.polls += 1
    # The record is not visible to the first reads after submit (S004: "404 right after submitting").
    if extraction.polls <= state.config.uptiq_early_404s:
        return _error(404, "Extraction not found")
    return JSONResponse(extraction_json(extraction, state, state.now()))


def routes() -> list[BaseRoute]:
    return [
        Route("/extract", submit, methods=["POST"]),
        Route("/document-extractions/{extraction_id}", get_extraction, methods=["GET"]),
    ]
