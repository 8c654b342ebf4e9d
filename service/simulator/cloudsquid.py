"""Cloudsquid tables API, async run pattern (NOTES.md §1, cloudsquid-*.md), under ``/cloudsquid/api``.

Choices where the documents are silent:

- Upload answers 201 (the filesystem upload's code; the table upload's 2xx is not shown).
- A well-formed but unknown ``run_id`` answers 404 ``{errorMessage}``; an unknown ``row_id`` on start-run
  answers 400, as the brief asks. Rows and runs belong to the project and table they were made in.
- A run in ``error`` carries the message in ``reasoning`` (the only documented free-text field) and also
  in ``errorMessage``: a GUESS. S002 documents no error field on a DataRow, and the ``Error`` schema
  (``{errorMessage}``) only for 400/401 answers. Before going live, look at a real failed run's body and
  the OpenAPI of ``GET /projects/{project_name}/tables/{table_id}/run/{run_id}``.
- The bodies of 429 (and of 500, which has no schema in S001) are GUESSES: Cloudsquid documents no rate
  limit.
- ``zero_retention`` is accepted and kept, and changes nothing visible: S001 says it only stops
  intermediate results from being persisted; the final result is still returned and kept.
- ``uri`` files are not fetched: the URI stands in for the bytes. ``multipart`` parts must be a non-empty
  array; their JSON text stands in for the bytes.
- ``billing`` documents succeed: Cloudsquid has no documented billing failure.
- The sync ``/extract`` waits for the run, at most 60 s, then answers with the DataRow as it then is.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, REJECT_MESSAGE, Document, Ending
from ._state import BadRequest, Phase, SimState, Timeline, VendorStore, base64_field, json_object, sim_state

MIMETYPES = frozenset(
    {
        "application/pdf",
        "application/json",
        "image/jpg",
        "image/jpeg",
        "image/png",
        "text/csv",
        "text/plain",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.ms-excel",
        "video/mp4",
        "audio/mp3",
        "audio/wav",
        "audio/ogg",
        "multipart/related",
        "message/rfc822",
    }
)
FILE_TYPES = ("uri", "binary", "multipart")
_SYNC_WAIT_CAP_S = 60.0


@dataclass
class TableRow:
    id: str
    project: str
    table_id: str
    file_id: str
    document: Document
    created_at: float


@dataclass
class CloudsquidRun:
    id: str
    row: TableRow
    timeline: Timeline
    zero_retention: bool

    def status(self, now: float) -> str:
        phase = self.timeline.phase(now)
        if phase is Phase.QUEUED:
            return "pending"
        if phase is Phase.RUNNING:
            return "running"
        return "error" if self.row.document.outcome.ending is Ending.FAIL else "done"


@dataclass
class CloudsquidStore(VendorStore):
    vendor = "cloudsquid"
    rows: dict[str, TableRow] = field(default_factory=dict)
    runs: dict[str, CloudsquidRun] = field(default_factory=dict)

    def all_runs(self) -> Iterable[CloudsquidRun]:
        return self.runs.values()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"errorMessage": message}, status_code=status)


def _is_uuid(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _check_request(request: Request, state: SimState, *path_uuids: str) -> JSONResponse | None:
    if request.headers.get("x-api-key") != state.config.cloudsquid_api_key:
        return _error(401, "Unauthorized: missing or invalid X-API-Key")
    for name in path_uuids:
        if not _is_uuid(request.path_params[name]):
            return _error(400, f"{name} must be a UUID")
    return None


def _document(body: dict[str, Any]) -> Document:
    file, filename, mimetype, file_type = (body.get(k) for k in ("file", "filename", "mimetype", "file_type"))
    if not isinstance(filename, str) or not filename:
        raise BadRequest("filename is required")
    if mimetype not in MIMETYPES:
        raise BadRequest(f"mimetype must be one of: {', '.join(sorted(MIMETYPES))}")
    if file_type not in FILE_TYPES:
        raise BadRequest(f"file_type must be one of: {', '.join(FILE_TYPES)}")
    if file_type == "binary":
        content = base64_field(file, "file", " when file_type is binary")
        return Document(content=content, filename=filename, media_type=mimetype)
    if file_type == "uri":
        if not isinstance(file, str) or not file:
            raise BadRequest("file must be a URL string when file_type is uri")
        return Document(content=file.encode(), filename=filename, url=file, media_type=mimetype)
    if not isinstance(file, list) or not file:
        raise BadRequest("file must be a non-empty array of parts when file_type is multipart")
    return Document(content=json.dumps(file, sort_keys=True).encode(), filename=filename, media_type=mimetype)


def _new_row(request: Request, state: SimState, document: Document) -> TableRow:
    row = TableRow(
        id=state.new_uuid(),
        project=request.path_params["project"],
        table_id=request.path_params["table_id"],
        file_id=state.new_uuid(),
        document=document,
        created_at=state.now(),
    )
    CloudsquidStore.of(request).rows[row.id] = row
    return row


def _new_run(request: Request, state: SimState, row: TableRow, zero_retention: bool) -> CloudsquidRun:
    outcome = row.document.outcome
    run = CloudsquidRun(
        id=state.new_uuid(),
        row=row,
        timeline=state.new_timeline(slow=outcome.slow, never_finishes=outcome.ending is Ending.STUCK),
        zero_retention=zero_retention,
    )
    CloudsquidStore.of(request).runs[run.id] = run
    return run


def data_row(run: CloudsquidRun, state: SimState, now: float, *, legacy: bool) -> dict[str, Any]:
    status = run.status(now)
    row = run.row
    if legacy:
        # The older page's enum has no "pending": a queued run already read "running" there.
        shape: dict[str, Any] = {
            "status": "running" if status == "pending" else status,
            "result": row.document.fields() if status == "done" else {},
        }
        if status == "error":
            shape["errorMessage"] = FAILURE_MESSAGE
        return shape
    body: dict[str, Any] = {
        "data": row.document.fields() if status == "done" else {},
        "row_id": row.id,
        "created_at": state.wall_iso(row.created_at),
        "status": status,
        "reasoning": "",
        "input": {"files": [{"id": row.file_id}], "data": {}},
    }
    if status == "done":
        body["reasoning"] = f"Extracted {len(body['data'])} fields from {row.document.filename}."
    elif status == "error":
        body["reasoning"] = FAILURE_MESSAGE
        body["errorMessage"] = FAILURE_MESSAGE
    return body


async def _upload_body(request: Request, state: SimState) -> Document | Response:
    """The checked request and its document, or the error answer: shared by upload and sync extract."""
    if (refused := _check_request(request, state, "table_id")) is not None:
        return refused
    try:
        document = _document(await json_object(request, "body"))
    except BadRequest as exc:
        return _error(400, str(exc))
    if document.outcome.reject:
        return _error(400, REJECT_MESSAGE)
    return document


async def upload(request: Request) -> Response:
    state = sim_state(request)
    document = await _upload_body(request, state)
    if isinstance(document, Response):
        return document
    return JSONResponse({"row_id": _new_row(request, state, document).id}, status_code=201)


async def start_run(request: Request) -> Response:
    state = sim_state(request)
    if (refused := _check_request(request, state, "table_id")) is not None:
        return refused
    try:
        body = await json_object(request, "body")
    except BadRequest as exc:
        return _error(400, str(exc))
    row_id, zero_retention = body.get("row_id"), body.get("zero_retention", False)
    if not isinstance(row_id, str) or not _is_uuid(row_id):
        return _error(400, "row_id is required and must be a UUID")
    if not isinstance(zero_retention, bool):
        return _error(400, "zero_retention must be a boolean")
    row = CloudsquidStore.of(request).rows.get(row_id)
    params = request.path_params
    if row is None or (row.project, row.table_id) != (params["project"], params["table_id"]):
        return _error(400, f"row {row_id} not found in this table")
    return JSONResponse({"run_id": _new_run(request, state, row, zero_retention).id}, status_code=202)


async def get_run(request: Request) -> Response:
    state = sim_state(request)
    if (refused := _check_request(request, state, "table_id", "run_id")) is not None:
        return refused
    run = CloudsquidStore.of(request).runs.get(request.path_params["run_id"])
    params = request.path_params
    if run is None or (run.row.project, run.row.table_id) != (params["project"], params["table_id"]):
        return _error(404, "run not found")
    row = data_row(run, state, state.now(), legacy=state.config.cloudsquid_legacy_shape)
    # DataRow does not list status as required (S002): some answers may lack it (config.rate_no_status).
    if state.config.rate_no_status and state.fault_rng.random() < state.config.rate_no_status:
        row.pop("status", None)
    return JSONResponse(row)


async def extract_sync(request: Request) -> Response:
    state = sim_state(request)
    document = await _upload_body(request, state)
    if isinstance(document, Response):
        return document
    run = _new_run(request, state, _new_row(request, state, document), zero_retention=False)
    finishes_at = run.timeline.finishes_at
    wait = _SYNC_WAIT_CAP_S if finishes_at is None else min(_SYNC_WAIT_CAP_S, finishes_at - state.now())
    # The margin covers the event loop waking a timer up to one clock tick early.
    await asyncio.sleep(max(0.0, wait) + 0.01)
    return JSONResponse(data_row(run, state, state.now(), legacy=False))


def routes() -> list[BaseRoute]:
    tables = "/projects/{project}/tables/{table_id}"
    return [
        Route(f"{tables}/files", upload, methods=["POST"]),
        Route(f"{tables}/run", start_run, methods=["POST"]),
        Route(f"{tables}/run/{{run_id}}", get_run, methods=["GET"]),
        Route(f"{tables}/extract", extract_sync, methods=["POST"]),
    ]
