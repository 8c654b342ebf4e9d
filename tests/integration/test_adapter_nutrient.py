"""Contract tests of the Nutrient adapter against the simulator on a real port (NOTES.md §2)."""

from __future__ import annotations

import hashlib
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
    VendorRejected,
    VendorTransient,
)
from service.vendors.http import make_client
from service.vendors.nutrient import NutrientAdapter
from tests.conftest import eventually

KEY = "sim-nutrient-key"
TERMINAL = (base.SUCCEEDED, base.FAILED, base.CANCELED)


@pytest.fixture
async def sim(simulator: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=simulator) as client:
        yield client


@pytest.fixture
async def adapter(simulator: str) -> AsyncIterator[NutrientAdapter]:
    client = make_client(
        simulator + "/nutrient",
        {"Authorization": f"Bearer {KEY}"},
        timeout_s=5,
        vendor="nutrient",
        budget=None,
    )
    async with client:
        yield NutrientAdapter(client)


def pdf(name: str = "invoice.pdf") -> Document:
    return Document(content=b"%PDF-1.4 " + name.encode(), filename=name, media_type="application/pdf")


def request(
    document: Document | None = None,
    *,
    run_id: str = "run_nutrient_1",
    operation: str = "extract",
    options: dict[str, Any] | None = None,
) -> SubmitRequest:
    return SubmitRequest(
        run_id=run_id,
        operation=operation,
        document=document or pdf(),
        options={"instructions": {"schema": {"type": "object"}}} if options is None else options,
        zero_retention=False,
    )


async def until_terminal(adapter: NutrientAdapter, submitted: base.Submitted) -> list[PollResult]:
    seen: list[PollResult] = []

    async def check() -> bool:
        seen.append(await adapter.poll(submitted.vendor_run_id, submitted.state))
        return seen[-1].status in TERMINAL

    await eventually(check, what="a terminal Nutrient status")
    return seen


async def test_multipart_submit_polls_to_done_and_fetches_the_result(adapter: NutrientAdapter) -> None:
    doc = pdf()
    submitted = await adapter.submit(request(doc))
    assert len(submitted.vendor_run_id) == 26 and submitted.vendor_status == "queued"
    final = (await until_terminal(adapter, submitted))[-1]
    assert final.status == base.SUCCEEDED and final.needs_fetch and final.result is None
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    assert result["output"]["fields"]["sha256"] == hashlib.sha256(doc.content or b"").hexdigest()
    assert result["usage"]["data_extraction_credits"]["cost"] > 0


async def test_url_submit(adapter: NutrientAdapter) -> None:
    url = "https://files.example.com/invoice.pdf"
    submitted = await adapter.submit(request(Document(url=url), operation="parse", options={}))
    assert (await until_terminal(adapter, submitted))[-1].status == base.SUCCEEDED
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    assert result["output"]["fields"]["sha256"] == hashlib.sha256(url.encode()).hexdigest()
    assert result["output"]["markdown"].startswith("# Invoice")


async def test_the_same_run_id_returns_the_same_vendor_run(
    adapter: NutrientAdapter, sim: httpx.AsyncClient
) -> None:
    first = await adapter.submit(request(run_id="run_same"))
    second = await adapter.submit(request(run_id="run_same"))
    other = await adapter.submit(request(run_id="run_other"))
    assert first.vendor_run_id == second.vendor_run_id != other.vendor_run_id
    stats = (await sim.get("/_sim/stats")).json()["nutrient"]
    assert sum(stats.values()) == 2


async def test_progress_while_running(adapter: NutrientAdapter) -> None:
    submitted = await adapter.submit(request(pdf("slow-invoice.pdf")))
    seen = await until_terminal(adapter, submitted)
    running = [p for p in seen if p.status == base.RUNNING]
    assert running, "a slow run is seen running"
    assert all(p.progress is not None and p.progress.phase for p in running)
    percents = [p.progress.percent for p in running if p.progress is not None]
    assert percents == sorted(percents) and all(0 <= (x or 0) <= 99 for x in percents)


async def test_failure_carries_the_vendor_message(adapter: NutrientAdapter) -> None:
    final = (await until_terminal(adapter, await adapter.submit(request(pdf("fail-scan.pdf")))))[-1]
    assert final.status == base.FAILED and "unreadable document" in (final.error or "")
    assert final.error_details is not None and final.error_details["status"] == 422


async def test_billing_failure_is_reported_as_such(adapter: NutrientAdapter) -> None:
    final = (await until_terminal(adapter, await adapter.submit(request(pdf("billing.pdf")))))[-1]
    assert final.status == base.FAILED and "billing" in (final.error or "")


async def test_cancel_ends_the_run_canceled_and_is_idempotent(adapter: NutrientAdapter) -> None:
    submitted = await adapter.submit(request(pdf("stuck-invoice.pdf")))
    await adapter.cancel(submitted.vendor_run_id, submitted.state)
    await adapter.cancel(submitted.vendor_run_id, submitted.state)  # 200 again
    polled = await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert polled.status == base.CANCELED and polled.vendor_status == "canceled"


async def test_cancel_after_done_is_quiet(adapter: NutrientAdapter, sim: httpx.AsyncClient) -> None:
    submitted = await adapter.submit(request())
    await until_terminal(adapter, submitted)
    await adapter.cancel(submitted.vendor_run_id, submitted.state)  # 409 run_not_cancelable: nothing to stop
    log = (await sim.get("/_sim/requests", params={"vendor": "nutrient"})).json()["data"]
    assert log[-1]["path"].endswith("/cancel") and log[-1]["status"] == 409


async def test_no_credits_is_rejected(adapter: NutrientAdapter, sim: httpx.AsyncClient) -> None:
    await sim.patch("/_sim/config", json={"nutrient_credits": 0})
    with pytest.raises(VendorRejected, match="insufficient") as info:
        await adapter.submit(request())
    assert info.value.status_code == 402


async def test_an_expired_run_is_vendor_expired(adapter: NutrientAdapter, sim: httpx.AsyncClient) -> None:
    await sim.patch("/_sim/config", json={"nutrient_retention_s": 0})
    submitted = await adapter.submit(request())

    async def gone() -> bool:
        try:
            await adapter.poll(submitted.vendor_run_id, submitted.state)
        except VendorExpired as exc:
            assert exc.status_code == 410
            return True
        return False

    await eventually(gone, what="410 run_expired once the run finished")


async def test_enqueue_failure_is_transient(adapter: NutrientAdapter, sim: httpx.AsyncClient) -> None:
    await sim.patch("/_sim/config", json={"nutrient_rate_enqueue_fail": 1.0})
    with pytest.raises(VendorTransient) as info:
        await adapter.submit(request())
    assert info.value.status_code == 503
