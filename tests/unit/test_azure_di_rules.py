"""The Azure AI Document Intelligence adapter's rules (service/vendors/azure_di.py), each against the
sentence of next-vendors.md §1 it rests on. The pure functions as tables; the calls against an
``httpx.MockTransport`` only where the answer is one the simulator does not give (a 202 without
Operation-Location, an Operation-Location on another host, a 2xx that is not 202, a delete refused)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from service.vendors import azure_di
from service.vendors.azure_di import AzureDiAdapter, AzureDiOptions
from service.vendors.base import (
    CANCELED,
    FAILED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Document,
    Kind,
    ResultFile,
    SubmitRequest,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorResultTooLarge,
    VendorSubmitUncertain,
    VendorTransient,
)
from service.vendors.registry import load_settings

BASE = "https://res.cognitiveservices.azure.com"
RID = "3b31320d-8bab-4f88-b19c-2322a7f11034"
LOCATION = (
    f"{BASE}/documentintelligence/documentModels/prebuilt-read/analyzeResults/{RID}?api-version=2024-11-30"
)
Handler = Callable[[httpx.Request], httpx.Response]


def adapter(handler: Handler, base: str = BASE, **kwargs: Any) -> AzureDiAdapter:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=base)
    return AzureDiAdapter(client, **kwargs)


def submit_request(document: Document | None = None, **options: Any) -> SubmitRequest:
    return SubmitRequest(
        run_id="run_1",
        operation="analyze",
        document=document or Document(content=b"%PDF-1.4", filename="a.pdf", media_type="application/pdf"),
        options={"model_id": "prebuilt-read", **options},
        zero_retention=False,
    )


# The query (§1.2) ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "query"),
    [
        ({}, {"api-version": "2024-11-30"}),
        (
            {"pages": "1-3,5", "locale": "en-US", "output_content_format": "markdown"},
            {
                "api-version": "2024-11-30",
                "pages": "1-3,5",
                "locale": "en-US",
                "outputContentFormat": "markdown",
            },
        ),
        (
            {"features": ["barcodes", "languages"]},
            {"api-version": "2024-11-30", "features": "barcodes,languages"},
        ),
        # Fields asked for turn the queryFields feature on (the document is silent on one without the other).
        (
            {"query_fields": ["PONumber", "Vendor"]},
            {"api-version": "2024-11-30", "features": "queryFields", "queryFields": "PONumber,Vendor"},
        ),
        (
            {"features": ["queryFields"], "query_fields": ["A"]},
            {"api-version": "2024-11-30", "features": "queryFields", "queryFields": "A"},
        ),
        ({"features": [], "query_fields": [], "pages": None}, {"api-version": "2024-11-30"}),
    ],
)
def test_analyze_query(options: dict[str, Any], query: dict[str, str]) -> None:
    assert azure_di.analyze_query(options, "2024-11-30") == query


def test_the_api_version_is_the_configured_one() -> None:
    assert azure_di.analyze_query({}, "2025-01-01-preview") == {"api-version": "2025-01-01-preview"}


@pytest.mark.parametrize(
    ("media_type", "sent"),
    [
        ("application/pdf", "application/pdf"),
        ("image/PNG", "image/png"),
        ("image/jpeg; charset=binary", "image/jpeg"),
        ("application/msword", "application/octet-stream"),  # not in the spec's list: the service reads it
        ("", "application/octet-stream"),
    ],
)
def test_raw_content_type_is_one_of_the_specs_list(media_type: str, sent: str) -> None:
    assert azure_di.raw_content_type(media_type) == sent
    assert sent in azure_di.RAW_TYPES


# Options at the API (§1.2) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {},  # model_id is required
        {"model_id": "x"},  # "{1,63}" after the first character: two at least
        {"model_id": "-bad"},
        {"model_id": "a" * 65},
        {"model_id": "prebuilt-read", "pages": "1-"},
        {"model_id": "prebuilt-read", "pages": "one"},
        {"model_id": "prebuilt-read", "features": ["ocr"]},
        {"model_id": "prebuilt-read", "output_content_format": "html"},
        {"model_id": "prebuilt-read", "query_fields": ["a,b"]},
        {"model_id": "prebuilt-read", "stringIndexType": "utf16CodeUnit"},  # not an option of ours
    ],
)
def test_options_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AzureDiOptions.model_validate(options)


def test_options_accepted() -> None:
    options = AzureDiOptions.model_validate(
        {
            "model_id": "prebuilt-healthInsuranceCard.us",
            "pages": "1-3,5, 7-9",
            "locale": "en-US",
            "features": ["ocrHighResolution", "queryFields"],
            "query_fields": ["Member Name"],
            "output_content_format": "markdown",
        }
    )
    assert options.model_id == "prebuilt-healthInsuranceCard.us"


# Operation-Location (§1.3, §1.9) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "location", "why"),
    [
        (BASE, None, "no Operation-Location"),
        (BASE, "", "no Operation-Location"),
        (BASE, f"/documentintelligence/documentModels/m1/analyzeResults/{RID}", "not on the configured"),
        (BASE, LOCATION.replace("res.", "evil."), "not on the configured"),
        (BASE, LOCATION.replace("https://", "http://"), "not on the configured"),
        (BASE, LOCATION.replace(".com/", ".com:8443/"), "not on the configured"),
        (BASE, LOCATION.replace(RID, "not-a-uuid"), "not a uuid"),
        (BASE, f"{BASE}/documentintelligence/documentModels/m1/analyzeBatchResults/{RID}", "not an analyze"),
        (BASE, f"{BASE}/other/documentModels/m1/analyzeResults/{RID}", "not an analyze"),
        # The endpoint with a path of its own (a gateway): the operation must be under it.
        (f"{BASE}/gw", LOCATION, "not on the configured"),
    ],
)
def test_operation_location_refused(base: str, location: str | None, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        azure_di.operation_of(location, httpx.URL(base))


@pytest.mark.parametrize(
    ("base", "location"),
    [
        (BASE, LOCATION),
        (BASE + "/", LOCATION),
        (f"{BASE}/gw", LOCATION.replace(".com/", ".com/gw/")),
        (
            "http://127.0.0.1:8080",
            f"http://127.0.0.1:8080/documentintelligence/documentModels/x.y~z/analyzeResults/{RID}",
        ),
    ],
)
def test_operation_location_accepted(base: str, location: str) -> None:
    assert azure_di.operation_of(location, httpx.URL(base)) == (RID, location)


# The operation (§1.4, §1.5) -----------------------------------------------------------------------------

RESULT = {
    "apiVersion": "2024-11-30",
    "modelId": "prebuilt-read",
    "stringIndexType": "textElements",
    "content": "x",
    "pages": [],
}
FAILURE = {
    "code": "InvalidRequest",
    "message": "Invalid request.",
    "innererror": {"code": "InvalidContent", "message": "The file is corrupted."},
    "details": [{"code": "InvalidContent", "message": "bad page", "target": "2"}],
}


@pytest.mark.parametrize(
    ("operation", "status", "vendor_status"),
    [
        ({"status": "notStarted"}, QUEUED, "notStarted"),
        ({"status": "running"}, RUNNING, "running"),
        ({"status": "succeeded", "analyzeResult": RESULT}, SUCCEEDED, "succeeded"),
        ({"status": "failed", "error": FAILURE}, FAILED, "failed"),
        ({"status": "canceled"}, CANCELED, "canceled"),
        # "future values can appear [inference: treat unknown values as non-terminal]"
        ({"status": "skipped"}, RUNNING, "skipped"),
        ({"status": "completed", "analyzeResult": RESULT}, RUNNING, "completed"),
        ({"status": "Succeeded", "analyzeResult": RESULT}, RUNNING, "Succeeded"),
    ],
)
def test_operation_status(operation: dict[str, Any], status: str, vendor_status: str) -> None:
    polled = azure_di.poll_result(operation)
    assert (polled.status, polled.vendor_status) == (status, vendor_status)
    assert not polled.needs_fetch


def test_succeeded_carries_the_inline_result() -> None:
    polled = azure_di.poll_result({"status": "succeeded", "analyzeResult": RESULT})
    assert polled.result == RESULT


def test_failed_is_the_error_object() -> None:
    polled = azure_di.poll_result({"status": "failed", "error": FAILURE})
    assert polled.error == "Invalid request. (InvalidRequest/InvalidContent)"
    assert polled.error_details == FAILURE


def test_failed_without_error_still_fails() -> None:
    polled = azure_di.poll_result({"status": "failed"})
    assert polled.status == FAILED and polled.error


@pytest.mark.parametrize(
    "operation",
    [
        None,
        [],
        {},
        {"status": ""},
        {"status": 3},
        {"status": "succeeded"},  # analyzeResult is optional in the spec, but then there is no result
        {"status": "succeeded", "analyzeResult": "x"},
    ],
)
def test_answers_that_say_nothing_are_transient(operation: Any) -> None:
    with pytest.raises(VendorTransient):
        azure_di.poll_result(operation)


def test_retry_after_of_an_unfinished_poll_is_kept() -> None:
    assert azure_di.poll_result({"status": "running"}, 3.0).retry_after_s == 3.0
    assert azure_di.poll_result({"status": "running"}).retry_after_s is None


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"error": {"code": "NotFound", "message": "Resource not found."}}, "Resource not found. (NotFound)"),
        (
            {
                "error": {
                    "code": "A",
                    "message": "m",
                    "innererror": {"code": "B", "innererror": {"code": "C"}},
                }
            },
            "m (A/B/C)",
        ),
        ({"error": {"code": "A", "innererror": {"code": "A"}}}, "the vendor reported an error (A)"),
        ({"error": "x"}, ""),
        ({}, ""),
        (None, ""),
    ],
)
def test_azure_error(body: Any, said: str) -> None:
    assert azure_di.azure_error(body)[0] == said


# The calls, where the simulator cannot answer so -------------------------------------------------------


def accepted(location: str | None, status: int = 202, **headers: str) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        h = dict(headers)
        if location is not None:
            h["Operation-Location"] = location
        return httpx.Response(status, headers=h)

    return handle


async def test_submit_reads_the_header_and_keeps_the_url() -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(202, headers={"Operation-Location": LOCATION, "Retry-After": "5"})

    done = await adapter(handle).submit(submit_request(pages="2"))
    assert done.vendor_run_id == RID and done.state == {azure_di.OPERATION_KEY: LOCATION}
    assert done.retry_after_s == 5.0
    (request,) = sent
    assert request.url.path == "/documentintelligence/documentModels/prebuilt-read:analyze"
    assert request.url.params["api-version"] == "2024-11-30" and request.url.params["pages"] == "2"
    assert request.headers["content-type"] == "application/pdf" and request.content == b"%PDF-1.4"


async def test_submit_without_retry_after() -> None:
    done = await adapter(accepted(LOCATION)).submit(submit_request())
    assert done.retry_after_s is None


async def test_submit_by_url_and_by_base64() -> None:
    bodies: list[Any] = []

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.headers["content-type"] == "application/json"
        bodies.append(json.loads(request.content))
        return httpx.Response(202, headers={"Operation-Location": LOCATION})

    await adapter(handle).submit(submit_request(Document(url="https://docs.example/a.pdf")))
    await adapter(handle, upload="base64").submit(submit_request())
    assert bodies == [{"urlSource": "https://docs.example/a.pdf"}, {"base64Source": "JVBERi0xLjQ="}]


@pytest.mark.parametrize(
    "handler",
    [
        accepted(None),
        accepted(LOCATION.replace("res.", "evil.")),
        accepted("not a url"),
        accepted(LOCATION, status=200),  # a 2xx that is not the documented 202
        accepted(LOCATION, status=201),
    ],
)
async def test_a_202_that_cannot_be_polled_is_ambiguous(handler: Handler) -> None:
    # An operation may exist and cannot be polled safely: never submitted again (submit_idempotent False).
    with pytest.raises(VendorSubmitUncertain):
        await adapter(handler).submit(submit_request())


@pytest.mark.parametrize(
    ("status", "raised"),
    [
        (400, VendorRejected),
        (401, VendorRejected),
        (403, VendorRejected),
        (404, VendorRejected),  # an unknown model
        (415, VendorRejected),
        (429, VendorRateLimited),
        (500, VendorTransient),
        (503, VendorTransient),
    ],
)
async def test_submit_refusals(status: int, raised: type[Exception]) -> None:
    body = {"error": {"code": "InvalidArgument", "message": "no."}}
    with pytest.raises(raised) as caught:
        await adapter(lambda r: httpx.Response(status, json=body)).submit(submit_request())
    assert type(caught.value) is raised


async def test_a_bad_model_id_never_reaches_the_vendor() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise AssertionError("sent")

    with pytest.raises(VendorRejected):
        await adapter(handle).submit(submit_request(model_id="../x"))


STATE = {azure_di.OPERATION_KEY: LOCATION}


async def test_poll_goes_to_exactly_the_operation_location() -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        assert request.method == "GET"
        return httpx.Response(200, json={"status": "running"}, headers={"Retry-After": "4"})

    polled = await adapter(handle).poll(RID, STATE)
    assert seen == [LOCATION] and polled.status == RUNNING and polled.retry_after_s == 4.0


@pytest.mark.parametrize(
    "state",
    [{}, {azure_di.OPERATION_KEY: LOCATION.replace("res.", "evil.")}, {azure_di.OPERATION_KEY: 7}],
)
async def test_poll_never_sends_the_key_elsewhere(state: dict[str, Any]) -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise AssertionError("sent")

    with pytest.raises(VendorRejected):
        await adapter(handle).poll(RID, state)


@pytest.mark.parametrize(
    ("status", "raised"),
    [
        (404, VendorExpired),
        (400, VendorRejected),
        (401, VendorRejected),
        (403, VendorRejected),
        (429, VendorRateLimited),
        (503, VendorTransient),
        (302, VendorTransient),
    ],
)
async def test_poll_refusals(status: int, raised: type[Exception]) -> None:
    body = {"error": {"code": "NotFound", "message": "Resource not found."}}
    with pytest.raises(raised) as caught:
        await adapter(lambda r: httpx.Response(status, json=body)).poll(RID, STATE)
    assert type(caught.value) is raised


@pytest.mark.parametrize(
    ("status", "body", "deleted"),
    [
        (204, None, True),
        (200, None, True),
        (404, {"error": {"code": "NotFound", "message": "Resource not found."}}, True),
        (404, {"message": "no such route"}, False),  # not the vendor's own NotFound: not confirmed
        (405, {"error": {"code": "MethodNotAllowed", "message": "no"}}, False),
        (403, {"error": {"code": "Forbidden", "message": "no"}}, False),
    ],
)
async def test_delete_is_confirmed_only_by_the_vendor(status: int, body: Any, deleted: bool) -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    call = adapter(handle).delete(RID, STATE)
    if deleted:
        await call
    else:
        with pytest.raises(VendorRejected, match="not deleted"):
            await call
    assert [(r.method, str(r.url)) for r in seen] == [("DELETE", LOCATION)]


async def test_delete_transient() -> None:
    with pytest.raises(VendorTransient):
        await adapter(lambda r: httpx.Response(503)).delete(RID, STATE)


def test_the_spec() -> None:
    spec = azure_di.SPEC
    assert spec.name == "azure_di" and spec.operations == ("analyze",)
    assert spec.auth_headers("k") == {"Ocp-Apim-Subscription-Key": "k"}
    # "do not call get-analyze-result more than once every 2 seconds for a given POST" (§1.4)
    assert spec.defaults.poll_initial_s == 2.0
    assert not AzureDiAdapter.submit_idempotent and not AzureDiAdapter.supports_cancel
    # "Analyze (POST) TPS ... 15" and "Get operations TPS ... 50" (§1.8): a budget and a pause each.
    budgets = {b.name: (b.kinds, b.max_rps) for b in spec.budgets}
    assert budgets == {
        "submit": (frozenset({Kind.SUBMIT}), 15.0),
        "poll": (frozenset({Kind.POLL, Kind.FETCH}), 50.0),
    }
    # "max OCR JSON response 500 MB" (§1.5); Each resource has its own endpoint (§1.1): both required.
    assert spec.defaults.max_answer_bytes == 500 * 1024 * 1024
    assert spec.required == ("BASE_URL", "API_KEY")


# A large answer (§1.5: "max OCR JSON response 500 MB"): never held whole ---------------------------------


def big_result(words: int) -> dict[str, Any]:
    return {
        **RESULT,
        "pages": [
            {"pageNumber": 1, "words": [{"content": f'w{i}}}"', "confidence": 0.9} for i in range(words)]}
        ],
    }


async def test_a_large_succeeded_answer_becomes_a_result_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(azure_di, "SPILL_BYTES", 1024)
    result = big_result(2000)
    body = json.dumps({"status": "succeeded", "createdDateTime": "t", "analyzeResult": result}).encode()
    assert len(body) > 50_000

    polled = await adapter(lambda r: httpx.Response(200, content=body), inline_max_bytes=1000).poll(
        RID, STATE
    )
    assert polled.status == SUCCEEDED and isinstance(polled.result, ResultFile)
    kept = polled.result
    try:
        assert kept.media_type == "application/json"
        with open(kept.path, "rb") as f:
            assert json.loads(f.read()) == result
        assert kept.size == os.path.getsize(kept.path)
    finally:
        os.unlink(kept.path)
    # The answer's own spill file is gone; only the result's file was left, for the worker.
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("hookbridge-answer-")]


async def test_a_spilled_result_the_store_takes_whole_is_json(monkeypatch: pytest.MonkeyPatch) -> None:
    # Read past SPILL_BYTES on to a file, cut apart there; the result, within what the store keeps whole
    # (max_asset_bytes), handed over as JSON as every vendor's.
    monkeypatch.setattr(azure_di, "SPILL_BYTES", 1024)
    result = big_result(2000)
    body = json.dumps({"status": "succeeded", "analyzeResult": result}).encode()
    polled = await adapter(lambda r: httpx.Response(200, content=body)).poll(RID, STATE)
    assert polled.result == result
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("hookbridge-answer-")]


async def test_a_small_answer_stays_in_memory() -> None:
    body = {"status": "succeeded", "analyzeResult": RESULT}
    polled = await adapter(lambda r: httpx.Response(200, json=body)).poll(RID, STATE)
    assert polled.result == RESULT


@pytest.mark.parametrize("declared", [True, False])
async def test_an_answer_past_the_cap_fails_the_run(declared: bool) -> None:
    body = json.dumps({"status": "succeeded", "analyzeResult": big_result(500)}).encode()

    def handle(request: httpx.Request) -> httpx.Response:
        if declared:
            return httpx.Response(200, content=body)
        return httpx.Response(200, stream=httpx.ByteStream(body), headers={"Transfer-Encoding": "chunked"})

    with pytest.raises(VendorResultTooLarge):
        await adapter(handle, max_answer_bytes=1000).poll(RID, STATE)


async def test_a_large_failed_answer_keeps_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(azure_di, "SPILL_BYTES", 100)
    error = {
        **FAILURE,
        "details": [{"code": "InvalidContent", "message": "x" * 50, "target": str(i)} for i in range(50)],
    }
    polled = await adapter(lambda r: httpx.Response(200, json={"status": "failed", "error": error})).poll(
        RID, STATE
    )
    assert polled.status == FAILED and polled.error_details == error


async def test_a_large_answer_that_is_not_json_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(azure_di, "SPILL_BYTES", 100)
    with pytest.raises(VendorTransient, match="not usable JSON"):
        await adapter(lambda r: httpx.Response(200, content=b"{" + b'"a":1,' * 100)).poll(RID, STATE)


async def test_requests_carry_their_kind() -> None:
    kinds: list[tuple[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        kinds.append((request.method, request.extensions.get("kind")))
        if request.method == "POST":
            return httpx.Response(202, headers={"Operation-Location": LOCATION})
        if request.method == "GET":
            return httpx.Response(200, json={"status": "running"})
        return httpx.Response(204)

    a = adapter(handle)
    await a.submit(submit_request())
    await a.poll(RID, STATE)
    await a.delete(RID, STATE)
    assert kinds == [("POST", "submit"), ("GET", "poll"), ("DELETE", "delete")]


# The poll floor (§1.4 "once every 2 seconds"; contract §10: raised to it, with a warning) ----------------


def test_a_poll_initial_below_the_floor_is_raised_with_a_warning() -> None:
    from service.config import settings

    loaded = load_settings(
        {
            "HOOKBRIDGE_REDIS_URL": "redis://r:6379/0",
            "HOOKBRIDGE_AZURE_DI_POLL_INITIAL_S": "50ms",
            "HOOKBRIDGE_AZURE_DI_POLL_MAX_S": "1s",
            "HOOKBRIDGE_AZURE_DI_PAUSE_MAX_S": "1s",
            "HOOKBRIDGE_NUTRIENT_POLL_INITIAL_S": "50ms",
        }
    )
    azure = loaded.vendor("azure_di")
    assert (azure.poll_initial_s, azure.poll_max_s, azure.pause_max_s) == (2.0, 2.0, 2.0)
    assert settings.warnings(loaded) == [
        "HOOKBRIDGE_AZURE_DI_POLL_INITIAL_S=0.05s is below azure_di's documented minimum of 2s "
        "between polls; using 2s"
    ]
    assert loaded.vendor("nutrient").poll_initial_s == 0.05  # a vendor without a documented floor


def test_at_or_above_the_floor_nothing_changes() -> None:
    from service.config import settings

    loaded = load_settings(
        {"HOOKBRIDGE_REDIS_URL": "redis://r:6379/0", "HOOKBRIDGE_AZURE_DI_POLL_INITIAL_S": "3"}
    )
    assert loaded.vendor("azure_di").poll_initial_s == 3.0 and settings.warnings(loaded) == []
