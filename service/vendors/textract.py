"""AWS Textract, asynchronous operations (next-vendors.md §2): ``analyze`` (StartDocumentAnalysis),
``text`` (StartDocumentTextDetection), ``expense`` (StartExpenseAnalysis).

Every call is ``POST /`` in the AWS JSON 1.1 protocol, its body made by botocore's serializer after
botocore's validation against Textract's own service model (``aws.serialize``), signed with SigV4 for
``textract`` in the configured region (``aws.SigV4``, credentials from the standard chain). The document
comes from S3 only: bytes and ``https`` URLs are staged in ``TEXTRACT_S3_BUCKET`` at ``TEXTRACT_S3_PREFIX``
+ run id + ``/`` + file name (an ``https`` URL is fetched by the host's fetcher: the callback address
rules, ``MAX_DOCUMENT_BYTES``), an ``s3://`` URL is passed as it is.

Each rule, and the sentence of next-vendors.md it rests on ("silent": the document says nothing, and the
simulator plays each reading):

- "Documents come from S3 only. 'The documents are stored in an Amazon S3 bucket. Use DocumentLocation
  to specify the bucket name and file name'" (§2.2): :func:`document_location`, :meth:`_stage`.
- "Required: ``DocumentLocation`` and ``FeatureTypes``" (§2.2): ``feature_types`` is required for
  ``analyze`` (botocore's model refuses the request without it, before anything is staged). ``queries``
  become ``QueriesConfig.Queries`` and add ``QUERIES`` to the feature types where missing: the model
  asks for ``QueriesConfig`` with that feature (silent on the reverse; the simulator refuses either
  half alone): :func:`start_params`.
- "``ClientRequestToken``: same token + same Start operation + same input → same JobId, the job isn't
  performed again" (§2.6): the token is the run id (``^[a-zA-Z0-9-_]+$``, 1-64: :func:`request_token`),
  the staged object's name is the run's too, so a retried start carries the same input and answers the
  same JobId: ``submit_idempotent = True``.
- "throttling arrives as HTTP 400 (``ProvisionedThroughputExceededException``) or HTTP 500
  (``ThrottlingException``), never 429; the concurrency limit is ``LimitExceededException``, also HTTP
  400"; "classify these by ``__type``, not by status code" (§2.7, §2.9.4): :func:`classify` makes them
  :class:`VendorRateLimited` (the run waits and asks again; never a failure). "SDK retries with retry
  count 5 and exponential backoff" plus jitter (TX-ERRH, TX-QUOTA, §2.4): a throttled page of a result
  is asked again up to 5 times in :meth:`fetch_result` before the step gives way.
- "``InternalServerError`` 500 'Try your call again'" (§2.7): transient. The other Start errors (Access
  denied, bad, too large or unsupported document, invalid parameter, S3 object or KMS key, idempotent
  parameter mismatch) are the vendor refusing the run: ``vendor_rejected``. An unknown ``__type``: 5xx
  transient, 4xx rejected (silent).
- "``JobStatus`` IN_PROGRESS|SUCCEEDED|FAILED|PARTIAL_SUCCESS"; "There is no queued or cancelled state";
  "``PARTIAL_SUCCESS`` ... terminal ... ``Warnings[]`` lists per-page error codes" (§2.4): contract §10
  makes PARTIAL_SUCCESS ``succeeded`` with its warnings. An unknown status is running (§0).
- "A JobId value is only valid for 7 days"; "A bridge that stores job IDs longer than that gets
  ``InvalidJobIdException``" (§2.3, §2.8): :class:`VendorExpired` (``vendor_expired``).
- "Blocks are paged ... Call Get* again with ``NextToken`` until no token comes back";
  "``DocumentMetadata`` is returned in every page ... Do not sum it" (§2.5, §2.8): every page is
  collected, Blocks (``ExpenseDocuments`` for expense) in order, ``DocumentMetadata`` from the first
  page, ``Warnings`` from every page without repeats (whether each page repeats them: silent).
  "``MaxResults`` ... values above 1,000 are capped at 1,000" (§2.4): pages of 1,000; a poll asks for 1
  (the status is all it needs). The result goes to a temporary file past a few MiB (``results``), up to
  the answer cap; "Whether a NextToken expires: NOT FOUND": a page that fails ends the fetch, which the
  worker retries from the first page.
- "AWS explicitly discourages polling ... AWS gives no polling interval (NOT FOUND)" (§2.4): polls from
  5 s growing to 60 s (``SPEC.defaults``), so that one run costs few Get calls against the account's
  Get TPS quota.
- "No cancel or delete operation for async document jobs" (§2.6): ``supports_cancel = False``. Zero
  retention deletes the objects hookbridge staged (:meth:`delete`); "Results ... stored for 7 days in a
  Amazon Textract owned bucket" (§2.5) cannot be deleted, and the run says so (``vendor_deleted: false``,
  ``vendor_delete_error`` naming both).
- "There is no Retry-After header (NOT FOUND)" (§2.4): none is read.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Mapping
from typing import Any, Literal

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field

from service.vendors import aws, staging
from service.vendors.base import (
    FAILED,
    NO_CALL,
    RUNNING,
    SUCCEEDED,
    Call,
    Document,
    Fetcher,
    Kind,
    PollResult,
    SubmitRequest,
    Submitted,
    VendorDefaults,
    VendorError,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorSetting,
    VendorSpec,
    VendorTransient,
    no_auth_headers,
)
from service.vendors.http import submit_errors, transport_errors
from service.vendors.results import Assembled, JsonWriter, hand_over

NAME = "textract"
# Our operation -> (Start action, Get action, the Get answer's list of results).
OPERATIONS: dict[str, tuple[str, str, str]] = {
    "analyze": ("StartDocumentAnalysis", "GetDocumentAnalysis", "Blocks"),
    "text": ("StartDocumentTextDetection", "GetDocumentTextDetection", "Blocks"),
    "expense": ("StartExpenseAnalysis", "GetExpenseAnalysis", "ExpenseDocuments"),
}
# The placeholder base URL: the real endpoint is the region's (textract.<region>.amazonaws.com, TX-GR).
DEFAULT_BASE_URL = "https://textract.amazonaws.com"
PAGE_SIZE = 1000  # "values above 1,000 are capped at 1,000" (§2.4)
MAX_PAGES = 100_000  # a NextToken that never ends is a vendor fault, not a loop
THROTTLE_RETRIES = 5  # "retry count 5 and exponential backoff" (TX-ERRH)
SPILL_BYTES = 8 * 1024 * 1024
MAX_ASSET_BYTES = 50 * 1024 * 1024
_TOKEN = re.compile(r"[^a-zA-Z0-9_-]")
RETENTION_NOTE = (
    "Textract keeps its own copy of the results for 7 days in a Textract-owned bucket and has no API to "
    "delete it"
)

THROTTLES = frozenset(
    ("ProvisionedThroughputExceededException", "ThrottlingException", "LimitExceededException")
)
TRANSIENTS = frozenset(("InternalServerError", "ServiceUnavailableException", "ExpiredTokenException"))
EXPIRED = frozenset(("InvalidJobIdException",))
STATUSES = {"IN_PROGRESS": RUNNING, "SUCCEEDED": SUCCEEDED, "PARTIAL_SUCCESS": SUCCEEDED, "FAILED": FAILED}


# Decisions -----------------------------------------------------------------------------------------


def request_token(run_id: str) -> str:
    """The ClientRequestToken of a run: its id, in the token's alphabet and length (§2.2)."""
    return _TOKEN.sub("-", run_id)[:64] or "run"


def document_location(
    url: str | None, bucket: str, prefix: str, run_id: str, filename: str
) -> aws.S3Location:
    """Where Textract reads the run's document: an ``s3://`` URL as given, else the staged object
    ``prefix + run id + "/" + file name`` in ``bucket`` (contract §10)."""
    if url is not None:
        given = aws.parse_s3_url(url)
        if given is not None:
            return given
    name = filename.replace("/", "_").strip() or "document"
    return aws.S3Location(bucket, f"{prefix}{run_id}/{name}")


def start_params(
    operation: str, run_id: str, location: aws.S3Location, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The Start request's parameters (validated afterwards by botocore's model)."""
    params: dict[str, Any] = {
        "DocumentLocation": {"S3Object": {"Bucket": location.bucket, "Name": location.key}},
        "ClientRequestToken": request_token(run_id),
        "JobTag": request_token(run_id),
    }
    if operation != "analyze":
        return params
    features = list(options.get("feature_types") or [])
    queries = options.get("queries") or []
    if queries:
        if "QUERIES" not in features:
            features.append("QUERIES")
        params["QueriesConfig"] = {"Queries": [_query(q) for q in queries]}
    if features:  # required: botocore's model refuses the request without it
        params["FeatureTypes"] = features
    return params


def _query(query: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"Text": query.get("text")}
    if query.get("alias") is not None:
        out["Alias"] = query["alias"]
    if query.get("pages") is not None:
        out["Pages"] = list(query["pages"])
    return out


def classify(status: int, type_: str, message: str) -> VendorError:
    """The exception for an error answer, by its ``__type`` first (§2.9.4), its status second."""
    said = f"{type_ or 'HTTP ' + str(status)}: {message}".rstrip(": ")
    if type_ in THROTTLES or status == 429:  # no 429 is documented (§2.7); a proxy's is a rate limit still
        return VendorRateLimited(said, status_code=status)
    if type_ in EXPIRED:
        return VendorExpired(said, status_code=status)
    if type_ in TRANSIENTS or status >= 500:
        return VendorTransient(said, status_code=status)
    return VendorRejected(said, status_code=status)


def error_type(response: httpx.Response) -> tuple[str, str]:
    """(``__type`` without its namespace, message) of an AWS JSON error answer; the header
    ``x-amzn-ErrorType`` where the body has none."""
    type_, message = "", ""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        type_ = str(body.get("__type") or "")
        message = str(body.get("message") or body.get("Message") or "")
    if not type_:
        type_ = response.headers.get("x-amzn-errortype", "").split(":", 1)[0]
    return type_.rsplit("#", 1)[-1], message


def poll_result(answer: Mapping[str, Any]) -> PollResult:
    """A Get answer's status, in our words (§2.4)."""
    raw = answer.get("JobStatus")
    if not isinstance(raw, str) or not raw:
        raise VendorTransient("the Get answer has no JobStatus")
    status = STATUSES.get(raw, RUNNING)  # an unknown status is never terminal (§0)
    if status == FAILED:
        message = answer.get("StatusMessage")
        return PollResult(
            FAILED,
            raw,
            error=str(message) if message else "the Textract job failed",
            error_details={"JobStatus": raw, "StatusMessage": message},
        )
    return PollResult(status, raw, needs_fetch=status == SUCCEEDED)


class Pages:
    """Folds Get pages into the result (§2.5): items in order, ``DocumentMetadata`` and the model version
    once, ``Warnings`` without repeats, written as they come (``results.JsonWriter``)."""

    def __init__(self, items_key: str, writer: JsonWriter) -> None:
        self._key = items_key
        self._writer = writer
        self._warnings: list[Any] = []
        self._seen: set[bytes] = set()
        self._head: dict[str, Any] | None = None
        self.count = 0

    def add(self, page: Mapping[str, Any]) -> None:
        if self._head is None:
            self._head = {k: v for k, v in page.items() if k not in (self._key, "NextToken", "Warnings")}
            self._writer.raw(b"{")
            for key, value in self._head.items():
                self._writer.key(key, value)
            self._writer.raw(orjson.dumps(self._key) + b":[")
        items = page.get(self._key) or []
        if not isinstance(items, list):
            raise VendorTransient(f"the Get answer's {self._key} is not a list")
        for item in items:
            self._writer.item(item)
        self.count += len(items)
        for warning in page.get("Warnings") or []:
            encoded = orjson.dumps(warning, option=orjson.OPT_SORT_KEYS)
            if encoded not in self._seen:
                self._seen.add(encoded)
                self._warnings.append(warning)

    def discard(self) -> None:
        self._writer.discard()

    def finish(self) -> Assembled:
        if self._head is None:
            raise VendorTransient("no page of the result was read")
        self._writer.raw(b"]")
        if self._warnings:
            self._writer.raw(b",")
            self._writer.key("Warnings", self._warnings, last=True)
        self._writer.raw(b"}")
        return self._writer.finish()


# The adapter ----------------------------------------------------------------------------------------


class TextractAdapter:
    name = NAME
    supports_cancel = False  # "the Textract model has no cancel or delete operation" (§2.6)
    # "same token + same Start operation + same input → same JobId" (§2.6); the token is the run id and
    # the staged object keeps its name across tries.
    submit_idempotent = True
    retention_note = RETENTION_NOTE

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        region: str,
        bucket: str = "",
        prefix: str = "",
        s3_endpoint_url: str = "",
        credentials: aws.AwsCredentials | None = None,  # default: the client's SigV4 auth's
        fetcher: Fetcher | None = None,
        max_asset_bytes: int = MAX_ASSET_BYTES,
        max_answer_bytes: int = 0,
        spill_bytes: int = SPILL_BYTES,
        throttle_pause_s: float = 0.2,
    ) -> None:
        # What the store keeps whole (MAX_DOCUMENT_BYTES), and the most the result may be at all
        # ({V}_MAX_ANSWER_BYTES): past the first, the result is handed over as its file.
        self._max_answer_bytes = max(max_answer_bytes, max_asset_bytes)
        self._client = client
        self._region = region
        self._bucket = bucket
        self._prefix = prefix
        auth = client.auth
        self._credentials = credentials or (
            auth.credentials if isinstance(auth, aws.SigV4) else aws.AwsCredentials()
        )
        # Each storage request takes the vendor client's timeout; staging as a whole at most twice that,
        # below the worker's step timeout (2 x VENDOR_TIMEOUT_S plus the submit's own request).
        timeout_s = client.timeout.read or 30.0
        self._s3 = aws.S3Objects(self._credentials, region, s3_endpoint_url, timeout_s)
        self._stage_timeout_s = timeout_s
        self._fetcher = fetcher
        self._max_asset_bytes = max_asset_bytes
        self._spill_bytes = spill_bytes
        self._throttle_pause_s = throttle_pause_s
        # The region's endpoint unless TEXTRACT_BASE_URL says otherwise (TX-GR).
        base = str(client.base_url).rstrip("/")
        self._url = f"https://textract.{region}.amazonaws.com/" if base == DEFAULT_BASE_URL else "/"

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        if request.operation not in OPERATIONS:
            raise VendorRejected(f"unknown Textract operation {request.operation!r}")
        if not self._region:
            raise VendorRejected(
                "no AWS region: set HOOKBRIDGE_TEXTRACT_REGION, AWS_REGION or AWS_DEFAULT_REGION"
            )
        start, _, _ = OPERATIONS[request.operation]
        doc = request.document
        location = document_location(doc.url, self._bucket, self._prefix, request.run_id, doc.filename)
        params = start_params(request.operation, request.run_id, location, request.options)
        body, headers = aws.serialize("textract", start, params)  # refused here, before staging
        staged = doc.url is None or aws.parse_s3_url(doc.url) is None
        if staged:
            async with staging.before_submit(self._stage_timeout_s):
                await self._stage(doc, location)
        with submit_errors():
            response = await self._client.post(
                self._url, content=body, headers=headers, extensions=call.extensions(Kind.SUBMIT)
            )
        answer = self._answer(response)
        job_id = answer.get("JobId")
        if not isinstance(job_id, str) or not job_id:
            # The job may exist; the same token asks for it again (§2.6): a transient fault.
            raise VendorTransient("the Start answer names no JobId")
        state = {"operation": request.operation}
        if staged:
            state["staged"] = f"s3://{location.bucket}/{location.key}"
        return Submitted(vendor_run_id=job_id, vendor_status="IN_PROGRESS", state=state)

    async def _stage(self, doc: Document, location: aws.S3Location) -> None:
        if not location.bucket:
            raise VendorRejected("HOOKBRIDGE_TEXTRACT_S3_BUCKET is not set: bytes and https URLs need it")
        if doc.content is not None:
            content = doc.content
        elif doc.url is not None and self._fetcher is not None:
            content = await self._fetcher.fetch(doc.url)  # the callback address rules, MAX_DOCUMENT_BYTES
        else:
            raise VendorRejected("this Textract adapter was built without a document fetcher")
        await self._s3.put(location, content, doc.media_type)

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        _, get, _ = self._operation(state)
        # One item is all a poll needs: the status comes with every page (§2.4).
        answer = await self._call(get, {"JobId": vendor_run_id, "MaxResults": 1}, call, Kind.POLL)
        return poll_result(answer)

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        _, get, key = self._operation(state)
        pages = Pages(key, JsonWriter(cap=self._max_answer_bytes, spill_bytes=self._spill_bytes))
        params: dict[str, Any] = {"JobId": vendor_run_id, "MaxResults": PAGE_SIZE}
        tokens: set[str] = set()
        try:
            for _ in range(MAX_PAGES):
                page = await self._page(get, params, call)
                pages.add(page)
                token = page.get("NextToken")
                if not token:
                    return hand_over(pages.finish(), self._max_asset_bytes)
                if token in tokens:
                    raise VendorTransient("Textract repeated a NextToken")
                tokens.add(token)
                params = {**params, "NextToken": token}
            raise VendorTransient(f"more than {MAX_PAGES} result pages")
        except BaseException:
            pages.discard()
            raise

    async def _page(self, get: str, params: dict[str, Any], call: Call) -> dict[str, Any]:
        """One page, asked again after a throttle with exponential backoff and jitter (TX-ERRH)."""
        for attempt in range(THROTTLE_RETRIES + 1):
            try:
                return await self._call(get, params, call, Kind.FETCH)
            except VendorRateLimited:
                if attempt == THROTTLE_RETRIES:
                    raise
                await asyncio.sleep(self._throttle_pause_s * 2**attempt * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    async def delete(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """Deletes the object hookbridge staged (an ``s3://`` document is the caller's and stays), then
        says that Textract's own copy cannot be deleted (§2.5, §2.6): a :class:`VendorRejected`, which the
        run records as ``vendor_deleted: false`` with this reason (contract §10: "the run says so")."""
        staged = aws.parse_s3_url(str(state.get("staged") or ""))
        if staged is not None:
            await self._s3.delete(staged)
        done = "the staged document was deleted" if staged is not None else "nothing was staged"
        raise VendorRejected(f"{done}; {RETENTION_NOTE}")

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        raise VendorRejected("Textract has no cancel operation for asynchronous jobs")

    def _operation(self, state: Mapping[str, Any]) -> tuple[str, str, str]:
        return OPERATIONS.get(str(state.get("operation") or "analyze"), OPERATIONS["analyze"])

    async def _call(self, action: str, params: dict[str, Any], call: Call, kind: Kind) -> dict[str, Any]:
        body, headers = aws.serialize("textract", action, params)
        with transport_errors():
            response = await self._client.post(
                self._url, content=body, headers=headers, extensions=call.extensions(kind)
            )
        return self._answer(response)

    @staticmethod
    def _answer(response: httpx.Response) -> dict[str, Any]:
        if not response.is_success:
            raise classify(response.status_code, *error_type(response))
        try:
            answer = response.json()
        except ValueError:
            raise VendorTransient("the Textract answer is not JSON") from None
        if not isinstance(answer, dict):
            raise VendorTransient("the Textract answer is not a JSON object")
        return answer


# Registration ---------------------------------------------------------------------------------------


class TextractQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=200, description="The question, as Textract's `Text`.")
    alias: str | None = Field(None, max_length=200, description="Its `Alias`.")
    pages: list[str] | None = Field(None, description='Its `Pages` (`"1"`, `"2-3"`, `"*"`).')


class TextractOptions(BaseModel):
    """A Textract run's ``options`` (contract §10)."""

    model_config = ConfigDict(extra="forbid")

    feature_types: list[Literal["TABLES", "FORMS", "QUERIES", "SIGNATURES", "LAYOUT"]] | None = Field(
        None, description="`analyze`: required, the `FeatureTypes` of StartDocumentAnalysis."
    )
    queries: list[TextractQuery] | None = Field(
        None, description="`analyze`: questions (`QueriesConfig`); `QUERIES` is added to the feature types."
    )


def _auth(api_key: str, settings: Mapping[str, Any]) -> httpx.Auth:
    return aws.SigV4(aws.AwsCredentials(), "textract", aws.region_of(str(settings.get("region", ""))))


def _build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> TextractAdapter:
    fetcher = extra.get("fetcher")
    return TextractAdapter(
        client,
        region=aws.region_of(str(extra.get("region", ""))),
        bucket=str(extra.get("s3_bucket", "")),
        prefix=str(extra.get("s3_prefix", "")),
        s3_endpoint_url=str(extra.get("s3_endpoint_url", "")),
        fetcher=fetcher if isinstance(fetcher, Fetcher) else None,
        max_asset_bytes=int(extra.get("max_asset_bytes", MAX_ASSET_BYTES)),
        max_answer_bytes=int(extra.get("max_answer_bytes", 0)),
    )


def throttling(response: httpx.Response) -> bool:
    """Textract's throttling answers (§2.7: 400 ``ProvisionedThroughputExceededException``, 500
    ``ThrottlingException``; the concurrent-job cap, 400 ``LimitExceededException``): a 429 in all but
    status, so the vendor pauses for every worker (``VendorSpec.throttled``)."""
    return error_type(response)[0] in THROTTLES


SPEC = VendorSpec(
    name=NAME,
    operations=tuple(OPERATIONS),
    supports_cancel=TextractAdapter.supports_cancel,
    # "AWS gives no polling interval (NOT FOUND)" and discourages tight polling (§2.4): 5 s growing to 60 s;
    # "Results can be retrieved only up to 7 days" (§2.5): a run is given up long before, after a day.
    defaults=VendorDefaults(
        base_url=DEFAULT_BASE_URL,
        poll_initial_s=5.0,
        poll_max_s=60.0,
        poll_multiplier=1.5,
        max_run_s=86400.0,
        max_rps=0.0,
    ),
    auth_headers=no_auth_headers,
    # SigV4 on every request, with credentials from the standard chain (TEXTRACT_API_KEY is not used).
    auth=_auth,
    build=_build,
    # An ``s3://`` document URL is passed as it is (contract §10).
    document_schemes=("s3",),
    throttled=throttling,
    settings=(
        VendorSetting(
            "REGION",
            "",
            str,
            "AWS region (else AWS_REGION, else AWS_DEFAULT_REGION); requests are signed for it",
        ),
        VendorSetting("S3_BUCKET", "", str, "bucket where bytes and https documents are staged for Textract"),
        VendorSetting(
            "S3_PREFIX", "", str, "object prefix of staged documents (run id + / + file name follow)"
        ),
        VendorSetting(
            "S3_ENDPOINT_URL",
            "",
            staging.endpoint_override,
            "S3 endpoint override (path-style URLs under it)",
        ),
    ),
    description="AWS Textract, asynchronous operations",
    options=TextractOptions,
)
