"""The LlamaParse adapter against the simulator on a real port (``hookbridge simulator``'s LlamaParse,
under ``/llamaparse``), one request kind at a time, with each of the simulator's readings where the
document is silent. The whole path through the API and the worker is test_llamaparse_e2e.py."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from hookbridge_llamaparse import LlamaParseAdapter
from service.delivery.fetch import DocumentFetcher
from service.delivery.urlsafety import Policy
from service.testing import eventually, simulator_api_key
from service.vendors import base
from service.vendors.base import (
    Document,
    SubmitRequest,
    Submitted,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorResultTooLarge,
    VendorTransient,
)
from service.vendors.http import make_client

pytestmark = pytest.mark.asyncio
KEY = simulator_api_key("llamaparse") or ""
LOOPBACK = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]


def fetcher(max_bytes: int = 1 << 20) -> DocumentFetcher:
    return DocumentFetcher(Policy(LOOPBACK, []), max_bytes=max_bytes, timeout_s=5)


@pytest_asyncio.fixture
async def client(simulator: str) -> AsyncIterator[httpx.AsyncClient]:
    made = make_client(
        simulator + "/llamaparse",
        {"Authorization": f"Bearer {KEY}"},
        timeout_s=5,
        vendor="llamaparse",
        budget=None,
    )
    async with made:
        yield made


@pytest_asyncio.fixture
async def adapter(client: httpx.AsyncClient) -> LlamaParseAdapter:
    return LlamaParseAdapter(client, fetcher=fetcher())


async def patch(simulator: str, **changes: Any) -> None:
    async with httpx.AsyncClient() as sim:
        (await sim.patch(f"{simulator}/_sim/config", json=changes)).raise_for_status()


async def log(simulator: str) -> list[tuple[str, str, int | None]]:
    async with httpx.AsyncClient() as sim:
        entries = (await sim.get(f"{simulator}/_sim/requests", params={"vendor": "llamaparse"})).json()
    return [(e["method"], e["path"], e["status"]) for e in entries["data"]]


def pdf(name: str = "invoice.pdf") -> Document:
    return Document(content=b"%PDF-1.4 " + name.encode(), filename=name, media_type="application/pdf")


def request(document: Document | None = None, **options: Any) -> SubmitRequest:
    return SubmitRequest("run_lp_1", "parse", document or pdf(), {"tier": "agentic", **options}, False)


async def finished(adapter: LlamaParseAdapter, submitted: Submitted) -> base.PollResult:
    async def check() -> base.PollResult | None:
        polled = await adapter.poll(submitted.vendor_run_id, submitted.state)
        return polled if polled.status in (base.SUCCEEDED, base.FAILED, base.CANCELED) else None

    result: base.PollResult = await eventually(check, what="a terminal LlamaParse status")
    return result


@pytest.mark.parametrize("shape", ["flat", "nested", "both"])
async def test_upload_and_url_submits_read_either_job_id(
    adapter: LlamaParseAdapter, simulator: str, shape: str
) -> None:
    await patch(simulator, llamaparse_id_shape=shape)
    by_bytes = await adapter.submit(request())
    by_url = await adapter.submit(
        request(Document(url="https://docs.example/a.pdf", filename="a.pdf", media_type="application/pdf"))
    )
    assert by_bytes.vendor_status == by_url.vendor_status == "PENDING"
    assert by_bytes.state == by_url.state == {"tier": "agentic"}
    assert by_bytes.retry_after_s is None  # the default reading: no Retry-After
    posts = [(m, p) for m, p, _ in await log(simulator) if m == "POST"]
    assert posts == [("POST", "/llamaparse/api/v2/parse/upload"), ("POST", "/llamaparse/api/v2/parse")]
    for submitted in (by_bytes, by_url):
        done = await finished(adapter, submitted)
        assert (done.status, done.vendor_status, done.needs_fetch) == (base.SUCCEEDED, "COMPLETED", True)


async def test_the_result_is_the_job_with_text_markdown_and_items(adapter: LlamaParseAdapter) -> None:
    submitted = await adapter.submit(request())
    await finished(adapter, submitted)
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    assert set(result) == {"job", "text", "markdown", "items"}
    assert result["job"]["id"] == submitted.vendor_run_id and result["job"]["status"] == "COMPLETED"
    assert result["text"]["pages"][0]["text"].startswith("Invoice INV-")
    assert result["markdown"]["pages"][0]["markdown"].startswith("# Invoice")
    assert result["items"]["pages"][0]["items"][0]["type"] == "heading"


async def test_the_fast_tier_gives_text_alone(adapter: LlamaParseAdapter) -> None:
    submitted = await adapter.submit(request(tier="fast"))
    assert submitted.state == {"tier": "fast"}
    await finished(adapter, submitted)
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    assert set(result) == {"job", "text"}


async def test_large_parts_come_from_their_presigned_urls_without_the_key(
    client: httpx.AsyncClient, simulator: str
) -> None:
    inline = LlamaParseAdapter(client, fetcher=fetcher())
    submitted = await inline.submit(request())
    await finished(inline, submitted)
    expected = await inline.fetch_result(submitted.vendor_run_id, submitted.state)
    await log(simulator)
    async with httpx.AsyncClient() as sim:
        await sim.delete(f"{simulator}/_sim/requests")
    # Past the adapter's inline limit: every part from its URL (one metadata GET, three downloads).
    large = LlamaParseAdapter(client, fetcher=fetcher(), inline_max_bytes=1)
    assert await large.fetch_result(submitted.vendor_run_id, submitted.state) == expected
    requests = await log(simulator)
    assert [p for m, p, _ in requests if "/api/v2/" in p] == [
        f"/llamaparse/api/v2/parse/{submitted.vendor_run_id}"
    ]
    downloads = sorted(p.rsplit("/", 1)[-1] for _, p, s in requests if p.startswith("/llamaparse-storage/"))
    assert downloads == ["items", "markdown", "text"]


async def test_a_part_left_out_inline_is_read_from_its_url(
    adapter: LlamaParseAdapter, simulator: str
) -> None:
    """The simulator's reading where the API leaves large inline content out (llamaparse_inline_max_bytes)."""
    submitted = await adapter.submit(request())
    await finished(adapter, submitted)
    expected = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    await patch(simulator, llamaparse_inline_max_bytes=100)
    assert await adapter.fetch_result(submitted.vendor_run_id, submitted.state) == expected
    assert [p for _, p, _ in await log(simulator) if p.startswith("/llamaparse-storage/")]


async def test_an_expired_presigned_url_is_transient_and_the_next_fetch_gets_fresh_ones(
    client: httpx.AsyncClient, simulator: str
) -> None:
    """Presigned URLs' expiry is NOT FOUND (§4.5): one refused is a transient fault, and the fetch tried
    again asks the metadata again, which names fresh URLs."""
    large = LlamaParseAdapter(client, fetcher=fetcher(), inline_max_bytes=1)
    submitted = await large.submit(request())
    await finished(large, submitted)
    await patch(simulator, llamaparse_presign_ttl_s=0.0)
    with pytest.raises(VendorTransient, match="presigned result URL was refused"):
        await large.fetch_result(submitted.vendor_run_id, submitted.state)
    await patch(simulator, llamaparse_presign_ttl_s=3600.0)
    assert set(await large.fetch_result(submitted.vendor_run_id, submitted.state)) == {
        "job",
        "text",
        "markdown",
        "items",
    }


async def test_a_result_past_the_kept_bytes_is_refused_before_it_is_read(
    client: httpx.AsyncClient, simulator: str
) -> None:
    small = LlamaParseAdapter(client, fetcher=fetcher(), max_asset_bytes=100)
    submitted = await small.submit(request())
    await finished(small, submitted)
    with pytest.raises(VendorResultTooLarge, match="more than the 100 kept"):
        await small.fetch_result(submitted.vendor_run_id, submitted.state)
    assert not [p for _, p, _ in await log(simulator) if p.startswith("/llamaparse-storage/")]


async def test_failed_and_failed_pages(adapter: LlamaParseAdapter, simulator: str) -> None:
    failed = await finished(adapter, await adapter.submit(request(pdf("will-fail.pdf"))))
    assert (failed.status, failed.error) == (base.FAILED, "simulated failure: unreadable document")
    await patch(simulator, llamaparse_failed_pages=True)
    submitted = await adapter.submit(request())
    assert (await finished(adapter, submitted)).status == base.SUCCEEDED  # COMPLETED with a failed page
    pages = (await adapter.fetch_result(submitted.vendor_run_id, submitted.state))["markdown"]["pages"]
    assert pages[-1]["success"] is False and pages[-1]["error"]


async def test_retry_after_on_the_create_and_the_polls_is_read(
    adapter: LlamaParseAdapter, simulator: str
) -> None:
    await patch(simulator, llamaparse_retry_after="always", llamaparse_retry_after_s=3)
    submitted = await adapter.submit(request(pdf("stuck.pdf")))
    assert submitted.retry_after_s == 3.0
    polled = await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert polled.status in (base.QUEUED, base.RUNNING) and polled.retry_after_s == 3.0


@pytest.mark.parametrize(("reading", "retry_after"), [("always", 10.0), ("never", None)])
async def test_the_submit_window_answers_429(
    adapter: LlamaParseAdapter, simulator: str, reading: str, retry_after: float | None
) -> None:
    await patch(
        simulator, llamaparse_window_limit=1, llamaparse_window_s=10.0, llamaparse_429_retry_after=reading
    )
    await adapter.submit(request())
    with pytest.raises(VendorRateLimited) as limited:
        await adapter.submit(request())
    assert limited.value.retry_after == retry_after


async def test_refusals(client: httpx.AsyncClient, adapter: LlamaParseAdapter, simulator: str) -> None:
    with pytest.raises(VendorRejected) as refused:
        await adapter.submit(request(version="v9"))  # a version the API refuses (the API model checks it too)
    assert refused.value.status_code == 422
    await patch(simulator, llamaparse_credits=0)
    with pytest.raises(VendorRejected, match="credits") as spent:
        await adapter.submit(request())
    assert spent.value.status_code == 402
    client.headers["Authorization"] = "Bearer llx-wrong"
    with pytest.raises(VendorRejected) as unauthorized:
        await adapter.poll("any", {})
    assert unauthorized.value.status_code == 401


async def test_cancel_then_cancel_again_is_fine(adapter: LlamaParseAdapter, simulator: str) -> None:
    submitted = await adapter.submit(request(pdf("stuck.pdf")))
    await adapter.cancel(submitted.vendor_run_id, submitted.state)
    assert (await adapter.poll(submitted.vendor_run_id, submitted.state)).status == base.CANCELED
    await adapter.cancel(submitted.vendor_run_id, submitted.state)  # terminal: refused, nothing to stop
    assert [s for m, p, s in await log(simulator) if p.endswith("/cancel")] == [200, 400]


async def test_delete_cancels_a_running_job_first_then_it_is_gone(
    adapter: LlamaParseAdapter, simulator: str
) -> None:
    submitted = await adapter.submit(request(pdf("stuck.pdf")))
    await adapter.delete(submitted.vendor_run_id, submitted.state)
    with pytest.raises(VendorExpired):
        await adapter.poll(submitted.vendor_run_id, submitted.state)
    tail = [(m, p.rsplit("/", 1)[-1], s) for m, p, s in await log(simulator)][-4:]
    job = submitted.vendor_run_id
    assert tail == [("DELETE", job, 400), ("POST", "cancel", 200), ("DELETE", job, 200), ("GET", job, 404)]
    await adapter.delete(submitted.vendor_run_id, submitted.state)  # gone already: confirmed by a GET


@pytest.mark.parametrize("reading", ["404", "405"])
async def test_without_a_delete_route_nothing_is_reported_deleted(
    adapter: LlamaParseAdapter, simulator: str, reading: str
) -> None:
    await patch(simulator, llamaparse_delete=reading)
    submitted = await adapter.submit(request())
    await finished(adapter, submitted)
    with pytest.raises(VendorRejected, match=f"not deleted: HTTP {reading}"):
        await adapter.delete(submitted.vendor_run_id, submitted.state)
    assert (await adapter.poll(submitted.vendor_run_id, submitted.state)).status == base.SUCCEEDED
