"""Nutrient DWS Data Extraction async runs (NOTES.md §2, nutrient-run-asynchronously.md), under ``/nutrient``.

Read strictly from S003 (and NU-parse for the JSON shape): the async routes take the synchronous
endpoint's request format, which is a multipart upload with a ``file`` part and an ``instructions`` part
(a JSON string), or a JSON body whose instruction fields (``mode``, ``output``, ``schema``, ...) sit at the
top level beside ``url`` (or ``assetId``). A JSON body that nests them under ``instructions`` is refused with
400 ``invalid_request``: the real API would not read them there (a parse would silently fall back to its
default mode). A multipart body without a ``file`` (or ``assetId``) part is refused too, as is an unknown
operation (404), an ``Idempotency-Key`` that is not 1 to 255 printable ASCII characters (400), an unknown
parse ``mode``, and ``storeRun: false`` (400). Every request of one API key takes a token from one bucket
(``nutrient_rps``/``nutrient_burst``): polls and submits share the limit.

Choices where the documents are silent:

- ``GET /extraction/runs/{id}/assets/result`` on a queued or running run answers 409 ``run_in_flight`` (the
  documented code for "still queued or running"); on an ``error`` or ``canceled`` run it answers 404,
  since such a run has no result asset.
- Error codes go in ``errorDetails.code`` of the documented ``ParseErrorResponse`` body; 402 on submit uses
  the billing shape ``{error, code, message}``.
- The run's ``assets`` is a list of ``{"name": ...}`` objects; a run's ``usage`` stays ``{}`` unless done.
- Credits: a submit is refused with 402 while the balance (``nutrient_credits`` minus the cost of finished
  runs) is not positive; a run's cost is charged when it reaches ``done``.
- ``url`` and ``assetId`` inputs are not downloaded: the URL (or id) string stands in for the input bytes.
- The processing limit also ends ``stuck`` runs: Nutrient documents that no run outlives it.
- Delete is ``DELETE /extraction/runs/{id}`` (204): the runs guide says runs are deleted "with the
  /extraction/runs endpoints" but the exact verb and path were not read (NOTES.md §2.5, an inference).
- Split's output format is the instruction ``output``: ``json`` (default), ``zip`` or ``both`` (S003 names
  the formats, not the field: a GUESS; check the split guide). With ``zip`` or ``both`` the run gains a
  ``zip`` asset at ``/extraction/runs/{id}/assets/zip`` (a GUESS by analogy with ``assets/result``), and
  the result's ``output.downloadUrl`` is its absolute URL, fetched with the same Bearer key; under
  ``nutrient_download_host: other`` it is a presigned URL on the other loopback name
  (``/_storage/{id}.zip?signature=...``), which refuses a request carrying an Authorization (400).
- Under ``nutrient_json_instructions: nested``, a JSON submit for extract, classify or split carries its
  instruction fields under ``instructions`` (the other reading of NU-parse, which shows parse only).
- ``extract`` is not refused without a ``schema`` (NU-extract says it must have one): hookbridge's tests
  submit schema-less extracts throughout. A known gap.
"""

from __future__ import annotations

import hashlib
import heapq
import io
import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, REJECT_MESSAGE, Document, Ending
from ._state import BadRequest, Phase, SimState, Timeline, VendorStore, json_object, sim_state

OPERATIONS = ("parse", "extract", "classify", "split")
# Credits per page by parse mode (NU-price); parse defaults to "understand" (NU-parse).
_CREDITS_PER_PAGE = {"text": 1.0, "structure": 1.5, "understand": 9.0, "agentic": 18.0}
_MAX_KEY_LENGTH = 255
_SPLIT_OUTPUTS = ("json", "zip", "both")


@dataclass
class NutrientRun:
    id: str
    operation: str
    document: Document
    timeline: Timeline
    nominal_finish: float
    timed_out: bool
    cost: float
    idempotency_scope: tuple[str, str, str] | None
    split_output: str | None = None  # json | zip | both, for split runs
    canceled_at: float | None = None
    charged: bool = False

    def status(self, now: float) -> str:
        if self.canceled_at is not None:
            return "canceled"
        phase = self.timeline.phase(now)
        if phase is Phase.QUEUED:
            return "queued"
        if phase is Phase.RUNNING:
            return "running"
        return "done" if self.succeeds else "error"

    @property
    def succeeds(self) -> bool:
        return not self.timed_out and self.document.outcome.ending is Ending.SUCCESS

    def ended_at(self, now: float) -> float | None:
        if self.canceled_at is not None:
            return self.canceled_at
        if self.timeline.phase(now) is Phase.FINISHED:
            return self.timeline.finishes_at
        return None


@dataclass
class NutrientStore(VendorStore):
    vendor = "nutrient"
    runs: dict[str, NutrientRun] = field(default_factory=dict)
    # (api key, operation, Idempotency-Key) -> (request fingerprint, run id)
    idempotency: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
    spent: float = 0.0
    # (finishes_at, run id) of the runs that will reach ``done`` and are not charged yet, soonest first:
    # settling looks only at the runs that finished since the last look, not at every run (a benchmark
    # keeps thousands in flight and polls each of them).
    unsettled: list[tuple[float, str]] = field(default_factory=list)

    def add(self, run: NutrientRun) -> None:
        self.runs[run.id] = run
        if run.succeeds and run.timeline.finishes_at is not None:
            heapq.heappush(self.unsettled, (run.timeline.finishes_at, run.id))

    def settle(self, now: float) -> None:
        """Charge every run that has reached ``done`` since the last look."""
        while self.unsettled and self.unsettled[0][0] <= now:
            _, run_id = heapq.heappop(self.unsettled)
            run = self.runs.get(run_id)
            # A run canceled before it finished never reaches ``done`` and is never charged.
            if run is not None and not run.charged and run.status(now) == "done":
                run.charged = True
                self.spent += run.cost

    def summaries(self, now: float) -> list[tuple[str, str, float, float | None]]:
        """(id, status, created_at, ended or planned end) of every run, for ``GET /_sim/runs``."""
        return [
            (
                run.id,
                run.status(now),
                run.timeline.created_at,
                run.timeline.finishes_at if run.canceled_at is None else run.canceled_at,
            )
            for run in self.runs.values()
        ]

    def all_runs(self) -> Iterable[NutrientRun]:
        return self.runs.values()


def _error(
    state: SimState, status: int, message: str, code: str | None = None, source: str = "request"
) -> JSONResponse:
    body: dict[str, Any] = {"status": status, "requestId": state.new_uuid(), "errorMessage": message}
    if code is not None:
        body["errorDetails"] = {"source": source, "code": code}
    return JSONResponse(body, status_code=status)


def _authorized(request: Request, state: SimState) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and token.strip() == state.config.nutrient_api_key


def _valid_idempotency_key(key: str) -> bool:
    return 1 <= len(key) <= _MAX_KEY_LENGTH and all(" " <= ch <= "~" for ch in key)


def _parse_instructions(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise BadRequest("instructions: not valid JSON") from None
    if not isinstance(raw, dict):
        raise BadRequest("instructions: must be a JSON object")
    return raw


def _reference_document(url: Any, asset_id: Any) -> Document | None:
    if isinstance(url, str) and url:
        return Document(content=url.encode(), url=url, filename=url.rstrip("/").rsplit("/", 1)[-1])
    if isinstance(asset_id, str) and asset_id:
        return Document(content=asset_id.encode(), filename=asset_id)
    return None


async def _parse_submission(request: Request, operation: str) -> tuple[Document, dict[str, Any]]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        async with request.form() as form:
            upload = form.get("file")
            instructions = _parse_instructions(form.get("instructions"))
            if isinstance(upload, UploadFile):
                content = await upload.read()
                if not content:
                    raise BadRequest("file: empty")
                return (
                    Document(content=content, filename=upload.filename, media_type=upload.content_type),
                    instructions,
                )
            if form.get("url") is not None:
                raise BadRequest("url: a multipart upload carries the document as 'file'; send a URL as JSON")
            document = _reference_document(None, form.get("assetId"))
    elif content_type == "application/json":
        body = await json_object(request, "body:")
        nested = operation != "parse" and sim_state(request).config.nutrient_json_instructions == "nested"
        if nested:
            # The other reading of a silent document (NU-parse shows parse only): under ``instructions``.
            extra = sorted(set(body) - {"url", "assetId", "instructions"})
            if extra:
                raise BadRequest(f"{extra[0]}: not a field of a JSON request; put it under instructions")
            instructions = _parse_instructions(body.get("instructions")) if "instructions" in body else {}
        elif "instructions" in body:
            # The JSON format carries the instruction fields at the top level (NU-parse): a nested object
            # is not read by the real API, so it is refused here rather than silently ignored.
            raise BadRequest(
                "instructions: not a field of a JSON request; put mode, output, schema... at the top level"
            )
        else:
            instructions = {k: v for k, v in body.items() if k not in ("url", "assetId")}
        if "url" in body and not (
            isinstance(body["url"], str) and body["url"].startswith(("https://", "http://"))
        ):
            raise BadRequest("url: must be an http(s) URL")
        document = _reference_document(body.get("url"), body.get("assetId"))
    else:
        # The sync parse endpoint takes a raw document body; the async routes "accept the same formats".
        content = await request.body()
        if not content:
            raise BadRequest("no document: send multipart 'file', JSON 'url', or 'assetId'")
        return Document(content=content, media_type=content_type or None), {}
    if document is None:
        raise BadRequest("no document: send multipart 'file', JSON 'url', or 'assetId'")
    return document, instructions


def _check_instructions(operation: str, instructions: dict[str, Any]) -> str | None:
    """Refuses instruction values the documents rule out; returns split's output format."""
    if operation == "parse" and "mode" in instructions and instructions["mode"] not in _CREDITS_PER_PAGE:
        raise BadRequest(f"mode: must be one of {', '.join(_CREDITS_PER_PAGE)}")
    if operation != "split":
        return None
    output = instructions.get("output", "json")
    if output not in _SPLIT_OUTPUTS:
        raise BadRequest(f"output: must be one of {', '.join(_SPLIT_OUTPUTS)}")
    return str(output)


def _fingerprint(instructions: dict[str, Any], document: Document) -> str:
    canonical = json.dumps(instructions, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical + b"\0" + document.content).hexdigest()


def _cost(operation: str, instructions: dict[str, Any], document: Document) -> float:
    # Only parse's per-page prices are published; the other operations are priced like the parse default.
    mode = instructions.get("mode") if operation == "parse" else None
    per_page = _CREDITS_PER_PAGE.get(mode, 9.0) if isinstance(mode, str) else 9.0
    return per_page * document.pages


def _progress(run: NutrientRun, now: float) -> dict[str, Any]:
    fraction = run.timeline.fraction(now, run.nominal_finish)
    percent = min(99, int(fraction * 100))
    if fraction < 0.15:
        phase = "preprocessing"
    elif fraction < 0.6:
        phase = "ocr"
    elif fraction < 0.95:
        phase = "extraction"
    else:
        phase = "finalizing"
    pages = run.document.pages
    return {
        "phase": phase,
        "percent": percent,
        "pagesProcessed": min(pages, int(fraction * pages)),
        "pagesTotal": pages,
    }


def _run_error(run: NutrientRun) -> dict[str, Any]:
    if run.timed_out:
        limit = run.timeline.finishes_at or 0.0
        return {
            "status": 408,
            "message": f"the run exceeded its {limit - run.timeline.starts_at:g} s processing limit",
            "details": {"source": "processing", "code": "processing_timeout"},
        }
    if run.document.outcome.ending is Ending.BILLING:
        return {
            "status": 402,
            "message": "billing failed: the result is withheld and nothing was charged",
            "details": {"source": "billing", "code": "billing_failed"},
        }
    return {
        "status": 422,
        "message": FAILURE_MESSAGE,
        "details": {"source": "processing", "code": "processing_failed"},
    }


def _input_asset(document: Document) -> dict[str, Any]:
    asset: dict[str, Any] = {"name": "input"}
    if document.url is not None:
        asset["url"] = document.url
    else:
        asset.update(filename=document.filename, contentType=document.media_type, size=document.size)
    return asset


def run_json(run: NutrientRun, state: SimState, now: float) -> dict[str, Any]:
    status = run.status(now)
    timeline = run.timeline
    updated = {
        "queued": timeline.created_at,
        "running": timeline.starts_at,
        "canceled": run.canceled_at,
    }.get(status, timeline.finishes_at)
    body: dict[str, Any] = {
        "id": run.id,
        "operation": run.operation,
        "status": status,
        "source": "API",
        "createdAt": state.wall_iso(timeline.created_at),
        "updatedAt": state.wall_iso(updated),
        "usage": {},
        "assets": [_input_asset(run.document)],
        "error": None,
    }
    if status == "running":
        body["progress"] = _progress(run, now)
    elif status == "done":
        body["usage"] = {"data_extraction_credits": {"cost": run.cost}}
        body["assets"].append({"name": "result", "contentType": "application/json"})
        if run.split_output in ("zip", "both"):
            body["assets"].append({"name": "zip", "contentType": "application/zip"})
    elif status == "error":
        body["error"] = _run_error(run)
    return body


def zip_bytes(run: NutrientRun) -> bytes:
    """The split's zip asset: one PDF per split document (the input's bytes stand in for its pages)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("invoice-1.pdf", run.document.content)
        archive.writestr("manifest.json", json.dumps({"documents": [{"file": "invoice-1.pdf"}]}))
    return buffer.getvalue()


def _output(operation: str, document: Document, split_output: str | None = None) -> dict[str, Any]:
    fields = document.fields()
    output: dict[str, Any] = {"fields": fields}
    if operation == "parse":
        output["markdown"] = (
            f"# Invoice {fields['invoice_number']}\n\nTotal: {fields['total']} {fields['currency']}\n"
        )
    elif operation == "classify":
        output["label"] = "invoice"
    elif operation == "split" and split_output != "zip":  # "with zip, the result omits page ranges"
        output["documents"] = [{"label": "invoice", "pages": [1, document.pages]}]
    return output


def _run_response(run: NutrientRun, state: SimState, status_code: int = 200) -> JSONResponse:
    return JSONResponse(run_json(run, state, state.now()), status_code=status_code)


def _accepted(run: NutrientRun, state: SimState, *, replayed: bool) -> JSONResponse:
    response = _run_response(run, state, 202)
    response.headers["location"] = f"/extraction/runs/{run.id}"
    response.headers["x-nutrient-run-id"] = run.id
    if replayed:
        response.headers["idempotency-replayed"] = "true"
    return response


async def submit(request: Request) -> Response:
    state, store = sim_state(request), NutrientStore.of(request)
    config = state.config
    operation = request.path_params["operation"]
    if operation not in OPERATIONS:
        return _error(state, 404, f"unknown operation {operation!r}")
    if not _authorized(request, state):
        return _error(state, 401, "missing, invalid or expired API token")
    key = request.headers.get("idempotency-key")
    if key is not None and not _valid_idempotency_key(key):
        return _error(state, 400, "Idempotency-Key must be 1 to 255 printable characters", "invalid_request")
    try:
        document, instructions = await _parse_submission(request, operation)
        split_output = _check_instructions(operation, instructions)
    except BadRequest as exc:
        return _error(state, 400, str(exc), "invalid_request")
    if document.outcome.reject:
        return _error(state, 400, REJECT_MESSAGE, "invalid_request")
    if instructions.get("storeRun") is False:
        return _error(state, 400, "asynchronous runs are always stored: storeRun false", "invalid_request")

    now = state.now()
    store.settle(now)
    scope = (config.nutrient_api_key, operation, key) if key is not None else None
    fingerprint = _fingerprint(instructions, document)
    if scope is not None and scope in store.idempotency:
        known_fingerprint, run_id = store.idempotency[scope]
        if known_fingerprint != fingerprint:
            return _error(
                state, 409, "another request already uses this Idempotency-Key", "idempotency_key_reused"
            )
        return _accepted(store.runs[run_id], state, replayed=True)

    if config.nutrient_credits is not None and config.nutrient_credits - store.spent <= 0:
        return JSONResponse(
            {"error": "payment_required", "code": "insufficient_credits", "message": "insufficient credits"},
            status_code=402,
        )
    if config.nutrient_rate_enqueue_fail > 0 and state.fault_rng.random() < config.nutrient_rate_enqueue_fail:
        return _error(
            state, 503, "the run could not be queued and nothing was stored", "run_enqueue_failed", "maestro"
        )

    outcome = document.outcome
    timeline = state.new_timeline(slow=outcome.slow, never_finishes=outcome.ending is Ending.STUCK)
    nominal_finish = timeline.finishes_at or timeline.created_at + state.nominal_duration(timeline)
    limit_at = timeline.starts_at + config.nutrient_max_processing_s
    timed_out = timeline.finishes_at is None or timeline.finishes_at > limit_at
    if timed_out:
        timeline = Timeline(timeline.created_at, timeline.starts_at, limit_at)
    run = NutrientRun(
        id=state.new_nutrient_id(),
        operation=operation,
        document=document,
        timeline=timeline,
        nominal_finish=nominal_finish,
        timed_out=timed_out,
        cost=_cost(operation, instructions, document),
        idempotency_scope=scope,
        split_output=split_output,
    )
    store.add(run)
    if scope is not None:
        store.idempotency[scope] = (fingerprint, run.id)
    return _accepted(run, state, replayed=False)


def _lookup(request: Request, *, allow_expired: bool = False) -> NutrientRun | JSONResponse:
    state, store = sim_state(request), NutrientStore.of(request)
    if not _authorized(request, state):
        return _error(state, 401, "missing, invalid or expired API token")
    now = state.now()
    store.settle(now)
    run = store.runs.get(request.path_params["run_id"])
    if run is None:
        return _error(state, 404, "run not found")
    ended_at = run.ended_at(now)
    if not allow_expired and ended_at is not None and now >= ended_at + state.config.nutrient_retention_s:
        return _error(state, 410, "the run has passed its retention window", "run_expired")
    return run


async def run_resource(request: Request) -> Response:
    run = _lookup(request, allow_expired=request.method == "DELETE")
    if isinstance(run, JSONResponse):
        return run
    state = sim_state(request)
    if request.method == "GET":
        if state.config.rate_no_status and state.fault_rng.random() < state.config.rate_no_status:
            answer = run_json(run, state, state.now())
            answer.pop("status", None)
            return JSONResponse(answer)
        return _run_response(run, state)
    # The delete route is an inference: play a vendor without it when told (config.nutrient_delete).
    if state.config.nutrient_delete == "404":
        return _error(state, 404, "not found", "not_found")
    if state.config.nutrient_delete == "405":
        return Response(status_code=405, headers={"allow": "GET"})
    if run.status(state.now()) in ("queued", "running"):
        return _error(state, 409, "the run is still queued or running: cancel it first", "run_in_flight")
    store = NutrientStore.of(request)
    del store.runs[run.id]
    # Deleting a run releases its idempotency key (S003).
    if run.idempotency_scope is not None:
        store.idempotency.pop(run.idempotency_scope, None)
    return Response(status_code=204)


def _finished_run(request: Request) -> tuple[NutrientRun, str] | Response:
    """The run an asset route names and its status, or the answer when it has none yet (409)."""
    run = _lookup(request)
    if isinstance(run, JSONResponse):
        return run
    state = sim_state(request)
    status = run.status(state.now())
    if status in ("queued", "running"):
        return _error(state, 409, f"the run is {status}: no result yet", "run_in_flight")
    return run, status


async def result_asset(request: Request) -> Response:
    found = _finished_run(request)
    if isinstance(found, Response):
        return found
    run, status = found
    state = sim_state(request)
    if status != "done":
        return _error(state, 404, f"the run ended {status} and has no result asset")
    credits: dict[str, Any] = {"cost": run.cost}
    if state.config.nutrient_credits is not None:
        credits["remainingCredits"] = max(
            0.0, state.config.nutrient_credits - NutrientStore.of(request).spent
        )
    output = _output(run.operation, run.document, run.split_output)
    if run.split_output in ("zip", "both"):
        output["downloadUrl"] = str(request.url_for("nutrient_zip", run_id=run.id))
        if state.config.nutrient_download_host == "other":
            # A presigned storage URL on another host (S003 says only that it "points to" the asset): the
            # same server under its other loopback name, so the URL is on another origin yet answers.
            url = request.url_for("nutrient_presigned_zip", run_id=run.id)
            other = "localhost" if url.hostname != "localhost" else "127.0.0.1"
            netloc = f"{other}:{url.port}" if url.port else other
            output["downloadUrl"] = str(url.replace(netloc=netloc)) + f"?signature={_signature(run.id)}"
    return JSONResponse({"output": output, "usage": {"data_extraction_credits": credits}})


async def zip_asset(request: Request) -> Response:
    found = _finished_run(request)
    if isinstance(found, Response):
        return found
    run, status = found
    if status != "done" or run.split_output not in ("zip", "both"):
        return _error(sim_state(request), 404, "the run has no zip asset")
    return Response(zip_bytes(run), media_type="application/zip")


def _signature(run_id: str) -> str:
    return hashlib.sha256(b"presigned:" + run_id.encode()).hexdigest()[:32]


async def presigned_zip(request: Request) -> Response:
    """A storage URL: its query is the credential, and a request carrying another one is refused, as
    presigned storage refuses a second authentication mechanism (400)."""
    state = sim_state(request)
    run_id = request.path_params["run_id"]
    if request.headers.get("authorization") is not None:
        return _error(state, 400, "only one auth mechanism allowed: the URL's signature", "invalid_request")
    if request.query_params.get("signature") != _signature(run_id):
        return _error(state, 403, "the signature does not match")
    run = NutrientStore.of(request).runs.get(run_id)
    if run is None or run.split_output not in ("zip", "both"):
        return _error(state, 404, "no such object")
    return Response(zip_bytes(run), media_type="application/zip")


async def cancel(request: Request) -> Response:
    run = _lookup(request)
    if isinstance(run, JSONResponse):
        return run
    state = sim_state(request)
    now = state.now()
    status = run.status(now)
    if status in ("done", "error"):
        return _error(state, 409, f"the run has already finished ({status})", "run_not_cancelable")
    if status != "canceled":
        run.canceled_at = now
    return _run_response(run, state)


def routes() -> list[BaseRoute]:
    return [
        Route("/extraction/{operation}/async", submit, methods=["POST"]),
        Route("/extraction/runs/{run_id}", run_resource, methods=["GET", "DELETE"]),
        Route("/extraction/runs/{run_id}/assets/result", result_asset, methods=["GET"]),
        Route("/extraction/runs/{run_id}/assets/zip", zip_asset, methods=["GET"], name="nutrient_zip"),
        Route("/extraction/runs/{run_id}/cancel", cancel, methods=["POST"]),
        Route("/_storage/{run_id}.zip", presigned_zip, methods=["GET"], name="nutrient_presigned_zip"),
    ]
