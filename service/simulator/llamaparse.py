"""LlamaParse v2, the LlamaCloud Parse API (next-vendors.md §4), under ``/llamaparse``.

The prefix is the base URL: a client configured with ``base_url = http://host/llamaparse`` sends
``POST {base_url}/api/v2/parse``. Each rule cites the sentence of next-vendors.md it rests on (or the
official SDK, ``llama-cloud`` 2.19, where it is newer), or says the document is silent and which readings
the simulator plays.

Requests:

- "``Authorization: Bearer <key>`` on every endpoint" (§4.1); "**401**: bad or revoked key, wrong header
  format" (§4.7): the key must equal ``llamaparse_api_key`` (``llx-`` form, §4.1). "The error body format
  (for example ``{"detail": ...}``) is **NOT FOUND**": every error is ``{"detail": ...}``, validation errors
  ``{"detail": [{"loc", "msg", "type"}]}`` with 422 (§4.9.1 "422/400 if missing [inference]"): one reading.
- "``tier`` is **required** and is one of ``fast | cost_effective | agentic | agentic_plus``"; "``version`` is
  **required**: a dated string such as ``2026-04-09``, or ``latest``" (§4.2): else 422.
- "Accept exactly one of ``file_id`` or ``source_url``" (§4.9.1) on ``POST /api/v2/parse``; a ``source_url``
  must be an http(s) URL. ``file_id`` is taken as a reference (the Files API is not simulated).
- "Other fields (LP-SDK ``parsing.py`` ``create``)" (§4.2): a top-level field outside that list (the SDK's
  2.19 list, :data:`CREATE_FIELDS`) is refused with 422. The document does not say whether the API
  ignores unknown fields: refusing them catches an adapter that sends v1 names (§4.8 "Do not mix v1 and v2
  shapes").
- "``POST /api/v2/parse/upload`` with a ``file`` part and a ``configuration`` part holding the same options
  as a JSON string" (§4.2): a missing or empty ``file``, or a ``configuration`` that is not a JSON object, is
  422; a ``file_id`` or ``source_url`` beside the file too (one document a job).
- "There is no idempotency key": "A retried POST creates a new job [inference]" (§4.6): every accepted
  POST is a new job (§4.9.7).

Answers:

- "The HTTP status code for a created job (200 vs 201/202): **NOT FOUND**": 200. The body is "a bare job
  object" with ``status`` ``PENDING`` (§4.3, §4.9.2); "The REST guide says 'The response includes a
  ``job.id``'" and the SDK reads a flat ``id``: ``llamaparse_id_shape`` plays ``flat``, ``nested``
  (``{"job": {...}}``), ``both`` (the flat job plus ``job``) or ``random`` (seeded by the job id). The SDK
  cannot read ``nested``: its ``create`` returns a model whose ``id`` is missing.
- "``GET /api/v2/parse/{job_id}?expand=...``", "By default returns job metadata only. The ``job`` object is
  always present, and everything else depends on ``expand``" (§4.4). ``expand`` may repeat or be
  comma-separated (the SDK repeats it); an unknown value is 422. Content appears only once the job is
  ``COMPLETED`` and only for the values asked; "``markdown``, ``markdown_full`` and ``items`` are not
  available on the ``fast`` tier" (§4.5): absent there.
- Statuses: "``PENDING`` and ``RUNNING`` are transient; ``COMPLETED``, ``FAILED`` and ``CANCELLED`` are
  terminal; ``job.error_message`` holds 'Error details when status is FAILED'" (§4.4).
- "``COMPLETED`` can include failed pages" (§4.8; "failed pages appear as ``...FailedMarkdownPage`` and
  ``...FailedStructuredPage`` entries", §4.5): with ``llamaparse_failed_pages`` the last page of every
  completed job is such an entry (§4.9.4).
- "Presigned entries sit in ``result_content_metadata{<name>: {size_bytes (req), exists, presigned_url}}``"
  and are to be used "when the result is large" (§4.5): every ``*_content_metadata`` expand gives one,
  keyed by the name before ``_content_metadata``, whose URL is served by the simulator itself at
  ``/llamaparse-storage/...`` without the API key, on another host where it can
  (``llamaparse_storage_base_url``, else ``127.0.0.1`` and ``localhost`` swapped), like a storage
  bucket's. "Expiry of presigned URLs ...: **NOT FOUND**": ``llamaparse_presign_ttl_s`` (§4.9.3), then
  403 as a storage service answers. Inline content larger than ``llamaparse_inline_max_bytes`` (0 = no
  cap) is left out, so that only the presigned URL carries it: the document does not say that the API
  ever does so; it is the reading that makes a client follow the URLs.
- Cancel: "``POST /api/v2/parse/{job_id}/cancel`` returns the updated job. 'Jobs already in a terminal state
  (COMPLETED, FAILED, CANCELLED) cannot be cancelled'"; "The HTTP status for cancelling a terminal job is
  **NOT FOUND**" (§4.6): ``llamaparse_refusal_status`` (default 400; not 409, which the SDK retries).
- Delete: "**NOT FOUND**" in §4.6, but the SDK 2.19 has it: ``DELETE /api/v2/parse/{job_id}`` "Delete a parse
  job and its results. The job must be in a terminal state ... Returns the identifiers of the deleted
  job" (``{"id", "project_id"}``): a non-terminal job gets ``llamaparse_refusal_status``; afterwards the job
  and its presigned URLs are 404. ``llamaparse_delete`` plays an API without the route: ``404`` (no such
  route) or ``405`` (a router that knows the path but not the method).
- "No Retry-After guidance is documented for polls (NOT FOUND)" (§4.4): ``llamaparse_retry_after`` plays
  a create answer and unfinished polls with ``Retry-After: llamaparse_retry_after_s`` (``always``, per job
  ``random``) or without (``never``, the default).
- "Listing jobs: ``GET /api/v2/parse?page_size=&page_token=&status=``. Response ``{items[], next_page_token,
  total_size}``" (§4.5).

Limits:

- "Parse Upload ... **50 QPS per 10 s window** ... per organization"; "Over the limit: '**429 Too Many
  Requests**'" (§4.7). The page names the v1 route and v2 limits are "**NOT FOUND**": the simulator applies
  ``llamaparse_window_limit`` submits per ``llamaparse_window_s`` (default 50 per 10 s) per key to both v2
  submit routes, and ``llamaparse_429_retry_after`` plays a 429 with or without ``Retry-After``
  (§4.9.5). Polls are not limited by it (NOT FOUND); ``llamaparse_rps`` limits every request.
- "on the Free plan, credit-consuming requests return **402** when credits run out" (§4.7):
  ``llamaparse_credits`` (unset = unlimited) is spent by each finished job (credits per page by tier, a
  GUESS); a submit with none left is 402.

Left out: the other region's host ("401 for a key used against the 'other region' host", §4.9.1), the
Files API and webhooks (§4.9.8: "an undocumented payload").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, REJECT_MESSAGE, Document, Ending
from ._state import LogEntry, Phase, SimState, Timeline, VendorStore, sim_state

TIERS = ("fast", "cost_effective", "agentic", "agentic_plus")
_VERSION = re.compile(r"^(latest|\d{4}-\d{2}-\d{2})$")
# The fields of the SDK's JSON create (llama-cloud 2.19 ``parsing.create``).
CREATE_FIELDS = frozenset(
    {
        "tier",
        "version",
        "agentic_options",
        "client_name",
        "configuration_id",
        "crop_box",
        "disable_cache",
        "fast_options",
        "file_id",
        "http_proxy",
        "input_options",
        "output_options",
        "page_ranges",
        "processing_control",
        "processing_options",
        "source_url",
        "user_metadata",
        "webhook_configuration_ids",
        "webhook_configurations",
    }
)
INLINE_EXPANDS = (
    "text",
    "text_full",
    "markdown",
    "markdown_full",
    "items",
    "metadata",
    "job_metadata",
    "usage",
)
CONTENT_METADATA = (
    "markdown",
    "markdown_full",
    "text",
    "text_full",
    "items",
    "metadata",
    "images",
    "xlsx",
    "output_pdf",
    "raw_words",
    "forms",
)
_NOT_ON_FAST = frozenset({"markdown", "markdown_full", "items"})
_CREDITS_PER_PAGE = {"fast": 1.0, "cost_effective": 3.0, "agentic": 10.0, "agentic_plus": 45.0}  # a GUESS
ID_SHAPES = ("flat", "nested", "both", "random")
STORAGE_PREFIX = "/llamaparse-storage"
PROJECT_ID = "00000000-0000-4000-8000-00000000a11a"


@dataclass
class ParseJob:
    id: str
    tier: str
    document: Document
    timeline: Timeline
    user_metadata: dict[str, str] | None
    canceled_at: float | None = None
    charged: bool = False

    def status(self, now: float) -> str:
        if self.canceled_at is not None:
            return "CANCELLED"
        phase = self.timeline.phase(now)
        if phase is Phase.QUEUED:
            return "PENDING"
        if phase is Phase.RUNNING:
            return "RUNNING"
        return "FAILED" if self.document.outcome.ending is Ending.FAIL else "COMPLETED"

    @property
    def cost(self) -> float:
        return _CREDITS_PER_PAGE[self.tier] * self.document.pages


@dataclass
class LlamaParseStore(VendorStore):
    vendor = "llamaparse"
    jobs: dict[str, ParseJob] = field(default_factory=dict)
    # (key as presented) -> the times of its recent submits, for the fixed-window limit
    submits: dict[str, deque[float]] = field(default_factory=dict)

    def all_runs(self) -> Iterable[ParseJob]:
        return self.jobs.values()

    def spent(self, now: float) -> float:
        total = 0.0
        for job in self.jobs.values():
            if not job.charged and job.status(now) == "COMPLETED":
                job.charged = True
            if job.charged:
                total += job.cost
        return total + self.deleted_spend

    deleted_spend: float = 0.0


def _detail(status: int, detail: Any) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def _invalid(loc: list[str], msg: str, kind: str = "value_error") -> JSONResponse:
    return _detail(422, [{"loc": loc, "msg": msg, "type": kind}])


def _plays(mode: str, seed_text: str) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    return int(hashlib.sha256(seed_text.encode()).hexdigest()[:2], 16) % 2 == 0


def fault_response(status: int, state: SimState, retry_after_s: float | None = None) -> Response:
    """A 429 or an injected 5xx; the body and the 429's ``Retry-After`` are readings (§4.7: NOT FOUND)."""
    if status == 429:
        response = _detail(429, "Too Many Requests")
        if _plays(state.config.llamaparse_429_retry_after, state.new_uuid()):
            response.headers["retry-after"] = str(max(1, math.ceil(retry_after_s or 1.0)))
        return response
    return _detail(status, "Internal Server Error" if status == 500 else "Service Unavailable")


def _authorized(request: Request, state: SimState) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and token.strip() == state.config.llamaparse_api_key


def _unauthorized() -> JSONResponse:
    return _detail(401, "Invalid authentication credentials")


class _Invalid(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _check_config(
    config: dict[str, Any], where: str, allowed: frozenset[str]
) -> tuple[str, dict[str, str] | None]:
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise _Invalid(_invalid([where, unknown[0]], "Extra inputs are not permitted", "extra_forbidden"))
    for name in ("tier", "version"):
        if name not in config:
            raise _Invalid(_invalid([where, name], "Field required", "missing"))
    tier, version = config["tier"], config["version"]
    if tier not in TIERS:
        raise _Invalid(_invalid([where, "tier"], f"Input should be {', '.join(TIERS)}", "enum"))
    if not isinstance(version, str) or not _VERSION.match(version):
        raise _Invalid(_invalid([where, "version"], "Input should be 'latest' or a date YYYY-MM-DD"))
    metadata = config.get("user_metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise _Invalid(_invalid([where, "user_metadata"], "Input should be a dictionary of strings"))
    return str(tier), metadata


def _reference(config: dict[str, Any], where: str) -> Document:
    file_id, url = config.get("file_id"), config.get("source_url")
    if (file_id is None) == (url is None):
        raise _Invalid(_invalid([where], "Provide exactly one of file_id or source_url"))
    if url is not None:
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise _Invalid(
                _invalid([where, "source_url"], "Input should be a valid http(s) URL", "url_parsing")
            )
        return Document(content=url.encode(), url=url, filename=url.rstrip("/").rsplit("/", 1)[-1])
    if not isinstance(file_id, str) or not file_id:
        raise _Invalid(_invalid([where, "file_id"], "Input should be a non-empty string", "string_type"))
    return Document(content=file_id.encode(), filename=file_id)


async def _json_submission(request: Request) -> tuple[Document, str, dict[str, str] | None]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise _Invalid(_invalid(["body"], "JSON decode error", "json_invalid")) from None
    if not isinstance(body, dict):
        raise _Invalid(_invalid(["body"], "Input should be a valid dictionary", "dict_type"))
    tier, metadata = _check_config(body, "body", CREATE_FIELDS)
    return _reference(body, "body"), tier, metadata


async def _upload_submission(request: Request) -> tuple[Document, str, dict[str, str] | None]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "multipart/form-data":
        raise _Invalid(_invalid(["body", "file"], "Field required", "missing"))
    async with request.form() as form:
        upload, raw = form.get("file"), form.get("configuration")
        if not isinstance(upload, UploadFile):
            raise _Invalid(_invalid(["body", "file"], "Field required", "missing"))
        content = await upload.read()
        if not content:
            raise _Invalid(_invalid(["body", "file"], "The uploaded file is empty"))
        document = Document(content=content, filename=upload.filename, media_type=upload.content_type)
    if not isinstance(raw, str):
        raise _Invalid(_invalid(["body", "configuration"], "Field required", "missing"))
    try:
        config = json.loads(raw)
    except json.JSONDecodeError:
        raise _Invalid(_invalid(["body", "configuration"], "Invalid JSON", "json_invalid")) from None
    if not isinstance(config, dict):
        raise _Invalid(_invalid(["body", "configuration"], "Input should be a valid dictionary", "dict_type"))
    if config.get("file_id") is not None or config.get("source_url") is not None:
        raise _Invalid(_invalid(["body", "configuration"], "An upload carries its document as 'file' only"))
    tier, metadata = _check_config(config, "configuration", CREATE_FIELDS)
    return document, tier, metadata


def job_json(job: ParseJob, state: SimState, now: float) -> dict[str, Any]:
    status = job.status(now)
    timeline = job.timeline
    updated = {
        "PENDING": timeline.created_at,
        "RUNNING": timeline.starts_at,
        "CANCELLED": job.canceled_at,
    }.get(status, timeline.finishes_at)
    return {
        "id": job.id,
        "project_id": PROJECT_ID,
        "status": status,
        "created_at": state.wall_iso(timeline.created_at),
        "updated_at": state.wall_iso(updated),
        "error_message": FAILURE_MESSAGE if status == "FAILED" else None,
        "name": job.document.filename,
        "tier": job.tier,
        "usage": {"credits": job.cost if status == "COMPLETED" else None},
        "user_metadata": job.user_metadata,
    }


def _created(job: ParseJob, state: SimState) -> Response:
    body = job_json(job, state, state.now())
    shape = state.config.llamaparse_id_shape
    if shape == "random":
        shape = "flat" if _plays("random", job.id) else "nested"
    if shape == "nested":
        body = {"job": body}
    elif shape == "both":
        body = {**body, "job": dict(body)}
    return _paced(JSONResponse(body), job, state)


def _paced(response: Response, job: ParseJob, state: SimState) -> Response:
    """The answer about an unfinished job, with ``Retry-After`` where ``llamaparse_retry_after`` plays it."""
    if job.status(state.now()) in ("PENDING", "RUNNING") and _plays(
        state.config.llamaparse_retry_after, job.id
    ):
        response.headers["retry-after"] = str(state.config.llamaparse_retry_after_s)
    return response


async def _submit(request: Request, *, upload: bool) -> Response:
    state, store = sim_state(request), LlamaParseStore.of(request)
    config = state.config
    if not _authorized(request, state):
        return _unauthorized()
    now = state.now()
    key = request.headers.get("authorization", "")
    if config.llamaparse_window_limit > 0:
        window = store.submits.setdefault(key, deque())
        while window and window[0] <= now - config.llamaparse_window_s:
            window.popleft()
        if len(window) >= config.llamaparse_window_limit:
            return fault_response(429, state, window[0] + config.llamaparse_window_s - now)
        window.append(now)
    try:
        document, tier, metadata = await (
            _upload_submission(request) if upload else _json_submission(request)
        )
    except _Invalid as invalid:
        return invalid.response
    if document.outcome.reject:
        return _detail(400, REJECT_MESSAGE)
    if config.llamaparse_credits is not None and config.llamaparse_credits - store.spent(now) <= 0:
        return _detail(402, "Insufficient credits: the free plan's credits are used up")
    timeline = state.new_timeline(
        slow=document.outcome.slow, never_finishes=document.outcome.ending is Ending.STUCK
    )
    job = ParseJob(
        id=state.new_uuid(), tier=tier, document=document, timeline=timeline, user_metadata=metadata
    )
    store.jobs[job.id] = job
    return _created(job, state)


async def create(request: Request) -> Response:
    return await _submit(request, upload=False)


async def upload(request: Request) -> Response:
    return await _submit(request, upload=True)


def _pages(job: ParseJob, failed_last: bool) -> list[tuple[int, str | None]]:
    """(page number, its text, or None for a failed page)."""
    fields = job.document.fields()
    total = job.document.pages
    return [
        (
            n,
            None
            if failed_last and n == total
            else f"Invoice {fields['invoice_number']}\nTotal {fields['total']} {fields['currency']} "
            f"(page {n})",
        )
        for n in range(1, total + 1)
    ]


def content(job: ParseJob, name: str, failed_pages: bool) -> Any:
    """One expand value of a completed job; None where the tier gives none."""
    if job.tier == "fast" and name in _NOT_ON_FAST:
        return None
    pages = _pages(job, failed_pages)
    if name == "text":
        return {"pages": [{"page_number": n, "text": t or ""} for n, t in pages]}
    if name == "text_full":
        return "\n\n".join(t for _, t in pages if t)
    if name == "markdown":
        return {
            "pages": [
                {"page_number": n, "markdown": f"# {t}", "success": True}
                if t is not None
                else {"page_number": n, "error": FAILURE_MESSAGE, "success": False}
                for n, t in pages
            ]
        }
    if name == "markdown_full":
        return "\n\n".join(f"# {t}" for _, t in pages if t)
    if name == "items":
        return {
            "pages": [
                {
                    "page_number": n,
                    "page_width": 612.0,
                    "page_height": 792.0,
                    "success": True,
                    "items": [
                        {
                            "type": "heading",
                            "level": 1,
                            "value": t.splitlines()[0],
                            "md": f"# {t.splitlines()[0]}",
                        },
                        {"type": "text", "value": t.splitlines()[1], "md": t.splitlines()[1]},
                    ],
                }
                if t is not None
                else {"page_number": n, "error": FAILURE_MESSAGE, "success": False}
                for n, t in pages
            ]
        }
    if name == "metadata":
        return {"pages": [{"page_number": n, "confidence": 0.0 if t is None else 0.97} for n, t in pages]}
    if name == "job_metadata":
        return {"pages": len(pages), "tier": job.tier, "sha256": job.document.sha256}
    return None


def _storage_base(request: Request, state: SimState) -> str:
    configured = state.config.llamaparse_storage_base_url
    if configured:
        return configured.rstrip("/")
    parts = urlsplit(str(request.base_url))
    host = parts.hostname or "localhost"
    other = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}.get(host, host)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{other}{port}"


def _signature(state: SimState, path: str, expires: int) -> str:
    secret = f"sim-storage:{state.config.seed}".encode()
    return hmac.new(secret, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()


def _content_bytes(job: ParseJob, name: str, failed_pages: bool) -> bytes | None:
    value = content(job, name, failed_pages)
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


def _expands(request: Request) -> list[str] | Response:
    names: list[str] = []
    for raw in request.query_params.getlist("expand"):
        names.extend(v.strip() for v in raw.split(",") if v.strip())
    known = set(INLINE_EXPANDS) | {f"{n}_content_metadata" for n in CONTENT_METADATA}
    for name in names:
        if name not in known:
            return _invalid(["query", "expand"], f"Unknown expand value {name!r}", "enum")
    return names


def _job(request: Request, state: SimState) -> ParseJob | Response:
    if not _authorized(request, state):
        return _unauthorized()
    job = LlamaParseStore.of(request).jobs.get(request.path_params["job_id"])
    if job is None:
        return _detail(404, "Parse job not found")
    return job


async def get_job(request: Request) -> Response:
    state = sim_state(request)
    found = _job(request, state)
    if isinstance(found, Response):
        return found
    expands = _expands(request)
    if isinstance(expands, Response):
        return expands
    job, config, now = found, state.config, state.now()
    body: dict[str, Any] = {"job": job_json(job, state, now)}
    if job.status(now) != "COMPLETED":
        return _paced(JSONResponse(body), job, state)
    metadata: dict[str, Any] = {}
    for name in expands:
        if name == "usage":
            continue  # carried by job.usage
        if name.endswith("_content_metadata"):
            base = name.removesuffix("_content_metadata")
            data = _content_bytes(job, base, config.llamaparse_failed_pages)
            entry: dict[str, Any] = {"size_bytes": len(data or b""), "exists": data is not None}
            if data is not None:
                path = f"{STORAGE_PREFIX}/{job.id}/{base}"
                expires = int(state.clock.time() + config.llamaparse_presign_ttl_s)
                signature = _signature(state, path, expires)
                entry["presigned_url"] = (
                    f"{_storage_base(request, state)}{path}?X-Expires={expires}&X-Signature={signature}"
                )
            metadata[base] = entry
            continue
        value = content(job, name, config.llamaparse_failed_pages)
        if value is None:
            continue
        size = len(value.encode() if isinstance(value, str) else json.dumps(value).encode())
        if config.llamaparse_inline_max_bytes and size > config.llamaparse_inline_max_bytes:
            continue
        body[name] = value
    if metadata:
        body["result_content_metadata"] = metadata
    return JSONResponse(body)


async def cancel_job(request: Request) -> Response:
    state = sim_state(request)
    found = _job(request, state)
    if isinstance(found, Response):
        return found
    now = state.now()
    status = found.status(now)
    if status in ("COMPLETED", "FAILED", "CANCELLED"):
        return _detail(state.config.llamaparse_refusal_status, f"The job is {status} and cannot be cancelled")
    found.canceled_at = now
    return JSONResponse(job_json(found, state, now))


async def delete_job(request: Request) -> Response:
    state = sim_state(request)
    if state.config.llamaparse_delete == "404":
        return _detail(404, "Not Found")
    if state.config.llamaparse_delete == "405":
        return _detail(405, "Method Not Allowed")
    found = _job(request, state)
    if isinstance(found, Response):
        return found
    store, now = LlamaParseStore.of(request), state.now()
    status = found.status(now)
    if status not in ("COMPLETED", "FAILED", "CANCELLED"):
        return _detail(
            state.config.llamaparse_refusal_status, f"The job is {status}: cancel it before deleting it"
        )
    store.spent(now)  # settle its cost before it goes
    if found.charged:
        store.deleted_spend += found.cost
    del store.jobs[found.id]
    return JSONResponse({"id": found.id, "project_id": PROJECT_ID})


async def list_jobs(request: Request) -> Response:
    state = sim_state(request)
    if not _authorized(request, state):
        return _unauthorized()
    now = state.now()
    wanted = request.query_params.get("status")
    items = [
        job_json(job, state, now)
        for job in LlamaParseStore.of(request).jobs.values()
        if wanted is None or job.status(now) == wanted
    ]
    return JSONResponse({"items": items, "next_page_token": None, "total_size": len(items)})


async def storage_object(request: Request) -> Response:
    """A presigned download, as a storage service serves it: no API key, the signature and expiry in the
    query, S3-like XML errors. Logged under ``llamaparse``, outside its rate limit and faults."""
    state = sim_state(request)
    entry = LogEntry(t=state.clock.time(), vendor="llamaparse", method=request.method, path=request.url.path)
    state.log.append(entry)
    response = _storage_answer(request, state)
    entry.status = response.status_code
    return response


def _s3_error(status: int, code: str, message: str) -> Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    )
    return Response(body, status_code=status, media_type="application/xml")


def _storage_answer(request: Request, state: SimState) -> Response:
    path = request.url.path
    try:
        expires = int(request.query_params.get("X-Expires", ""))
    except ValueError:
        return _s3_error(403, "AccessDenied", "Request is missing a valid signature")
    signature = request.query_params.get("X-Signature", "")
    if not hmac.compare_digest(signature, _signature(state, path, expires)):
        return _s3_error(403, "SignatureDoesNotMatch", "The request signature does not match")
    if state.clock.time() > expires:
        return _s3_error(403, "AccessDenied", "Request has expired")
    job = LlamaParseStore.of(request).jobs.get(request.path_params["job_id"])
    name = request.path_params["name"]
    data = None if job is None else _content_bytes(job, name, state.config.llamaparse_failed_pages)
    if data is None:
        return _s3_error(404, "NoSuchKey", "The specified key does not exist.")
    media = {"markdown_full": "text/markdown", "text_full": "text/plain"}.get(name, "application/json")
    return Response(data, media_type=media)


def routes() -> list[BaseRoute]:
    return [
        Route("/api/v2/parse", create, methods=["POST"]),
        Route("/api/v2/parse", list_jobs, methods=["GET"]),
        Route("/api/v2/parse/upload", upload, methods=["POST"]),
        Route("/api/v2/parse/{job_id}", get_job, methods=["GET"]),
        Route("/api/v2/parse/{job_id}", delete_job, methods=["DELETE"]),
        Route("/api/v2/parse/{job_id}/cancel", cancel_job, methods=["POST"]),
    ]


def storage_routes() -> list[BaseRoute]:
    return [Route("/{job_id}/{name}", storage_object, methods=["GET"])]
