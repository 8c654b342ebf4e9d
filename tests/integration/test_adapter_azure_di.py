"""The azure_di adapter against the simulated Azure AI Document Intelligence on a real port: each rule of
next-vendors.md §1 the simulator plays, with the simulator's silent readings both ways (Retry-After on the
202 present and absent; a 429 with and without Retry-After)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.simulator import SimulatorConfig
from service.vendors.azure_di import OPERATION_KEY, AzureDiAdapter
from service.vendors.base import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    Document,
    PollResult,
    SubmitRequest,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorTransient,
)
from service.vendors.http import make_client
from tests.conftest import eventually

KEY = "sim-azure-di-key"
PDF = Document(content=b"%PDF-1.4 azure", filename="a.pdf", media_type="application/pdf")


@pytest.fixture
def sim_config() -> SimulatorConfig:
    # Short runs, no poll floor and no Retry-After unless a test sets them.
    return SimulatorConfig(duration_s=(0.1, 0.2), seed=3, azure_di_min_poll_s=0, azure_di_retry_after="never")


@pytest.fixture
async def sim(simulator: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=simulator) as client:
        yield client


def adapter_for(simulator: str, key: str = KEY, **kwargs: Any) -> AzureDiAdapter:
    client = make_client(simulator, {"Ocp-Apim-Subscription-Key": key}, timeout_s=5, vendor="azure_di")
    return AzureDiAdapter(client, **kwargs)


@pytest.fixture
async def adapter(simulator: str) -> AsyncIterator[AzureDiAdapter]:
    a = adapter_for(simulator)
    yield a
    await a._client.aclose()


def request(document: Document = PDF, **options: Any) -> SubmitRequest:
    return SubmitRequest("run_1", "analyze", document, {"model_id": "prebuilt-invoice", **options}, False)


async def until_done(adapter: AzureDiAdapter, result_id: str, state: dict[str, Any]) -> PollResult:
    async def done() -> PollResult | None:
        polled = await adapter.poll(result_id, state)
        return polled if polled.status not in ("queued", RUNNING) else None

    return await eventually(done, what="the operation to end")


@pytest.mark.parametrize(
    ("document", "upload"),
    [
        (PDF, "bytes"),
        (PDF, "base64"),
        (Document(url="https://docs.example/azure.pdf"), "bytes"),
    ],
)
async def test_each_way_in_gives_the_inline_result(
    simulator: str, document: Document, upload: str, sim: httpx.AsyncClient
) -> None:
    adapter = adapter_for(simulator, upload=upload)
    submitted = await adapter.submit(request(document, query_fields=["PONumber"], pages="1"))
    location = submitted.state[OPERATION_KEY]
    assert location.startswith(
        f"{simulator}/documentintelligence/documentModels/prebuilt-invoice/analyzeResults/"
    )
    assert location.endswith(f"{submitted.vendor_run_id}?api-version=2024-11-30")
    done = await until_done(adapter, submitted.vendor_run_id, submitted.state)
    assert done.status == SUCCEEDED and done.vendor_status == "succeeded"
    result = done.result
    assert result["modelId"] == "prebuilt-invoice" and [p["pageNumber"] for p in result["pages"]] == [1]
    sent = document.url.encode() if document.url else document.content or b""
    assert result["documents"][0]["fields"]["InvoiceId"]["valueString"] == (
        f"INV-{hashlib.sha256(sent).hexdigest()[:6]}"
    )
    assert "PONumber" in result["documents"][0]["fields"]  # query_fields turned the feature on
    log = (await sim.get("/_sim/requests", params={"vendor": "azure_di"})).json()["data"]
    assert log[0]["method"] == "POST" and log[0]["status"] == 202
    await adapter._client.aclose()


async def test_retry_after_on_the_202_is_read_when_present(
    adapter: AzureDiAdapter, sim: httpx.AsyncClient
) -> None:
    absent = await adapter.submit(request())
    assert absent.retry_after_s is None
    await sim.patch("/_sim/config", json={"azure_di_retry_after": "always", "azure_di_retry_after_s": 3})
    present = await adapter.submit(request())
    assert present.retry_after_s == 3.0
    polled = await adapter.poll(present.vendor_run_id, present.state)
    assert polled.status in ("queued", RUNNING) and polled.retry_after_s == 3.0


async def test_a_failed_analysis_is_failed_with_its_error(adapter: AzureDiAdapter) -> None:
    submitted = await adapter.submit(request(Document(content=b"%PDF-1.4 fail-me", filename="a.pdf")))
    done = await until_done(adapter, submitted.vendor_run_id, submitted.state)
    assert done.status == FAILED and done.error == "Invalid request. (InvalidRequest/InvalidContent)"
    assert done.error_details is not None and done.error_details["details"][0]["target"] == "1"


@pytest.mark.parametrize("retry_after", ["always", "never"])
async def test_polls_closer_than_the_floor_are_rate_limited(
    adapter: AzureDiAdapter, sim: httpx.AsyncClient, retry_after: str
) -> None:
    await sim.patch("/_sim/config", json={"azure_di_min_poll_s": 2, "azure_di_429_retry_after": retry_after})
    submitted = await adapter.submit(request())
    await adapter.poll(submitted.vendor_run_id, submitted.state)
    with pytest.raises(VendorRateLimited) as limited:
        await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert limited.value.status_code == 429
    assert (limited.value.retry_after is not None) is (retry_after == "always")


async def test_delete_then_gone(adapter: AzureDiAdapter) -> None:
    submitted = await adapter.submit(request())
    await until_done(adapter, submitted.vendor_run_id, submitted.state)
    await adapter.delete(submitted.vendor_run_id, submitted.state)
    # Deleted: the poll's 404 is the run gone; a second delete's NotFound is "already gone", not an error.
    with pytest.raises(VendorExpired):
        await adapter.poll(submitted.vendor_run_id, submitted.state)
    await adapter.delete(submitted.vendor_run_id, submitted.state)


async def test_a_result_past_retention_is_expired(adapter: AzureDiAdapter, sim: httpx.AsyncClient) -> None:
    submitted = await adapter.submit(request())
    await sim.patch("/_sim/config", json={"azure_di_retention_s": 0.001})
    with pytest.raises(VendorExpired):
        await adapter.poll(submitted.vendor_run_id, submitted.state)


async def test_injected_503s_are_transient(adapter: AzureDiAdapter, sim: httpx.AsyncClient) -> None:
    submitted = await adapter.submit(request())
    await sim.patch("/_sim/config", json={"rate_5xx": 1.0, "vendors_faulty": ["azure_di"]})
    with pytest.raises(VendorTransient) as polled:
        await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert polled.value.status_code in (500, 502, 503)
    with pytest.raises(VendorTransient):
        await adapter.submit(request())


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda s: adapter_for(s, key="nope"), "invalid subscription key"),
        (lambda s: adapter_for(s, api_version="2023-07-31"), "InvalidArgument"),
    ],
)
async def test_refusals_are_rejected(simulator: str, make: Any, said: str) -> None:
    adapter = make(simulator)
    with pytest.raises(VendorRejected, match=said):
        await adapter.submit(request())
    await adapter._client.aclose()


async def test_an_unknown_prebuilt_model_is_rejected(adapter: AzureDiAdapter) -> None:
    with pytest.raises(VendorRejected, match="NotFound") as refused:
        await adapter.submit(request(model_id="prebuilt-nothing"))
    assert refused.value.status_code == 404
