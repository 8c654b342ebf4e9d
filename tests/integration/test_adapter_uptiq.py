"""Contract tests of the Uptiq adapter against the simulator on a real port (NOTES.md §3)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.vendors import base
from service.vendors.base import (
    Document,
    PollResult,
    SubmitRequest,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorTransient,
)
from service.vendors.http import make_client
from service.vendors.uptiq import EARLY_404_WINDOW_S, SUBMITTED_KEY, UptiqAdapter
from tests.conftest import eventually

KEY = "sim-uptiq-key"


@pytest.fixture
async def sim(simulator: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=simulator) as client:
        yield client


def client_for(simulator: str, key: str = KEY) -> httpx.AsyncClient:
    return make_client(simulator + "/uptiq", {"X-Api-Key": key}, timeout_s=5, vendor="uptiq", budget=None)


@pytest.fixture
async def adapter(simulator: str) -> AsyncIterator[UptiqAdapter]:
    async with client_for(simulator) as client:
        yield UptiqAdapter(client)


def pdf(name: str = "balance.pdf") -> Document:
    return Document(content=b"%PDF-1.4 " + name.encode(), filename=name, media_type="application/pdf")


def request(document: Document | None = None, options: dict[str, Any] | None = None) -> SubmitRequest:
    return SubmitRequest(
        run_id="run_test",
        operation="extract",
        document=document or pdf(),
        options={"documentType": "BalanceSheet"} if options is None else options,
        zero_retention=False,
    )


async def until_terminal(adapter: UptiqAdapter, submitted: base.Submitted) -> list[PollResult]:
    """Polls as the worker does: an early 404 is a transient fault, retried."""
    seen: list[PollResult] = []

    async def check() -> bool:
        try:
            seen.append(await adapter.poll(submitted.vendor_run_id, submitted.state))
        except VendorTransient as exc:
            assert exc.status_code == 404
            return False
        return seen[-1].status in (base.SUCCEEDED, base.FAILED)

    await eventually(check, what="a terminal Uptiq status")
    return seen


async def vendor_requests(sim: httpx.AsyncClient) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = (await sim.get("/_sim/requests", params={"vendor": "uptiq"})).json()[
        "data"
    ]
    return entries


async def test_bytes_run_to_processed_with_the_result(adapter: UptiqAdapter) -> None:
    doc = pdf()
    before = time.time()
    submitted = await adapter.submit(request(doc))
    assert submitted.vendor_status == "Pending"
    assert before <= submitted.state[SUBMITTED_KEY] <= time.time()

    seen = await until_terminal(adapter, submitted)
    final = seen[-1]
    assert final.status == base.SUCCEEDED and final.vendor_status == "Processed" and not final.needs_fetch
    assert final.result["documentType"] == "BalanceSheet"
    # fileBase64 was decoded by the simulator: the fields derive from exactly our bytes.
    assert final.result["extractedData"]["sha256"] == hashlib.sha256(doc.content or b"").hexdigest()
    assert final.progress == base.Progress(phase="completed", message="Extraction complete")


async def test_a_url_document_goes_as_file_url(adapter: UptiqAdapter) -> None:
    url = "https://files.example.com/statements/q3.pdf"
    seen = await until_terminal(adapter, await adapter.submit(request(Document(url=url))))
    assert seen[-1].result["extractedData"]["sha256"] == hashlib.sha256(url.encode()).hexdigest()


async def test_200_for_document_type_and_202_for_document_types(
    adapter: UptiqAdapter, sim: httpx.AsyncClient
) -> None:
    single = await adapter.submit(request())
    multi = await adapter.submit(request(options={"documentTypes": ["BalanceSheet", "IncomeStatement"]}))
    codes = [e["status"] for e in await vendor_requests(sim) if e["method"] == "POST"]
    assert codes == [200, 202]
    assert single.vendor_run_id != multi.vendor_run_id
    assert (await until_terminal(adapter, multi))[-1].status == base.SUCCEEDED


async def test_other_body_fields_are_passed_through() -> None:
    """The simulator echoes only a few fields, so a MockTransport records the exact body sent."""
    bodies: list[dict[str, Any]] = []

    def vendor(req: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(req.content))
        return httpx.Response(200, json={"data": {"_id": "x1", "documentStatus": "Pending"}})

    async with httpx.AsyncClient(base_url="http://uptiq.test", transport=httpx.MockTransport(vendor)) as c:
        options = {"documentType": "BalanceSheet", "model": "m-2", "enableCaching": False, "fileUrl": "no"}
        await UptiqAdapter(c).submit(request(pdf("a.pdf"), options=options))
    body = bodies[0]
    assert body["model"] == "m-2" and body["enableCaching"] is False
    assert body["fileName"] == "a.pdf" and "fileUrl" not in body  # the document decides, not options
    assert body["fileBase64"]


@pytest.mark.parametrize("options", [{}, {"documentType": ""}, {"documentTypes": []}, {"documentTypes": [1]}])
async def test_a_missing_document_type_is_refused_before_calling(
    adapter: UptiqAdapter, sim: httpx.AsyncClient, options: dict[str, Any]
) -> None:
    with pytest.raises(VendorRejected, match="documentType"):
        await adapter.submit(request(options=options))
    assert await vendor_requests(sim) == []


async def test_the_envelope_status_is_never_read(adapter: UptiqAdapter, sim: httpx.AsyncClient) -> None:
    # The simulator: envelope "success" while the job is still Pending.
    submitted = await adapter.submit(request(pdf("slow-balance.pdf")))
    await eventually(
        lambda: _visible(adapter, submitted), what="the record to become visible after the early 404"
    )
    raw = await sim.get(f"/uptiq/document-extractions/{submitted.vendor_run_id}", headers={"X-Api-Key": KEY})
    assert raw.json()["status"] == "success"
    assert raw.json()["extraction"]["status"] in ("Pending", "Processing")
    polled = await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert polled.status in (base.QUEUED, base.RUNNING) and polled.result is None


async def test_an_envelope_that_disagrees_with_the_job_is_ignored() -> None:
    """An envelope reading something else than "success" cannot come from the simulator: MockTransport."""
    record = {"_id": "x1", "status": "Processed", "result": {"extractedData": {"a": 1}}}

    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"extraction": record, "status": "error"})

    async with httpx.AsyncClient(base_url="http://uptiq.test", transport=httpx.MockTransport(vendor)) as c:
        result = await UptiqAdapter(c).poll("x1", {SUBMITTED_KEY: time.time()})
    assert result.status == base.SUCCEEDED and result.result == {"extractedData": {"a": 1}}


@pytest.mark.parametrize("status", ["Reviewing", None])
async def test_an_unknown_status_is_not_terminal(status: str | None) -> None:
    """The simulator only produces documented statuses, so a MockTransport plays the vendor here. An
    unknown status is running; a missing one a transient fault (never the status "None")."""

    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"extraction": {"_id": "x1", "status": status}, "status": "success"})

    async with httpx.AsyncClient(base_url="http://uptiq.test", transport=httpx.MockTransport(vendor)) as c:
        if status is None:
            with pytest.raises(base.VendorTransient):
                await UptiqAdapter(c).poll("x1", {SUBMITTED_KEY: time.time()})
            return
        result = await UptiqAdapter(c).poll("x1", {SUBMITTED_KEY: time.time()})
    assert result.status == base.RUNNING


async def test_early_404s_are_transient_then_the_record_is_visible(
    adapter: UptiqAdapter, sim: httpx.AsyncClient
) -> None:
    await sim.patch("/_sim/config", json={"uptiq_early_404_s": 0.5})
    submitted = await adapter.submit(request())
    with pytest.raises(VendorTransient) as info:
        await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert info.value.status_code == 404 and not isinstance(info.value, VendorExpired)
    await eventually(lambda: _visible(adapter, submitted), what="the record visible after its 404 window")
    visible = await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert visible.vendor_status in ("Pending", "Processing", "Processed")
    assert (await until_terminal(adapter, submitted))[-1].status == base.SUCCEEDED


async def test_the_record_extras_reach_the_result_and_the_credits_the_usage(adapter: UptiqAdapter) -> None:
    """S004: the async record carries creditReservation, webhookStatus and fraudResults beside the result."""
    final = (await until_terminal(adapter, await adapter.submit(request())))[-1]
    assert final.status == base.SUCCEEDED
    assert final.result["extractedData"]["invoice_number"].startswith("INV-")  # the sync shape, unchanged
    assert final.result["fraudResults"]["checks"]
    assert final.result["creditReservation"]["status"] == "consumed"
    assert final.result["webhookStatus"] == "NotConfigured"
    assert final.usage is not None
    # A reservation is not a charge: reported as the vendor gave it, never counted as credits spent.
    assert final.usage["credits"] is None
    assert final.usage["reported"] == {"creditReservation": final.result["creditReservation"]}


@pytest.mark.parametrize(
    ("reservation", "credits"),
    [(12, None), ({"amount": 3.5}, None), ({"status": "reserved"}, None), ("n/a", None)],
    ids=["number", "amount", "no-number", "text"],
)
async def test_an_unknown_credit_reservation_shape_is_kept_as_reported(
    reservation: Any, credits: float | None
) -> None:
    """The shape of creditReservation is a guess; the simulator has one shape, so a MockTransport plays the
    other readings of it."""
    record = {"_id": "x1", "status": "Processed", "result": {}, "creditReservation": reservation}

    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"extraction": record, "status": "success"})

    async with httpx.AsyncClient(base_url="http://uptiq.test", transport=httpx.MockTransport(vendor)) as c:
        result = await UptiqAdapter(c).poll("x1", {SUBMITTED_KEY: time.time()})
    assert result.usage == {"credits": credits, "reported": {"creditReservation": reservation}}
    assert result.result == {"creditReservation": reservation}


async def test_a_404_after_the_window_means_expired(simulator: str, sim: httpx.AsyncClient) -> None:
    # Past the documented window, even the simulator's first early 404 means the vendor has no such run.
    async with client_for(simulator) as client:
        submitted = await UptiqAdapter(client).submit(request())
        with pytest.raises(VendorExpired):
            await UptiqAdapter(client, early_404_window_s=0).poll(submitted.vendor_run_id, submitted.state)
    # An id the vendor never had, polled long after the submit recorded in the state.
    async with client_for(simulator) as client:
        stale = {SUBMITTED_KEY: time.time() - EARLY_404_WINDOW_S - 1}
        with pytest.raises(VendorExpired):
            await UptiqAdapter(client).poll("0d1e2f3a-0000-4000-8000-000000000000", stale)


async def test_without_its_own_timestamp_the_window_uses_the_worker_one(simulator: str) -> None:
    async with client_for(simulator) as client:
        adapter = UptiqAdapter(client)
        missing = "0d1e2f3a-0000-4000-8000-000000000000"
        with pytest.raises(VendorTransient):
            await adapter.poll(missing, {"submitted_at": int(time.time() * 1000)})
        with pytest.raises(VendorExpired):
            await adapter.poll(missing, {"submitted_at": int((time.time() - 3600) * 1000)})


async def test_stuck_in_processing_stays_running(adapter: UptiqAdapter, sim: httpx.AsyncClient) -> None:
    await sim.patch("/_sim/config", json={"uptiq_stuck": True, "uptiq_early_404_s": 0})
    submitted = await adapter.submit(request())
    started = time.monotonic()
    seen: list[PollResult] = []

    async def polled_past_any_normal_duration() -> bool:
        seen.append(await adapter.poll(submitted.vendor_run_id, submitted.state))
        assert seen[-1].status in (base.QUEUED, base.RUNNING)
        # sim_config draws durations of at most 0.3 s: twice that, and it still says Processing.
        return seen[-1].vendor_status == "Processing" and time.monotonic() - started > 0.6

    await eventually(polled_past_any_normal_duration, what="a long stretch of Processing")
    assert seen[-1].progress is not None and seen[-1].progress.phase == "extracting"
    assert (seen[-1].progress.message or "").startswith("Extracting data")


async def test_failed_carries_the_document_quality(adapter: UptiqAdapter) -> None:
    seen = await until_terminal(adapter, await adapter.submit(request(pdf("fail-blurry.pdf"))))
    final = seen[-1]
    assert final.status == base.FAILED and final.vendor_status == "Failed"
    assert final.error is not None and "unreadable document" in final.error
    assert "documentQuality" in final.error and "blurry" in final.error
    assert final.error_details is not None
    assert final.error_details["documentQuality"] == {"score": 0.12, "issues": ["blurry"]}


async def test_a_refused_submit_and_a_wrong_key_are_rejected(adapter: UptiqAdapter, simulator: str) -> None:
    with pytest.raises(VendorRejected, match="simulated rejection"):
        await adapter.submit(request(pdf("reject.pdf")))
    async with client_for(simulator, key="nope") as client:
        with pytest.raises(VendorRejected, match="X-Api-Key") as info:
            await UptiqAdapter(client).submit(request())
    assert info.value.status_code == 401


async def test_5xx_and_429_are_transient(adapter: UptiqAdapter, sim: httpx.AsyncClient) -> None:
    await sim.patch("/_sim/config", json={"rate_5xx": 1.0, "vendors_faulty": ["uptiq"]})
    with pytest.raises(VendorTransient) as info:
        await adapter.submit(request())
    assert info.value.status_code in (500, 502, 503)
    # 429s come from the simulator's bucket per key: one request's worth, then empty for ~1000 s.
    await sim.patch("/_sim/config", json={"rate_5xx": 0.0, "uptiq_rps": 0.001, "uptiq_burst": 1})
    with pytest.raises(VendorTransient) as first:
        await adapter.poll("x", {SUBMITTED_KEY: time.time()})
    assert first.value.status_code == 404
    with pytest.raises(VendorRateLimited) as limited:
        await adapter.poll("x", {SUBMITTED_KEY: time.time()})
    assert limited.value.retry_after is None  # Uptiq documents no Retry-After


async def test_cancel_does_nothing(adapter: UptiqAdapter, sim: httpx.AsyncClient) -> None:
    assert adapter.supports_cancel is False
    await adapter.cancel("any", {})
    assert await vendor_requests(sim) == []


async def _visible(adapter: UptiqAdapter, submitted: base.Submitted) -> bool:
    try:
        await adapter.poll(submitted.vendor_run_id, submitted.state)
    except VendorTransient:
        return False
    return True
