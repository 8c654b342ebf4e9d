"""Each documented vendor rule, held by a test that fails when the rule is broken (docs/vendors.md lists
them). The vendor is an ``httpx.MockTransport`` answering as the documents allow but the simulator does
not always (an answer without ``status``, a 401 on a poll, a delete route that is missing)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from service.config.settings import VendorSettings
from service.core.backoff import jittered
from service.core.backoff import poll_delay as next_delay
from service.delivery.fetch import DocumentFetcher
from service.delivery.urlsafety import Policy
from service.vendors import cloudsquid, nutrient, uptiq
from service.vendors.base import (
    NO_CALL,
    SUCCEEDED,
    Call,
    Document,
    DocumentTooLarge,
    DocumentUnavailable,
    FileResult,
    SubmitRequest,
    VendorExpired,
    VendorRejected,
    VendorResultTooLarge,
    VendorSubmitUncertain,
    VendorTransient,
)

Handler = Callable[[httpx.Request], httpx.Response]
PDF = Document(content=b"%PDF-1.4", filename="a.pdf", media_type="application/pdf")


def client(handler: Handler, base: str = "https://vendor.test") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=base)


def cs(handler: Handler) -> cloudsquid.CloudsquidAdapter:
    return cloudsquid.CloudsquidAdapter(client(handler), project="p", table_id="t")


def up(handler: Handler) -> uptiq.UptiqAdapter:
    return uptiq.UptiqAdapter(client(handler))


def nu(handler: Handler) -> nutrient.NutrientAdapter:
    return nutrient.NutrientAdapter(client(handler))


def answer(status: int, body: Any = None) -> Handler:
    return lambda request: httpx.Response(status, json=body if body is not None else {"message": "no"})


# Documented values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field", "value", "sentence"),
    [
        (cloudsquid.SPEC, "poll_initial_s", 2.0, "S000: A typical poll interval is 2-5 seconds"),
        (cloudsquid.SPEC, "poll_max_s", 5.0, "S000: A typical poll interval is 2-5 seconds"),
        (uptiq.SPEC, "poll_initial_s", 5.0, "S004: Poll every 5-10 seconds"),
        (uptiq.SPEC, "poll_max_s", 10.0, "S004: Poll every 5-10 seconds"),
        (nutrient.SPEC, "poll_initial_s", 2.0, "S003: Wait at least two seconds between polling requests"),
        (nutrient.SPEC, "poll_max_s", 30.0, "S003: delay = Math.min(delay * 2, 30000)"),
        (nutrient.SPEC, "poll_multiplier", 2.0, "S003: delay * 2"),
        (nutrient.SPEC, "max_run_s", 1800.0, "S003: a 15-minute processing limit, plus queueing"),
        (nutrient.SPEC, "max_rps", 5.0, "S003: polling and submission requests share a rate limit"),
        (cloudsquid.SPEC, "max_rps", 0.0, "no rate limit documented: only a 429 pauses"),
        (uptiq.SPEC, "max_rps", 0.0, "no rate limit documented: only a 429 pauses"),
    ],
)
def test_documented_poll_and_run_limits(spec: Any, field: str, value: float, sentence: str) -> None:
    assert getattr(spec.defaults, field) == value, sentence


def test_nutrient_run_limit_is_past_its_processing_limit() -> None:
    # "Each run has a 15-minute processing limit": a run limit below it fails runs Nutrient still finishes.
    assert nutrient.SPEC.defaults.max_run_s >= 15 * 60


def policy(spec: Any) -> VendorSettings:
    d = spec.defaults
    return VendorSettings(
        name=spec.name,
        base_url=d.base_url,
        api_key="k",
        poll_initial_s=d.poll_initial_s,
        poll_max_s=d.poll_max_s,
        poll_multiplier=d.poll_multiplier,
        max_run_s=d.max_run_s,
        max_rps=d.max_rps,
    )


@pytest.mark.parametrize(("spec", "low", "high"), [(cloudsquid.SPEC, 2.0, 5.0), (uptiq.SPEC, 5.0, 10.0)])
def test_polls_stay_inside_the_documented_interval_with_jitter(spec: Any, low: float, high: float) -> None:
    rng = random.Random(7)
    p = policy(spec)
    for _ in range(200):
        current = None
        for _ in range(12):
            current, wait = next_delay(p, current, rng)
            assert low <= wait <= high, (current, wait)


@pytest.mark.parametrize(
    ("planned", "share", "expected"),
    [(2.0, 0.1, 2.2), (5.0, 0.1, 4.5), (4.8, 0.1, 4.32), (2.0, 0.0, 2.0), (1.0, 0.1, 2.0)],
)
def test_jittered_table(planned: float, share: float, expected: float) -> None:
    assert jittered(planned, 2.0, 5.0, share) == pytest.approx(expected)


# Submits that may have created a job --------------------------------------------------------------------


def raising(exc: type[httpx.TransportError]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("lost", request=request)

    return handler


def req(options: dict[str, Any]) -> SubmitRequest:
    return SubmitRequest("run_1", "extract", PDF, options, False)


@pytest.mark.parametrize("build", [cs, up])
async def test_a_lost_answer_to_a_submit_without_idempotency_is_uncertain(build: Any) -> None:
    with pytest.raises(VendorSubmitUncertain):
        await build(raising(httpx.ReadTimeout)).submit(req({"documentType": "Invoice"}))
    with pytest.raises(VendorSubmitUncertain):
        await build(raising(httpx.RemoteProtocolError)).submit(req({"documentType": "Invoice"}))


@pytest.mark.parametrize("build", [cs, up, nu])
async def test_a_refused_connection_sent_nothing(build: Any) -> None:
    with pytest.raises(VendorTransient) as caught:
        await build(raising(httpx.ConnectError)).submit(req({"documentType": "Invoice"}))
    assert not isinstance(caught.value, VendorSubmitUncertain)


async def test_nutrient_replays_a_lost_answer_with_its_key() -> None:
    with pytest.raises(VendorTransient) as caught:
        await nu(raising(httpx.ReadTimeout)).submit(req({}))
    assert not isinstance(caught.value, VendorSubmitUncertain)


@pytest.mark.parametrize(
    ("build", "body"),
    [
        (cs, {"id": "row-1"}),  # no row_id
        (up, {"data": {"_ids": ["a", "b"]}}),  # a multi-extraction reading that names no one job
        (up, {"data": [{"_id": "a"}, {"_id": "b"}]}),
        (up, {"status": "success"}),
    ],
)
async def test_a_2xx_of_another_shape_is_uncertain(build: Any, body: Any) -> None:
    with pytest.raises(VendorSubmitUncertain) as caught:
        await build(answer(202, body)).submit(req({"documentType": "Invoice"}))
    assert caught.value.answer  # what the vendor said goes to the run's trail


async def test_uptiq_202_as_a_list_of_one_is_read() -> None:
    body = {"data": [{"_id": "x1", "documentStatus": "Pending"}], "status": "success"}
    accepted = await up(answer(202, body)).submit(req({"documentTypes": ["A"]}))
    assert accepted.vendor_run_id == "x1"


# Polls ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("build", [cs, up, nu])
async def test_a_refused_key_on_a_poll_ends_the_run(build: Any, status: int) -> None:
    with pytest.raises(VendorRejected):
        await build(answer(status)).poll("r1", {"project": "p", "table_id": "t"})


@pytest.mark.parametrize(
    ("build", "body"),
    [
        (cs, {"data": {}, "row_id": "r", "created_at": "2026-01-01T00:00:00Z"}),
        (up, {"extraction": {"_id": "r1"}, "status": "success"}),
        (nu, {"id": "r1", "usage": {}}),
    ],
)
async def test_an_answer_without_status_is_a_transient_fault(build: Any, body: Any) -> None:
    with pytest.raises(VendorTransient) as caught:
        await build(answer(200, body)).poll("r1", {"project": "p", "table_id": "t"})
    assert "None" not in caught.value.message


async def test_cloudsquid_reasoning_and_review_reach_the_client() -> None:
    review = {"approved": False, "comment": "totals disagree", "reviewed_by": "a@b.c", "review_date": "x"}
    row = {"status": "done", "data": {"total": 3}, "reasoning": "read page 2", "review": review}
    result = await cs(answer(200, row)).poll("r1", {})
    assert result.status == SUCCEEDED
    assert result.result == {"total": 3, "reasoning": "read page 2", "review": review}


async def test_cloudsquid_done_without_reasoning_is_the_data() -> None:
    result = await cs(answer(200, {"status": "done", "data": {"total": 3}})).poll("r1", {})
    assert result.result == {"total": 3}


async def test_uptiq_credit_reservation_is_not_spend() -> None:
    record = {"_id": "r1", "status": "Processed", "result": {}, "creditReservation": {"credits": 5}}
    result = await up(answer(200, {"extraction": record, "status": "success"})).poll("r1", {})
    assert result.usage is not None
    assert result.usage["credits"] is None
    assert result.usage["reported"] == {"creditReservation": {"credits": 5}}


async def test_cloudsquid_poll_404_is_expired() -> None:
    with pytest.raises(VendorExpired):
        await cs(answer(404)).poll("r1", {})


# Delete -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [404, 405])
async def test_a_delete_that_is_not_confirmed_is_not_deleted(status: int) -> None:
    with pytest.raises(VendorRejected) as caught:
        await nu(answer(status)).delete("r1", {})
    assert "not deleted" in caught.value.message
    assert caught.value.status_code == status  # the record says which answer it was


@pytest.mark.parametrize("status", [200, 204, 410])
async def test_a_confirmed_delete(status: int) -> None:
    await nu(lambda r: httpx.Response(status)).delete("r1", {})


# Nutrient poll: the mutants of issue 24's mutmut run that changed a documented value or status -----------

NU_ERROR = {"status": 401, "errorMessage": "invalid token for this key"}


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, VendorRejected), (403, VendorRejected), (404, VendorExpired), (410, VendorExpired)],
)
async def test_nutrient_poll_refusals_keep_the_vendor_answer(status: int, kind: type[Exception]) -> None:
    with pytest.raises(kind) as caught:
        await nu(answer(status, {**NU_ERROR, "status": status})).poll("r1", {})
    assert isinstance(caught.value, VendorRejected | VendorExpired)
    assert caught.value.status_code == status
    assert "invalid token for this key" in caught.value.message


async def test_nutrient_poll_of_an_unlisted_status_code_is_transient_with_the_vendor_text() -> None:
    with pytest.raises(VendorTransient) as caught:
        await nu(answer(418, NU_ERROR)).poll("r1", {})
    message = caught.value.message
    assert message.startswith("HTTP 418") and "invalid token for this key" in message


@pytest.mark.parametrize("body", [[{"status": "done"}], {"status": ""}, {"status": 5}, "done"])
async def test_nutrient_poll_of_an_answer_without_a_status_string_is_transient(body: Any) -> None:
    with pytest.raises(VendorTransient):
        await nu(answer(200, body)).poll("r1", {})


async def test_nutrient_poll_of_an_unknown_status_is_running() -> None:
    result = await nu(answer(200, {"status": "paused"})).poll("r1", {})
    assert result.status == "running" and result.vendor_status == "paused"
    assert result.progress is None and result.usage is None and not result.needs_fetch


async def test_nutrient_poll_progress_without_a_percent() -> None:
    """ "a percent estimate when available" (S003): a progress without one, or with a phase that is not
    text, is read as far as it goes."""
    result = await nu(answer(200, {"status": "running", "progress": {"phase": 7}})).poll("r1", {})
    assert result.progress is not None
    assert result.progress.percent is None and result.progress.phase is None
    result = await nu(answer(200, {"status": "running", "progress": {"phase": "ocr", "percent": 40}})).poll(
        "r1", {}
    )
    assert result.progress is not None and (result.progress.percent, result.progress.phase) == (40.0, "ocr")


async def test_nutrient_poll_counts_usage_only_when_done() -> None:
    usage = {"data_extraction_credits": {"cost": 3}}
    running = await nu(answer(200, {"status": "running", "usage": usage})).poll("r1", {})
    assert running.usage is None
    done = await nu(answer(200, {"status": "done", "usage": usage})).poll("r1", {})
    assert done.usage == {"credits": 3.0, "reported": usage}


@pytest.mark.parametrize("error", ["the engine crashed", None])
async def test_nutrient_poll_error_keeps_its_vendor_status(error: Any) -> None:
    result = await nu(answer(200, {"status": "error", "error": error})).poll("r1", {})
    assert result.status == "failed" and result.vendor_status == "error"
    assert result.error == "the vendor reported an error"


# Settings of the silent readings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("fileUrl,fileBase64,fileName", ("fileUrl", "fileBase64", "fileName")),
        (" file_url , file_base64,file_name ", ("file_url", "file_base64", "file_name")),
        ("a,b", None),
        ("a,b,c,d", None),
        ("a,a,b", None),
        ("a,b,c-d", None),
        ("a,,b", None),
        ("1a,b,c", None),
    ],
)
def test_uptiq_body_fields_setting(raw: str, expected: tuple[str, str, str] | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="three different field names"):
            uptiq.parse_body_fields(raw)
    else:
        assert uptiq.parse_body_fields(raw) == expected


async def test_uptiq_body_uses_the_configured_field_names() -> None:
    sent: list[Any] = []

    def vendor(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"data": {"_id": "x1", "documentStatus": "Pending"}})

    adapter = uptiq.UptiqAdapter(client(vendor), body_fields=("file_url", "file_base64", "file_name"))
    options = {"documentType": "Invoice", "fileBase64": "smuggled", "file_url": "smuggled"}
    await adapter.submit(req(options))
    await adapter.submit(SubmitRequest("r2", "extract", Document(url="https://d.test/a.pdf"), options, False))
    assert sent[0] == {"documentType": "Invoice", "file_base64": "JVBERi0xLjQ=", "file_name": "a.pdf"}
    assert sent[1] == {"documentType": "Invoice", "file_url": "https://d.test/a.pdf", "file_name": "document"}


@pytest.mark.parametrize(("raw", "expected"), [("upload", "upload"), (" SEND ", "send"), ("fetch", None)])
def test_nutrient_url_input_setting(raw: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="upload"):
            nutrient.parse_url_input(raw)
    else:
        assert nutrient.parse_url_input(raw) == expected


async def test_nutrient_without_a_fetcher_refuses_to_fetch() -> None:
    adapter = nu(answer(200))
    assert adapter.uploads_url_input
    with pytest.raises(VendorRejected, match="without a document fetcher"):
        await adapter.fetch_document("https://d.test/a.pdf")
    assert not nutrient.NutrientAdapter(client(answer(200)), url_input="send").uploads_url_input


# Nutrient fetch_result: where the zip is read from ------------------------------------------------------


class StubFetcher(DocumentFetcher):
    """Records the URLs the adapter hands to the document fetcher; the fetcher itself is tested on a real
    port in test_vendor_fetch.py, so here only the adapter's choice is under test."""

    def __init__(self, raises: Exception | None = None) -> None:
        super().__init__(Policy((), ()), max_bytes=1, timeout_s=1)
        self.urls: list[str] = []
        self.raises = raises

    async def fetch(self, url: str) -> bytes:
        self.urls.append(url)
        if self.raises is not None:
            raise self.raises
        return b"PK presigned"


def nutrient_result(download: Any, seen: list[str]) -> Handler:
    def vendor(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path.endswith("/assets/result"):
            output = {"downloadUrl": download} if download is not None else {}
            return httpx.Response(200, json={"output": output})
        return httpx.Response(200, content=b"PK own")

    return vendor


@pytest.mark.parametrize(
    ("download", "fetched", "content"),
    [
        ("https://storage.test/z.zip?sig=1", ["https://storage.test/z.zip?sig=1"], b"PK presigned"),
        ("http://storage.test/z.zip?sig=1", ["http://storage.test/z.zip?sig=1"], b"PK presigned"),
        ("ftp://storage.test/z.zip", [], b"PK own"),  # not http(s): Nutrient's own zip route
        ("//storage.test/z.zip", [], b"PK own"),
        ("https://vendor.test/extraction/runs/R1/assets/zip", [], b"PK own"),  # its own: with our key
    ],
)
async def test_nutrient_zip_is_read_from_the_right_place(
    download: str, fetched: list[str], content: bytes
) -> None:
    seen: list[str] = []
    stub = StubFetcher()
    adapter = nutrient.NutrientAdapter(client(nutrient_result(download, seen)), fetcher=stub)
    result = await adapter.fetch_result("R1", {})
    assert isinstance(result, FileResult)
    assert (result.content, result.media_type) == (content, "application/zip")
    assert stub.urls == fetched
    assert seen[-1].endswith("/assets/zip") is (not fetched)


@pytest.mark.parametrize(
    ("call", "shaped"),
    [
        # In a step: downloadUrl names hookbridge's copy (Nutrient's needs Nutrient's key).
        (Call(run_id="r", result_url="/v1/runs/r/result"), {"downloadUrl": "/v1/runs/r/result"}),
        # Zero retention: nothing kept, the zip inline.
        (
            Call(run_id="r", result_url="/v1/runs/r/result", zero_retention=True),
            {"file_base64": "UEsgb3du", "file_media_type": "application/zip"},
        ),
        # Outside a step: as the vendor said.
        (NO_CALL, {"downloadUrl": "https://vendor.test/extraction/runs/R1/assets/zip"}),
    ],
)
async def test_nutrient_shapes_its_split_result(call: Call, shaped: dict[str, Any]) -> None:
    own = "https://vendor.test/extraction/runs/R1/assets/zip"
    adapter = nutrient.NutrientAdapter(client(nutrient_result(own, [])), fetcher=StubFetcher())
    result = await adapter.fetch_result("R1", {}, call)
    data = result.data if isinstance(result, FileResult) else result
    assert data == {"output": shaped}
    assert isinstance(result, FileResult) is (not call.zero_retention)


@pytest.mark.parametrize(
    "body", [[1, 2], {"output": "text"}, {"output": {"downloadUrl": ""}}, {"output": {"downloadUrl": 5}}]
)
async def test_nutrient_result_without_a_zip_is_the_result(body: Any) -> None:
    stub = StubFetcher()
    result = await nutrient.NutrientAdapter(client(answer(200, body)), fetcher=stub).fetch_result("R1", {})
    assert result == body and stub.urls == []


async def test_nutrient_presigned_zip_faults() -> None:
    url = "https://storage.test/z.zip"
    too_large = StubFetcher(DocumentTooLarge("the document is larger than HOOKBRIDGE_MAX_DOCUMENT_BYTES"))
    with pytest.raises(VendorResultTooLarge, match="HOOKBRIDGE_MAX_DOCUMENT_BYTES"):
        await nutrient.NutrientAdapter(client(nutrient_result(url, [])), fetcher=too_large).fetch_result(
            "R", {}
        )
    expired = StubFetcher(DocumentUnavailable("the document URL answered HTTP 403", status_code=403))
    with pytest.raises(VendorTransient) as caught:
        await nutrient.NutrientAdapter(client(nutrient_result(url, [])), fetcher=expired).fetch_result(
            "R", {}
        )
    assert (
        caught.value.status_code == 403
        and caught.value.message == "the zip asset: the document URL answered HTTP 403"
    )
    blocked = StubFetcher(DocumentUnavailable("the document URL is not allowed: in a blocked network"))
    with pytest.raises(VendorRejected, match="downloadUrl: the document URL is not allowed"):
        await nutrient.NutrientAdapter(client(nutrient_result(url, [])), fetcher=blocked).fetch_result(
            "R", {}
        )


async def test_nutrient_fetch_document_goes_through_its_fetcher() -> None:
    stub = StubFetcher()
    adapter = nutrient.NutrientAdapter(client(answer(200)), fetcher=stub)
    assert await adapter.fetch_document("https://d.test/a.pdf") == b"PK presigned"
    assert stub.urls == ["https://d.test/a.pdf"]
