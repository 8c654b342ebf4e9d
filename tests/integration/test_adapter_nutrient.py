"""Contract tests of the Nutrient adapter against the simulator on a real port (NOTES.md §2)."""

from __future__ import annotations

import hashlib
import io
import random
import zipfile
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


async def vendor_log(sim: httpx.AsyncClient) -> list[tuple[str, str, int | None]]:
    entries = (await sim.get("/_sim/requests", params={"vendor": "nutrient"})).json()["data"]
    return [(e["method"], e["path"].rsplit("/", 1)[-1], e["status"]) for e in entries]


async def test_a_url_goes_as_json_with_the_instruction_fields_at_the_top_level(
    adapter: NutrientAdapter,
) -> None:
    """Issue 11, finding 1: nested under "instructions", Nutrient would not read the mode (the strict
    simulator refuses it), and a text parse would cost the default mode's 9 credits a page instead of 1."""
    url = "https://files.example.com/statement.pdf"
    submitted = await adapter.submit(
        request(Document(url=url), operation="parse", options={"instructions": {"mode": "text"}})
    )
    final = (await until_terminal(adapter, submitted))[-1]
    assert final.status == base.SUCCEEDED
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    pages = result["output"]["fields"]["pages"]
    assert final.usage is not None and final.usage["credits"] == 1.0 * pages  # text: 1 credit a page


async def test_instructions_that_carry_a_document_are_refused_before_calling(
    adapter: NutrientAdapter, sim: httpx.AsyncClient
) -> None:
    for instructions in ({"url": "https://elsewhere.example/x.pdf"}, {"assetId": "a1"}):
        with pytest.raises(VendorRejected, match="must not carry the document"):
            await adapter.submit(
                request(
                    Document(url="https://files.example.com/a.pdf"), options={"instructions": instructions}
                )
            )
    with pytest.raises(VendorRejected, match="JSON object"):
        await adapter.submit(request(options={"instructions": ["mode", "text"]}))
    assert await vendor_log(sim) == []


async def test_a_done_poll_reports_the_usage(adapter: NutrientAdapter) -> None:
    submitted = await adapter.submit(request())
    seen = await until_terminal(adapter, submitted)
    assert all(p.usage is None for p in seen[:-1])  # "a new run has empty usage"
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    cost = result["usage"]["data_extraction_credits"]["cost"]
    assert seen[-1].usage == {"credits": cost, "reported": {"data_extraction_credits": {"cost": cost}}}


@pytest.mark.parametrize("output", ["zip", "both"])
async def test_a_split_with_a_zip_asset_is_fetched_with_our_key(
    adapter: NutrientAdapter, output: str
) -> None:
    """Issue 11, finding 5: the zip asset only Nutrient's key can fetch comes back as a FileResult."""
    doc = pdf("two-invoices.pdf")
    submitted = await adapter.submit(
        request(doc, operation="split", options={"instructions": {"output": output}})
    )
    await until_terminal(adapter, submitted)
    fetched = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    assert isinstance(fetched, base.FileResult)
    assert fetched.media_type == "application/zip"
    with zipfile.ZipFile(io.BytesIO(fetched.content)) as archive:
        assert archive.read("invoice-1.pdf") == doc.content
    assert fetched.data["output"]["downloadUrl"].endswith(f"/runs/{submitted.vendor_run_id}/assets/zip")
    assert ("documents" in fetched.data["output"]) is (output == "both")


async def test_a_result_asset_past_the_limit_fails_without_reading_it_all(simulator: str) -> None:
    big = Document(content=b"%PDF-1.4 " + random.Random(3).randbytes(64 * 1024), filename="big.pdf")
    async with make_client(
        simulator + "/nutrient", {"Authorization": f"Bearer {KEY}"}, timeout_s=5, vendor="nutrient"
    ) as client:
        adapter = NutrientAdapter(client, max_asset_bytes=16 * 1024)
        submitted = await adapter.submit(
            request(big, operation="split", options={"instructions": {"output": "zip"}})
        )
        await until_terminal(adapter, submitted)
        with pytest.raises(base.VendorResultTooLarge, match="HOOKBRIDGE_MAX_DOCUMENT_BYTES"):
            await adapter.fetch_result(submitted.vendor_run_id, submitted.state)


async def test_a_download_url_on_another_host_never_gets_our_key() -> None:
    """The simulator always names its own host, so a MockTransport plays a vendor answer naming another."""
    seen: list[tuple[str, str | None]] = []

    def vendor(req: httpx.Request) -> httpx.Response:
        seen.append((str(req.url), req.headers.get("authorization")))
        if req.url.path.endswith("/assets/result"):
            return httpx.Response(200, json={"output": {"downloadUrl": "https://evil.example/steal.zip"}})
        return httpx.Response(
            200, content=b"PK\x05\x06" + bytes(18), headers={"content-type": "application/zip"}
        )

    async with httpx.AsyncClient(
        base_url="https://api.nutrient.test/",
        headers={"Authorization": "Bearer k"},
        transport=httpx.MockTransport(vendor),
    ) as client:
        fetched = await NutrientAdapter(client).fetch_result("RUN1", {})
    assert isinstance(fetched, base.FileResult)
    assert [url for url, _ in seen] == [
        "https://api.nutrient.test/extraction/runs/RUN1/assets/result",
        "https://api.nutrient.test/extraction/runs/RUN1/assets/zip",
    ]


async def test_delete_removes_a_finished_run(adapter: NutrientAdapter, sim: httpx.AsyncClient) -> None:
    submitted = await adapter.submit(request())
    await until_terminal(adapter, submitted)
    await adapter.delete(submitted.vendor_run_id, submitted.state)
    with pytest.raises(VendorExpired):
        await adapter.poll(submitted.vendor_run_id, submitted.state)
    # A 404 does not confirm a deletion (the route is an inference; a missing route answers 404 too):
    # "not deleted", never reported as done.
    with pytest.raises(VendorRejected, match="not deleted"):
        await adapter.delete(submitted.vendor_run_id, submitted.state)
    assert [e for e in await vendor_log(sim) if e[0] == "DELETE"] == [
        ("DELETE", submitted.vendor_run_id, 204),
        ("DELETE", submitted.vendor_run_id, 404),
    ]


async def test_delete_cancels_a_run_in_flight_first(adapter: NutrientAdapter, sim: httpx.AsyncClient) -> None:
    """S003: "The API rejects deletion requests for queued or running runs. Cancel the run before deleting
    it." """
    submitted = await adapter.submit(request(pdf("stuck.pdf")))
    await sim.delete("/_sim/requests")
    await adapter.delete(submitted.vendor_run_id, submitted.state)
    assert await vendor_log(sim) == [
        ("DELETE", submitted.vendor_run_id, 409),
        ("POST", "cancel", 200),
        ("DELETE", submitted.vendor_run_id, 204),
    ]
    assert isinstance(adapter, base.DeletesRuns)


async def test_polls_and_submits_share_one_rate_limit(
    adapter: NutrientAdapter, sim: httpx.AsyncClient
) -> None:
    await sim.patch("/_sim/config", json={"nutrient_rps": 0.001, "nutrient_burst": 2})
    submitted = await adapter.submit(request())
    await adapter.poll(submitted.vendor_run_id, submitted.state)
    with pytest.raises(base.VendorRateLimited) as limited:
        await adapter.submit(request(run_id="run_next"))
    assert limited.value.retry_after is None  # Nutrient documents no Retry-After


async def test_a_presigned_download_url_on_another_host_is_fetched_without_our_key(
    simulator: str, sim: httpx.AsyncClient
) -> None:
    """S003 says only that ``output.downloadUrl`` "points to" the zip. The simulator's ``other`` reading
    names a presigned URL on another origin (its other loopback name) that refuses any Authorization:
    the adapter fetches it through the document fetcher (callback address rules, size limit), key-less."""
    from service.config.settings import parse_networks
    from service.delivery.fetch import DocumentFetcher
    from service.delivery.urlsafety import Policy

    assert (await sim.patch("/_sim/config", json={"nutrient_download_host": "other"})).status_code == 200
    fetcher = DocumentFetcher(
        Policy(parse_networks("127.0.0.0/8,::1/128"), ()), max_bytes=1 << 20, timeout_s=5
    )
    doc = pdf("presigned.pdf")
    async with make_client(
        simulator + "/nutrient", {"Authorization": f"Bearer {KEY}"}, timeout_s=5, vendor="nutrient"
    ) as client:
        adapter = NutrientAdapter(client, fetcher=fetcher)
        submitted = await adapter.submit(
            request(doc, operation="split", options={"instructions": {"output": "zip"}})
        )
        await until_terminal(adapter, submitted)
        fetched = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    assert isinstance(fetched, base.FileResult) and fetched.media_type == "application/zip"
    download = fetched.data["output"]["downloadUrl"]
    assert httpx.URL(download).host != httpx.URL(simulator).host
    with zipfile.ZipFile(io.BytesIO(fetched.content)) as archive:
        assert archive.read("invoice-1.pdf") == doc.content
    log = (await sim.get("/_sim/requests", params={"vendor": "nutrient"})).json()["data"]
    storage = [e for e in log if "/_storage/" in e["path"]]
    assert [e["status"] for e in storage] == [200]  # a keyed request would have been answered 400
    assert not any(e["path"].endswith("/assets/zip") for e in log)


async def test_a_presigned_download_url_to_a_blocked_address_is_refused(simulator: str) -> None:
    """A downloadUrl the vendor names on a blocked network is never fetched: the run's result is refused
    (vendor_rejected), not retried. A MockTransport plays the vendor's answer; the fetch is real."""
    from service.config.settings import parse_blocked_networks
    from service.delivery.fetch import DocumentFetcher
    from service.delivery.urlsafety import Policy

    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"output": {"downloadUrl": "http://169.254.169.254/latest/meta-data/x.zip"}}
        )

    fetcher = DocumentFetcher(Policy((), parse_blocked_networks("")), max_bytes=1 << 20, timeout_s=5)
    async with httpx.AsyncClient(
        base_url="https://api.nutrient.test/", transport=httpx.MockTransport(vendor)
    ) as client:
        with pytest.raises(VendorRejected, match="blocked network"):
            await NutrientAdapter(client, fetcher=fetcher).fetch_result("RUN1", {})


async def test_a_json_submit_under_the_nested_reading_is_refused_clearly(
    adapter: NutrientAdapter, sim: httpx.AsyncClient
) -> None:
    """The simulator's ``nested`` reading is real: a JSON (URL) body with top-level instructions is
    refused 400, which the adapter reports as a rejection naming the field (never a silent default)."""
    assert (await sim.patch("/_sim/config", json={"nutrient_json_instructions": "nested"})).status_code == 200
    doc = Document(url="https://files.example/invoice.pdf", filename="invoice.pdf")
    with pytest.raises(VendorRejected, match="schema: not a field of a JSON request"):
        await adapter.submit(request(doc))
