"""Cloudsquid tables API, async run pattern (shared/vendors/NOTES.md §1, cloudsquid-*.md).

Submit is two calls: upload ``POST /projects/{project}/tables/{table_id}/files`` (JSON ``{file, filename,
mimetype, file_type}``) creates a row, then ``POST .../run`` ``{row_id, zero_retention}`` starts the run.
Cloudsquid has no idempotency key, so the row (and then the run) is checkpointed through
``SubmitRequest.checkpoint``: a submit retried after a crash reuses them instead of uploading again.
Poll ``GET .../run/{run_id}``: the current ``DataRow`` shape carries ``data``, the older page's shape
``{status, result}``; both are read. There is no cancel API.

``zero_retention`` is passed as Cloudsquid's own flag, which only keeps intermediate artifacts from being
stored (S001: "you want the final output but not intermediate artifacts stored"); the row and the result
stay at Cloudsquid, which documents no delete.

A ``done`` row's result is its ``data`` with the DataRow's ``reasoning`` and ``review`` beside the
columns (S002 lists them in DataRow; ``approved: false`` included); a column of the same name wins.
"A typical poll interval is 2-5 seconds" (S000): the poll policy's 2.0/5.0. "401 Unauthorized" (S002) on
a poll ends the run (``vendor_rejected``).

Where the documents are silent (not documented; we do X because Y):

- Idempotency: none is documented, so ``submit_idempotent = False``: a request that may have created a
  row or a run (a drop or timeout after sending, a 2xx without ``row_id``/``run_id``) is never sent again;
  the run ends ``vendor_submit_ambiguous`` (service/worker/decide.py).
- The upload's 2xx code: any 2xx is accepted, since S001 shows none for the upload.
- The message of a run in ``error``: ``errorMessage`` if present, else ``reasoning``, the only documented
  free-text field (a GUESS: check a real failed run's body before going live).
- A poll answer without ``status`` (DataRow does not require it): a transient fault, because it says
  nothing about the run.
- A 404 on poll: the vendor no longer has the run (``vendor_expired``), because an id it gave us cannot
  come back.
- The media-type list is the upload's ``mimetype`` enum (S000, CS-upload); anything else is refused before
  any call, because Cloudsquid would refuse it after an upload.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field

from service.vendors.base import (
    FAILED,
    NO_CALL,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Call,
    Kind,
    PollResult,
    SubmitRequest,
    Submitted,
    VendorDefaults,
    VendorExpired,
    VendorRejected,
    VendorSetting,
    VendorSpec,
    VendorTransient,
)
from service.vendors.http import (
    error_message,
    raise_for_transient,
    submit_errors,
    transport_errors,
    unexpected_answer,
)

STATUSES = {"pending": QUEUED, "running": RUNNING, "done": SUCCEEDED, "error": FAILED}

# The upload's ``mimetype`` enum (S000, CS-upload). Anything else is refused before calling.
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
# Common spellings of enum members.
_ALIASES = {"audio/mpeg": "audio/mp3", "audio/x-wav": "audio/wav", "audio/wave": "audio/wav"}
_MULTIPART_MIMETYPES = ("message/rfc822", "multipart/related")
_UNSPECIFIED = ("", "application/octet-stream")


class CloudsquidAdapter:
    name = "cloudsquid"
    supports_cancel = False
    # Not documented: no idempotency key on either call. A submit that may have created a row or a run is
    # never sent again (service/worker/decide.py); the checkpoint covers a crash after an answer came.
    submit_idempotent = False

    def __init__(self, client: httpx.AsyncClient, *, project: str = "", table_id: str = "") -> None:
        self._client = client
        self._project = project
        self._table_id = table_id

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        project, table_id = self._table(request.options, request.state)
        where = {"project": project, "table_id": table_id}
        if request.state.get("run_id"):
            # A retried submit that already started the run: nothing to send again.
            return Submitted(vendor_run_id=str(request.state["run_id"]), state=where)

        row_id = request.state.get("row_id")
        if not row_id:
            body = _upload_body(request)  # refuses what Cloudsquid would, before any call
            with submit_errors():
                response = await self._client.post(
                    f"{_table_path(project, table_id)}/files",
                    json=body,
                    extensions=call.extensions(Kind.SUBMIT),
                )
            _check_submit(response)
            row_id = _field(response, "row_id")
            if request.checkpoint is not None:
                await request.checkpoint({"row_id": row_id, **where})

        with submit_errors():
            response = await self._client.post(
                f"{_table_path(project, table_id)}/run",
                json={"row_id": row_id, "zero_retention": request.zero_retention},
                extensions=call.extensions(Kind.SUBMIT),
            )
        _check_submit(response)
        run_id = _field(response, "run_id")
        if request.checkpoint is not None:
            await request.checkpoint({"run_id": run_id})
        return Submitted(vendor_run_id=run_id, state={"row_id": row_id, **where})

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        project, table_id = self._table({}, state)
        with transport_errors():
            response = await self._client.get(
                f"{_table_path(project, table_id)}/run/{quote(vendor_run_id, safe='')}",
                extensions=call.extensions(Kind.POLL),
            )
        raise_for_transient(response)
        if response.status_code in (401, 403):
            # S002 documents 401 Unauthorized: the key is refused, and asking ten more times will not help.
            raise VendorRejected(error_message(response), status_code=response.status_code)
        if response.status_code in (404, 410):
            # Not documented (S002 lists 200, 400, 401): we read 404 as "no such run" because a run id we
            # were given cannot come back; 410 is HTTP's own "gone".
            raise VendorExpired(error_message(response), status_code=response.status_code)
        if not response.is_success:
            raise VendorTransient(f"HTTP {response.status_code}: {error_message(response)}")
        try:
            row: Any = response.json()
        except ValueError as exc:
            raise VendorTransient("the run status is not JSON") from exc
        if not isinstance(row, dict):
            raise VendorTransient("the run status is not a JSON object")

        raw_status = row.get("status")
        if not isinstance(raw_status, str) or not raw_status:
            # DataRow does not list status as required (S002): an answer without one tells us nothing, a
            # transient fault (bounded by VENDOR_MAX_TRANSIENT_FAILURES), never a status named "None".
            raise VendorTransient("the run status answer has no status")
        vendor_status = raw_status
        # An unknown status is never terminal (NOTES.md §1.7).
        status = STATUSES.get(vendor_status, RUNNING)
        if status == SUCCEEDED:
            data = row.get("data")
            if data is None:  # the older {status, result} shape
                data = row.get("result")
            return PollResult(SUCCEEDED, vendor_status, result=_with_row_fields(data, row))
        if status == FAILED:
            message = _text(row.get("errorMessage")) or _text(row.get("reasoning"))
            details = {k: row[k] for k in ("errorMessage", "reasoning") if _text(row.get(k))}
            return PollResult(
                FAILED,
                vendor_status,
                error=message or "the vendor reported an error and gave no reason",
                error_details=details or None,
            )
        return PollResult(status, vendor_status)

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        """Never needed: the poll that reports ``done`` carries the data."""
        result = await self.poll(vendor_run_id, state, call)
        return result.result

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """Cloudsquid documents no cancel endpoint: nothing to tell it."""

    def _table(self, options: dict[str, Any], state: dict[str, Any]) -> tuple[str, str]:
        project = _text(state.get("project")) or _text(options.get("project")) or self._project
        table_id = _text(state.get("table_id")) or _text(options.get("table_id")) or self._table_id
        if not project:
            raise VendorRejected(
                "no Cloudsquid project: pass options.project or set HOOKBRIDGE_CLOUDSQUID_PROJECT"
            )
        if not table_id:
            raise VendorRejected(
                "no Cloudsquid table: pass options.table_id or set HOOKBRIDGE_CLOUDSQUID_TABLE_ID"
            )
        return project, table_id


def _table_path(project: str, table_id: str) -> str:
    return f"/projects/{quote(project, safe='')}/tables/{quote(table_id, safe='')}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _upload_body(request: SubmitRequest) -> dict[str, Any]:
    doc = request.document
    options = request.options
    file_type = options.get("file_type")
    if file_type == "multipart":
        parts = options.get("parts")
        if not isinstance(parts, list) or not parts:
            raise VendorRejected(
                "Cloudsquid multipart upload needs options.parts: a non-empty array of the email's parts"
            )
        media_type = _media_type(doc.media_type, doc.filename)
        mimetype = media_type if media_type in _MULTIPART_MIMETYPES else "message/rfc822"
        return {"file": parts, "filename": doc.filename, "mimetype": mimetype, "file_type": "multipart"}
    natural = "uri" if doc.url is not None else "binary"
    if file_type is not None and file_type != natural:
        raise VendorRejected(
            f"options.file_type {file_type!r} does not fit the document "
            f"(a {'URL' if natural == 'uri' else 'file'}: {natural!r}, or 'multipart' with options.parts)"
        )
    mimetype = _media_type(doc.media_type, doc.url or doc.filename)
    if mimetype not in MIMETYPES:
        accepted = ", ".join(sorted(MIMETYPES))
        raise VendorRejected(f"Cloudsquid does not take media type {doc.media_type!r}; it takes: {accepted}")
    if doc.url is not None:
        file = doc.url
    else:
        if not doc.content:
            raise VendorRejected("the document is empty")
        file = base64.b64encode(doc.content).decode("ascii")
    return {"file": file, "filename": doc.filename, "mimetype": mimetype, "file_type": natural}


def _media_type(media_type: str, name: str) -> str:
    """The media type without parameters; guessed from the name when the client gave none."""
    base = media_type.split(";", 1)[0].strip().lower()
    if base in _UNSPECIFIED:
        guessed, _ = mimetypes.guess_type(name.split("?", 1)[0])
        base = (guessed or base).lower()
    return _ALIASES.get(base, base)


def _check_submit(response: httpx.Response) -> None:
    raise_for_transient(response)
    if not response.is_success:
        # 400 and 401 carry {errorMessage} (S001); any other refusal is as final.
        raise VendorRejected(error_message(response), status_code=response.status_code)


def _field(response: httpx.Response, name: str) -> str:
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        # A 2xx that names no row or run may still have created one: never asked again (no idempotency).
        raise unexpected_answer(response, f"a {name}")
    return value


# DataRow fields beside ``data`` that the client gets (S002): the model's reasoning and the human review,
# ``approved: false`` included. A column of ``data`` of the same name wins (the data is the result).
ROW_FIELDS = ("reasoning", "review")


def _with_row_fields(data: Any, row: dict[str, Any]) -> Any:
    kept: Any = data if data is not None else {}
    extras = {k: row[k] for k in ROW_FIELDS if row.get(k) is not None}
    if not extras:
        return kept
    kept = dict(kept) if isinstance(kept, dict) else {"data": kept}
    for name, value in extras.items():
        kept.setdefault(name, value)
    return kept


def _build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> CloudsquidAdapter:
    return CloudsquidAdapter(client, project=str(extra["project"]), table_id=str(extra["table_id"]))


# Registered under the entry point group hookbridge.vendors (pyproject.toml).
class CloudsquidOptions(BaseModel):
    """A Cloudsquid run's ``options``; project and table default to the settings."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, description="The project; default HOOKBRIDGE_CLOUDSQUID_PROJECT.")
    table_id: str | None = Field(None, description="The table; default HOOKBRIDGE_CLOUDSQUID_TABLE_ID.")
    file_type: Literal["uri", "binary", "multipart"] | None = Field(
        None, description="`multipart` with `parts` for an email; else it follows the document."
    )
    parts: list[Any] | None = Field(None, description="The email's parts, with `file_type: multipart`.")


SPEC = VendorSpec(
    name=CloudsquidAdapter.name,
    operations=("extract",),
    supports_cancel=CloudsquidAdapter.supports_cancel,
    defaults=VendorDefaults(
        base_url="https://api.cloudsquid.io/api",
        poll_initial_s=2.0,
        poll_max_s=5.0,
        poll_multiplier=1.5,
        max_run_s=3600.0,
    ),
    auth_headers=lambda key: {"X-API-Key": key},
    build=_build,
    settings=(
        VendorSetting("PROJECT", "", description="the project of runs whose options name none"),
        VendorSetting("TABLE_ID", "", description="the table of runs whose options name none"),
    ),
    description="Cloudsquid tables API, async runs",
    options=CloudsquidOptions,
    required=("API_KEY",),
)
