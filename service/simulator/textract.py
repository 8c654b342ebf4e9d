"""AWS Textract's asynchronous operations (next-vendors.md §2), under ``/textract``: the AWS JSON 1.1
protocol, so ``boto3.client("textract", endpoint_url=SIM + "/textract")`` drives it.

moto has a Textract of its own (moto/textract/models.py, 157 lines): it answers at once, ignores
``ClientRequestToken`` ("not yet implemented"), never pages, and has no expense analysis, throttling,
concurrency cap or expiry. Every rule that breaks a naive adapter is missing there, so this is ours; it
reads the document from moto's S3 (storage.py).

Each rule and the sentence of next-vendors.md it rests on (§2.x; "ND" = not documented there, and what
the simulator plays):

- "Every operation is ``POST /``", "``X-Amz-Target: Textract.<Operation>`` and ``Content-Type:
  application/x-amz-json-1.1``, signed with SigV4 (service name ``textract``)" (§2.1, §2.9.1). A missing
  or unknown target: ND; 400 ``UnknownOperationException``. Another content type: ND; 400
  ``SerializationException``. Auth (§2.9.1, "Reject an unsigned or missing Authorization header"): a
  missing header is 400 ``MissingAuthenticationTokenException``; an unknown access key 400
  ``UnrecognizedClientException``; a scope of another region or service, a stale ``X-Amz-Date`` (over 15
  minutes) or, with ``textract_sigv4=verify``, a signature that botocore's own signer does not reproduce
  with the configured dummy credentials, 400 ``InvalidSignatureException`` (codes and statuses ND; the
  ones AWS JSON services send).
- "Required: ``DocumentLocation`` and ``FeatureTypes``" (§2.2) and "Input must be
  ``DocumentLocation.S3Object{Bucket,Name}``. Inline bytes, URLs and a missing ``FeatureTypes`` are
  rejected with 400 ``InvalidParameterException``. A missing object gives 400
  ``InvalidS3ObjectException``" (§2.9.2). ``FeatureTypes`` values: TABLES, FORMS, QUERIES, SIGNATURES,
  LAYOUT (§2.2). QUERIES without ``QueriesConfig`` or the reverse: ND; refused. Unknown body fields: ND;
  400 ``InvalidParameterException`` (botocore never sends one).
- "``ClientRequestToken`` 1-64 characters, ``^[a-zA-Z0-9-_]+$``; ``JobTag`` 1-64, ``[a-zA-Z0-9_.\\-:]+``;
  ``KMSKeyId`` ≤ 2048" and "``SNSTopicArn`` and ``RoleArn`` are both marked required" (§2.2).
- Formats and limits "JPEG, PNG, TIFF, PDF"; "StartExpenseAnalysis lists JPEG, PNG and PDF"; "JPEG/PNG
  are limited to 10 MB, and PDF/TIFF to 500 MB" (§2.2): 400 ``UnsupportedDocumentException`` and
  ``DocumentTooLargeException``. "JPEG/PNG sent to async count as single-page" (§2.8). A PDF's pages: ND;
  the ``/Type /Page`` objects in its first 64 KiB, else 1-5 drawn from its bytes.
- "HTTP 200 ``{"JobId": "string"}``: 1-64 characters" (§2.3): 64 hex digits.
- Idempotency (§2.6): "same token + same Start operation + same input → same JobId"; "any changed
  parameter → ``IdempotentParameterMismatchException`` (HTTP 400)"; "same token on a different Start
  operation → succeeds as a new job"; "the token lives 7 days" (``textract_job_lifetime_s``). See
  :func:`idempotency`.
- Get* "``MaxResults`` ≥ 1; values above 1,000 are capped at 1,000, and the default is 1,000;
  ``NextToken`` 1-255 characters" (§2.4); GetExpenseAnalysis pages ExpenseDocuments: ND here, the
  simulator caps them at 20. ``textract_page_blocks`` lowers the cap so that any adapter sees pages.
  "Call Get* again with ``NextToken`` until no token comes back"; "``DocumentMetadata`` is returned in
  every page" (§2.5); see :func:`page_window`. A NextToken of another job or a made-up one: ND; 400
  ``InvalidParameterException``.
- ``JobStatus`` "IN_PROGRESS|SUCCEEDED|FAILED|PARTIAL_SUCCESS"; FAILED carries ``StatusMessage``;
  "``PARTIAL_SUCCESS``: a terminal state ... ``Warnings[]`` lists per-page error codes" and "is terminal
  and still has Blocks" (§2.4, §2.9.5). The document picks the ending (``_documents.py``'s markers, and
  ``partial`` for PARTIAL_SUCCESS). Which error code a warning carries: ND; ``PAGE_PROCESSING_FAILED``
  on the last page, whose Blocks are left out; Warnings on every page, like DocumentMetadata: ND.
- "throttling arrives as HTTP 400 (``ProvisionedThroughputExceededException``) or HTTP 500
  (``ThrottlingException``), never 429"; "the concurrency limit is ``LimitExceededException``, also HTTP
  400" (§2.7): ``textract_rate_throughput``, ``textract_rate_throttling``, ``textract_rps`` (the
  middleware's bucket, per access key) and ``textract_max_concurrent_jobs`` (running jobs per Start
  operation). Errors are JSON 1.1 ``{"__type", "message"}`` (§2.7 "[inference from the awsJson1.1
  protocol]") with the ``x-amzn-ErrorType`` header.
- "The job ID and the results die after 7 days ... ``InvalidJobIdException``" (§2.8, §2.9.7); a Get of
  another operation's job: ND, the same error.
- No cancel or delete (§2.6), no ``Retry-After`` (§2.4): none here. SNS (§2.9.8, optional): not played.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import random
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._documents import FAILURE_MESSAGE, Document, Ending
from ._state import Phase, SimState, Timeline, VendorStore, bounded_body, sim_state
from .config import SimulatorConfig
from .storage import Storage, StorageDown

CONTENT_TYPE = "application/x-amz-json-1.1"
MAX_BODY = 256 * 1024
_SKEW_S = 15 * 60
_BLOCK_CAP = 1000
_EXPENSE_CAP = 20
_MB = 1024 * 1024
_TOKEN_RE = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")
_JOBTAG_RE = re.compile(r"^[a-zA-Z0-9_.\-:]{1,64}$")
_FEATURES = frozenset(("TABLES", "FORMS", "QUERIES", "SIGNATURES", "LAYOUT"))
_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/\s,]+)/(?P<date>\d{8})/(?P<region>[^/\s,]+)/"
    r"(?P<service>[^/\s,]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;\-]+), ?"
    r"Signature=(?P<sig>[0-9a-f]{64})$"
)

Kind = Literal["analysis", "text", "expense"]
STARTS: dict[str, Kind] = {
    "StartDocumentAnalysis": "analysis",
    "StartDocumentTextDetection": "text",
    "StartExpenseAnalysis": "expense",
}
GETS: dict[str, Kind] = {
    "GetDocumentAnalysis": "analysis",
    "GetDocumentTextDetection": "text",
    "GetExpenseAnalysis": "expense",
}
_START_FIELDS: dict[Kind, frozenset[str]] = {
    "text": frozenset(
        (
            "ClientRequestToken",
            "DocumentLocation",
            "JobTag",
            "KMSKeyId",
            "NotificationChannel",
            "OutputConfig",
        )
    ),
}
_START_FIELDS["expense"] = _START_FIELDS["text"]
_START_FIELDS["analysis"] = _START_FIELDS["text"] | {"FeatureTypes", "QueriesConfig", "AdaptersConfig"}
_MODEL_VERSION = {
    "analysis": "AnalyzeDocumentModelVersion",
    "text": "DetectDocumentTextModelVersion",
    "expense": "AnalyzeExpenseModelVersion",
}


class TextractError(Exception):
    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status, self.type, self.message = status, type_, message


def _bad(message: str) -> TextractError:
    return TextractError(400, "InvalidParameterException", message)


def error_response(status: int, type_: str, message: str) -> Response:
    return JSONResponse(
        {"__type": type_, "message": message},
        status_code=status,
        media_type=CONTENT_TYPE,
        headers={"x-amzn-RequestId": str(uuid.uuid4()), "x-amzn-ErrorType": type_},
    )


def fault_response(status: int, state: SimState, retry_after_s: float | None = None) -> Response:
    """The middleware's rate-limit refusal (never a 429: §2.7) and injected server errors."""
    del state, retry_after_s  # no Retry-After is documented (§2.4, §3.4)
    if status == 429:
        return error_response(
            400, "ProvisionedThroughputExceededException", "You exceeded your throughput limit."
        )
    return error_response(500, "InternalServerError", "Internal server error. Try your call again.")


# Decisions -----------------------------------------------------------------------------------------


def idempotency(existing_fingerprint: str | None, fingerprint: str) -> Literal["new", "replay", "mismatch"]:
    """What a Start with a ClientRequestToken does, given the live job already holding that token for the
    same operation (None: no such job, or it expired)."""
    if existing_fingerprint is None:
        return "new"
    return "replay" if existing_fingerprint == fingerprint else "mismatch"


def job_status(ending: str, phase: Phase) -> str:
    """JobStatus from the job's planned ending and where its timeline is."""
    if phase is not Phase.FINISHED:
        return "IN_PROGRESS"
    return {"fail": "FAILED", "partial": "PARTIAL_SUCCESS"}.get(ending, "SUCCEEDED")


def page_window(total: int, offset: int, max_results: int | None, cap: int) -> tuple[int, int | None]:
    """(end, next offset or None) of the page starting at ``offset``: ``MaxResults`` defaults to the cap
    and is capped by it."""
    size = cap if max_results is None else min(max_results, cap)
    end = min(total, offset + size)
    return end, (end if end < total else None)


def scope_problem(
    match: re.Match[str], config: SimulatorConfig, amz_date: str | None, now: float
) -> TextractError | None:
    """What is wrong with a well-formed Authorization header's scope and date, apart from the signature."""
    if match["key"] != config.textract_access_key_id:
        return TextractError(
            400, "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    if match["service"] != "textract":
        return TextractError(
            400, "InvalidSignatureException", "Credential should be scoped to correct service: 'textract'."
        )
    if match["region"] != config.textract_region:
        return TextractError(
            400,
            "InvalidSignatureException",
            f"Credential should be scoped to a valid region, not '{match['region']}'.",
        )
    if amz_date is None or "x-amz-date" not in match["signed"].split(";"):
        return TextractError(400, "IncompleteSignatureException", "X-Amz-Date must be present and signed.")
    try:
        stamp = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return TextractError(400, "IncompleteSignatureException", "X-Amz-Date is not in ISO 8601 basic form.")
    if not amz_date.startswith(match["date"]):
        return TextractError(400, "InvalidSignatureException", "Credential date does not match X-Amz-Date.")
    if abs(stamp - now) > _SKEW_S:
        return TextractError(400, "InvalidSignatureException", "Signature expired.")
    return None


# Jobs ----------------------------------------------------------------------------------------------


@dataclass
class Job:
    id: str
    kind: Kind
    fingerprint: str
    document: Document
    pages: int
    ending: str
    queries: list[dict[str, Any]]
    timeline: Timeline

    def status(self, now: float) -> str:
        return job_status(self.ending, self.timeline.phase(now))


@dataclass
class TextractStore(VendorStore):
    vendor = "textract"
    jobs: dict[str, Job] = field(default_factory=dict)
    # (kind, ClientRequestToken) -> JobId
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random("textract"))

    def all_runs(self) -> Iterable[Job]:
        return self.jobs.values()

    def live(self, job_id: str, now: float, lifetime: float) -> Job | None:
        job = self.jobs.get(job_id)
        if job is None:
            return None
        if now >= job.timeline.created_at + lifetime:
            del self.jobs[job_id]  # expired: gone for good, which also bounds memory
            return None
        return job


def _check_signature(request: Request, body: bytes, config: SimulatorConfig, now: float) -> None:
    header = request.headers.get("authorization")
    if not header:
        raise TextractError(400, "MissingAuthenticationTokenException", "Missing Authentication Token")
    match = _AUTH_RE.match(header)
    if match is None:
        raise TextractError(
            400, "IncompleteSignatureException", "Authorization header is not a SigV4 (AWS4-HMAC-SHA256) one."
        )
    problem = scope_problem(match, config, request.headers.get("x-amz-date"), now)
    if problem is not None:
        raise problem
    if config.textract_sigv4 == "verify" and not _signature_matches(request, body, match, config):
        raise TextractError(
            400,
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided.",
        )


def _signature_matches(request: Request, body: bytes, match: re.Match[str], config: SimulatorConfig) -> bool:
    """Recomputes the signature with botocore's own signer over the headers the client signed (without
    botocore installed, only the form, key, scope and date are checked)."""
    try:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
    except ImportError:
        return True

    signed = match["signed"].split(";")
    headers = {name: request.headers.get(name, "") for name in signed}
    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string", b"")
    url = f"http://{headers.get('host', request.url.netloc)}{raw_path.decode('latin-1')}"
    if query:
        url += "?" + query.decode("latin-1")
    aws = AWSRequest(method=request.method, url=url, headers=headers, data=body)
    aws.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(
        Credentials(config.textract_access_key_id, config.textract_secret_access_key),
        "textract",
        config.textract_region,
    )
    canonical = signer.canonical_request(aws)
    expected = signer.signature(signer.string_to_sign(aws, canonical), aws)
    return bool(expected == match["sig"])


def _validate_start(kind: Kind, body: dict[str, Any]) -> tuple[str, str, str | None]:
    """The S3 object (bucket, name, version) of a valid Start body; TextractError otherwise."""
    unknown = sorted(set(body) - _START_FIELDS[kind])
    if unknown:
        raise _bad(f"Unknown parameter(s): {', '.join(unknown)}")
    location = body.get("DocumentLocation")
    if (
        not isinstance(location, dict)
        or set(location) != {"S3Object"}
        or not isinstance(location["S3Object"], dict)
    ):
        raise _bad(
            "DocumentLocation must be {S3Object: {Bucket, Name, Version?}}: documents come from S3 only"
        )
    s3 = location["S3Object"]
    bucket, name, version = s3.get("Bucket"), s3.get("Name"), s3.get("Version")
    if set(s3) - {"Bucket", "Name", "Version"} or not isinstance(bucket, str) or not isinstance(name, str):
        raise _bad("DocumentLocation.S3Object needs Bucket and Name (strings)")
    if not 1 <= len(bucket) <= 255 or not 1 <= len(name) <= 1024:
        raise _bad("S3Object Bucket must be 1-255 characters and Name 1-1024")
    if version is not None and (not isinstance(version, str) or not version):
        raise _bad("S3Object Version must be a non-empty string")
    token = body.get("ClientRequestToken")
    if token is not None and (not isinstance(token, str) or not _TOKEN_RE.match(token)):
        raise _bad("ClientRequestToken must be 1-64 characters of [a-zA-Z0-9-_]")
    tag = body.get("JobTag")
    if tag is not None and (not isinstance(tag, str) or not _JOBTAG_RE.match(tag)):
        raise _bad("JobTag must be 1-64 characters of [a-zA-Z0-9_.\\-:]")
    kms = body.get("KMSKeyId")
    if kms is not None and (not isinstance(kms, str) or not 1 <= len(kms) <= 2048):
        raise _bad("KMSKeyId must be 1-2048 characters")
    channel = body.get("NotificationChannel")
    if channel is not None and (
        not isinstance(channel, dict)
        or not all(isinstance(channel.get(k), str) and channel[k] for k in ("SNSTopicArn", "RoleArn"))
    ):
        raise _bad("NotificationChannel needs SNSTopicArn and RoleArn")
    output = body.get("OutputConfig")
    if output is not None and (not isinstance(output, dict) or not isinstance(output.get("S3Bucket"), str)):
        raise _bad("OutputConfig needs S3Bucket")
    if kind == "analysis":
        _validate_features(body)
    return bucket, name, version


def _validate_features(body: dict[str, Any]) -> None:
    features = body.get("FeatureTypes")
    if not isinstance(features, list) or not features:
        raise _bad("FeatureTypes is required: a non-empty list")
    if not all(isinstance(f, str) and f in _FEATURES for f in features):
        raise _bad(f"FeatureTypes members must be among {', '.join(sorted(_FEATURES))}")
    queries = body.get("QueriesConfig")
    if ("QUERIES" in features) != (queries is not None):
        raise _bad("QueriesConfig is required with, and only with, the QUERIES feature type")
    if queries is None:
        return
    items = queries.get("Queries") if isinstance(queries, dict) else None
    if not isinstance(items, list) or not items:
        raise _bad("QueriesConfig.Queries must be a non-empty list")
    for query in items:
        if not isinstance(query, dict) or set(query) - {"Text", "Alias", "Pages"}:
            raise _bad("each query is {Text, Alias?, Pages?}")
        text = query.get("Text")
        if not isinstance(text, str) or not 1 <= len(text) <= 200:
            raise _bad("a query's Text must be 1-200 characters")
        alias, pages = query.get("Alias"), query.get("Pages")
        if alias is not None and not isinstance(alias, str):
            raise _bad("a query's Alias must be a string")
        if pages is not None and (not isinstance(pages, list) or not all(isinstance(p, str) for p in pages)):
            raise _bad("a query's Pages must be a list of strings")


def _sniff(head: bytes) -> str | None:
    if head.startswith(b"%PDF"):
        return "pdf"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    return None


def _check_format(kind: Kind, kind_of_file: str | None, size: int) -> None:
    allowed = ("pdf", "png", "jpeg") if kind == "expense" else ("pdf", "png", "jpeg", "tiff")
    if kind_of_file not in allowed:
        raise TextractError(400, "UnsupportedDocumentException", "Request has unsupported document format")
    limit = 10 * _MB if kind_of_file in ("png", "jpeg") else 500 * _MB
    if size > limit:
        raise TextractError(
            400,
            "DocumentTooLargeException",
            "S3 object size is more than the maximum limit (500 MB for PDF files)",
        )


def _page_count(kind_of_file: str, document: Document) -> int:
    if kind_of_file in ("png", "jpeg"):
        return 1  # "JPEG/PNG sent to async count as single-page" (§2.8)
    pages = len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", document.content))
    return min(pages, 3000) if pages else document.pages


async def _start(request: Request, kind: Kind, body: dict[str, Any], state: SimState) -> Response:
    bucket, name, version = _validate_start(kind, body)
    store: TextractStore = TextractStore.of(request)
    config, now = state.config, state.now()
    fingerprint = json.dumps({k: v for k, v in body.items() if k != "ClientRequestToken"}, sort_keys=True)
    token = body.get("ClientRequestToken")
    if token is not None:
        held = store.tokens.get((kind, token))
        job = store.live(held, now, config.textract_job_lifetime_s) if held else None
        decision = idempotency(job.fingerprint if job else None, fingerprint)
        if decision == "replay" and job is not None:
            return JSONResponse({"JobId": job.id}, media_type=CONTENT_TYPE)
        if decision == "mismatch":
            raise TextractError(
                400,
                "IdempotentParameterMismatchException",
                "A ClientRequestToken input parameter was reused with an operation, but at least one of the "
                "other input parameters is different from the previous call to the operation.",
            )
    cap = config.textract_max_concurrent_jobs
    if (
        cap
        and sum(1 for j in store.jobs.values() if j.kind == kind and j.status(now) == "IN_PROGRESS") >= cap
    ):
        raise TextractError(400, "LimitExceededException", "Too many concurrent jobs; try again later.")
    storage: Storage = request.app.state.storage
    try:
        sample = await storage.s3_sample(bucket, name, version)
    except StorageDown:
        raise TextractError(
            400, "InvalidS3ObjectException", "The simulator's S3 emulator is not running (pip install moto)."
        ) from None
    if sample is None:
        raise TextractError(
            400,
            "InvalidS3ObjectException",
            "Unable to get object metadata from S3. Check object key, region and/or access permissions.",
        )
    kind_of_file = _sniff(sample.head)
    _check_format(kind, kind_of_file, sample.size)
    assert kind_of_file is not None
    document = Document(content=sample.head, filename=name)
    if document.outcome.reject:
        raise TextractError(400, "BadDocumentException", "Amazon Textract isn't able to read the document.")
    ending = {Ending.FAIL: "fail", Ending.STUCK: "stuck"}.get(document.outcome.ending, "success")
    if ending == "success" and "partial" in name.lower():
        ending = "partial"
    queries = body.get("QueriesConfig", {}).get("Queries", []) if kind == "analysis" else []
    job = Job(
        id=hashlib.sha256(state.new_uuid().encode()).hexdigest(),
        kind=kind,
        fingerprint=fingerprint,
        document=document,
        pages=_page_count(kind_of_file, document),
        ending=ending,
        queries=queries,
        timeline=state.new_timeline(slow=document.outcome.slow, never_finishes=ending == "stuck"),
    )
    store.jobs[job.id] = job
    if token is not None:
        store.tokens[(kind, token)] = job.id
    return JSONResponse({"JobId": job.id}, media_type=CONTENT_TYPE)


def _block_id(job: Job, n: int) -> str:
    return str(uuid.UUID(hashlib.sha256(f"{job.id}:{n}".encode()).hexdigest()[:32]))


def _geometry(top: float) -> dict[str, Any]:
    box = {"Width": 0.8, "Height": 0.05, "Left": 0.1, "Top": top}
    return {
        "BoundingBox": box,
        "Polygon": [
            {"X": 0.1, "Y": top},
            {"X": 0.9, "Y": top},
            {"X": 0.9, "Y": top + 0.05},
            {"X": 0.1, "Y": top + 0.05},
        ],
    }


def _page_blocks(job: Job, page: int) -> list[dict[str, Any]]:
    """One PAGE, three LINEs and six WORDs a page (and the queries' blocks on the pages they ask for)."""
    fields = job.document.fields()
    lines = [f"Invoice {fields['invoice_number']}", f"Total {fields['total']} USD", f"Page {page}"]
    base = page * 100
    blocks: list[dict[str, Any]] = []
    line_ids = [_block_id(job, base + 1 + i) for i in range(len(lines))]
    blocks.append(
        {
            "BlockType": "PAGE",
            "Id": _block_id(job, base),
            "Page": page,
            "Geometry": _geometry(0.0),
            "Relationships": [{"Type": "CHILD", "Ids": line_ids}],
        }
    )
    for i, text in enumerate(lines):
        words = text.split(" ", 1)
        word_ids = [_block_id(job, base + 10 + 2 * i + w) for w in range(2)]
        blocks.append(
            {
                "BlockType": "LINE",
                "Id": line_ids[i],
                "Page": page,
                "Text": text,
                "Confidence": 99.1,
                "Geometry": _geometry(0.1 + 0.1 * i),
                "Relationships": [{"Type": "CHILD", "Ids": word_ids}],
            }
        )
        for w, word_id in enumerate(word_ids):
            blocks.append(
                {
                    "BlockType": "WORD",
                    "Id": word_id,
                    "Page": page,
                    "Text": words[w] if w < len(words) else "",
                    "TextType": "PRINTED",
                    "Confidence": 98.7,
                    "Geometry": _geometry(0.1 + 0.1 * i),
                }
            )
    for q, query in enumerate(job.queries):
        if str(page) not in query.get("Pages", ["1"]) and not (page == 1 and "Pages" not in query):
            continue
        result_id = _block_id(job, base + 50 + 2 * q + 1)
        blocks.append(
            {
                "BlockType": "QUERY",
                "Id": _block_id(job, base + 50 + 2 * q),
                "Page": page,
                "Query": {k: query[k] for k in ("Text", "Alias") if k in query},
                "Relationships": [{"Type": "ANSWER", "Ids": [result_id]}],
            }
        )
        blocks.append(
            {
                "BlockType": "QUERY_RESULT",
                "Id": result_id,
                "Page": page,
                "Text": str(fields["invoice_number"]),
                "Confidence": 97.0,
            }
        )
    return blocks


def _done_pages(job: Job, status: str) -> list[int]:
    pages = list(range(1, job.pages + 1))
    return pages[:-1] if status == "PARTIAL_SUCCESS" and len(pages) > 1 else pages


def _items(job: Job, status: str) -> list[dict[str, Any]]:
    pages = _done_pages(job, status)
    if job.kind != "expense":
        return [block for page in pages for block in _page_blocks(job, page)]
    fields = job.document.fields()
    return [
        {
            "ExpenseIndex": page,
            "SummaryFields": [
                {
                    "Type": {"Text": "INVOICE_RECEIPT_ID", "Confidence": 99.0},
                    "ValueDetection": {"Text": str(fields["invoice_number"]), "Confidence": 98.0},
                    "PageNumber": page,
                },
                {
                    "Type": {"Text": "TOTAL", "Confidence": 99.0},
                    "ValueDetection": {"Text": str(fields["total"]), "Confidence": 97.5},
                    "PageNumber": page,
                },
            ],
            "LineItemGroups": [],
            "Blocks": _page_blocks(job, page),
        }
        for page in pages
    ]


def _encode_token(job: Job, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{job.id}:{offset}".encode()).decode().rstrip("=")


def _decode_token(job: Job, token: Any) -> int:
    if not isinstance(token, str) or not 1 <= len(token) <= 255:
        raise _bad("NextToken must be 1-255 characters")
    try:
        job_id, _, offset = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise _bad("invalid NextToken") from None
    if job_id != job.id or not offset.isdigit():
        raise _bad("invalid NextToken")
    return int(offset)


def _get(request: Request, kind: Kind, body: dict[str, Any], state: SimState) -> Response:
    unknown = sorted(set(body) - {"JobId", "MaxResults", "NextToken"})
    if unknown:
        raise _bad(f"Unknown parameter(s): {', '.join(unknown)}")
    job_id, max_results = body.get("JobId"), body.get("MaxResults")
    if not isinstance(job_id, str) or not _TOKEN_RE.match(job_id):
        raise _bad("JobId must be 1-64 characters of [a-zA-Z0-9-_]")
    if max_results is not None and (
        isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1
    ):
        raise _bad("MaxResults must be an integer >= 1")
    now = state.now()
    job = TextractStore.of(request).live(job_id, now, state.config.textract_job_lifetime_s)
    if job is None or job.kind != kind:
        raise TextractError(400, "InvalidJobIdException", "An invalid job identifier was passed.")
    status = job.status(now)
    answer: dict[str, Any] = {"JobStatus": status, _MODEL_VERSION[kind]: "1.0"}
    if status == "IN_PROGRESS":
        return JSONResponse(answer, media_type=CONTENT_TYPE)
    if status == "FAILED":
        answer["StatusMessage"] = FAILURE_MESSAGE
        return JSONResponse(answer, media_type=CONTENT_TYPE)
    offset = _decode_token(job, body["NextToken"]) if "NextToken" in body else 0
    items = _items(job, status)
    if offset > len(items):
        raise _bad("invalid NextToken")
    cap = _EXPENSE_CAP if kind == "expense" else min(_BLOCK_CAP, state.config.textract_page_blocks)
    end, following = page_window(len(items), offset, max_results, cap)
    answer["DocumentMetadata"] = {"Pages": job.pages}
    answer["ExpenseDocuments" if kind == "expense" else "Blocks"] = items[offset:end]
    if following is not None:
        answer["NextToken"] = _encode_token(job, following)
    if status == "PARTIAL_SUCCESS":
        answer["Warnings"] = [{"ErrorCode": "PAGE_PROCESSING_FAILED", "Pages": [job.pages]}]
    return JSONResponse(answer, media_type=CONTENT_TYPE)


def _throttle(store: TextractStore, config: SimulatorConfig) -> None:
    draw = store.rng.random()
    if draw < config.textract_rate_throughput:
        raise TextractError(
            400,
            "ProvisionedThroughputExceededException",
            "The number of requests exceeded your throughput limit.",
        )
    if draw < config.textract_rate_throughput + config.textract_rate_throttling:
        raise TextractError(
            500,
            "ThrottlingException",
            "Amazon Textract is temporarily unable to process the request. Try your call again.",
        )


async def _parse_body(request: Request) -> tuple[bytes, dict[str, Any]]:
    body = await bounded_body(request, MAX_BODY)
    if body is None:
        raise TextractError(400, "SerializationException", "request body too large")
    try:
        parsed = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TextractError(400, "SerializationException", "body is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise TextractError(400, "SerializationException", "body must be a JSON object")
    return body, parsed


async def dispatch(request: Request) -> Response:
    state = sim_state(request)
    store: TextractStore = TextractStore.of(request)
    try:
        raw, body = await _parse_body(request)
        _check_signature(request, raw, state.config, state.clock.time())
        target = request.headers.get("x-amz-target", "")
        prefix, _, operation = target.partition(".")
        if prefix != "Textract" or (operation not in STARTS and operation not in GETS):
            raise TextractError(400, "UnknownOperationException", f"Unknown operation {target!r}")
        if request.headers.get("content-type", "").split(";")[0].strip() != CONTENT_TYPE:
            raise TextractError(400, "SerializationException", f"Content-Type must be {CONTENT_TYPE}")
        _throttle(store, state.config)
        if operation in STARTS:
            return await _start(request, STARTS[operation], body, state)
        return _get(request, GETS[operation], body, state)
    except TextractError as exc:
        return error_response(exc.status, exc.type, exc.message)


def routes() -> list[BaseRoute]:
    return [Route("/", dispatch, methods=["POST"])]
