"""The Textract adapter against the simulated Textract and its S3 (moto) on a real port (next-vendors.md §2):
SigV4 checked by botocore's own signer, requests validated by Textract's service model, the document
staged in S3 and deleted again."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import botocore.session
import httpx
import pytest

from service.vendors import aws, base, textract
from service.vendors.base import (
    Document,
    PollResult,
    SubmitRequest,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
)
from service.vendors.http import make_client
from service.vendors.textract import TextractAdapter
from tests.conftest import eventually

KEY_ID, SECRET, REGION = "AKIASIMULATOR0000001", "sim-textract-secret-access-key", "us-east-1"
BUCKET, PREFIX = "hookbridge-staging", "runs/"
THREE_PAGES = b"%PDF-1.7\n1 0 obj <</Type /Page>> 2 0 obj <</Type /Page>> 3 0 obj <</Type /Page>>\n"
TERMINAL = (base.SUCCEEDED, base.FAILED, base.CANCELED)


def credentials(secret: str = SECRET) -> aws.AwsCredentials:
    session = botocore.session.Session()
    session.set_credentials(KEY_ID, secret)
    return aws.AwsCredentials(session)


async def sim_patch(simulator: str, **knobs: Any) -> None:
    async with httpx.AsyncClient() as client:
        (await client.patch(f"{simulator}/_sim/config", json=knobs)).raise_for_status()


async def make_bucket(simulator: str, bucket: str = BUCKET) -> None:
    """Creates the staging bucket in the simulator's S3 (moto), signed as the adapter signs."""
    request = httpx.Request("PUT", f"{simulator}/s3/{bucket}")
    aws.sign(request, await credentials().frozen(), "s3", REGION)
    async with httpx.AsyncClient() as client:
        response = await client.send(request)
    assert response.status_code in (200, 409), response.text


async def s3_status(simulator: str, key: str) -> int:
    request = httpx.Request("GET", f"{simulator}/s3/{BUCKET}/{key}")
    aws.sign(request, await credentials().frozen(), "s3", REGION)
    async with httpx.AsyncClient() as client:
        return (await client.send(request)).status_code


def textract_client(
    simulator: str, creds: aws.AwsCredentials | None = None, region: str = REGION
) -> httpx.AsyncClient:
    """The vendor client as the worker builds it: SigV4 on every request (``SPEC.auth``)."""
    auth = aws.SigV4(creds or credentials(), "textract", region)
    return make_client(simulator + "/textract", {}, timeout_s=5, vendor="textract", budget=None, auth=auth)


@pytest.fixture
async def adapter(simulator: str) -> AsyncIterator[TextractAdapter]:
    await make_bucket(simulator)
    async with textract_client(simulator) as client:
        # The S3 staging signs with the client's own credentials (the auth's).
        yield TextractAdapter(
            client,
            region=REGION,
            bucket=BUCKET,
            prefix=PREFIX,
            s3_endpoint_url=simulator + "/s3",
            throttle_pause_s=0.01,
        )


def request(
    document: Document | None = None,
    *,
    run_id: str = "run_TEXTRACT1",
    operation: str = "analyze",
    options: dict[str, Any] | None = None,
) -> SubmitRequest:
    return SubmitRequest(
        run_id=run_id,
        operation=operation,
        document=document
        or Document(content=THREE_PAGES, filename="invoice.pdf", media_type="application/pdf"),
        options={"feature_types": ["TABLES"]} if options is None else options,
        zero_retention=False,
    )


async def until_terminal(adapter: TextractAdapter, submitted: base.Submitted) -> PollResult:
    seen: list[PollResult] = []

    async def check() -> bool:
        seen.append(await adapter.poll(submitted.vendor_run_id, submitted.state))
        return seen[-1].status in TERMINAL

    await eventually(check, what="a terminal Textract status")
    return seen[-1]


async def test_three_pages_collected_across_next_tokens(adapter: TextractAdapter, simulator: str) -> None:
    await sim_patch(simulator, textract_page_blocks=7)  # 30 Blocks: 5 Get pages
    submitted = await adapter.submit(
        request(
            options={
                "feature_types": ["TABLES"],
                "queries": [{"text": "What is the invoice number?", "alias": "number"}],
            }
        )
    )
    assert submitted.state == {
        "operation": "analyze",
        "staged": f"s3://{BUCKET}/runs/run_TEXTRACT1/invoice.pdf",
    }
    polled = await until_terminal(adapter, submitted)
    assert (polled.status, polled.vendor_status, polled.needs_fetch) == (base.SUCCEEDED, "SUCCEEDED", True)
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    blocks = result["Blocks"]
    # A PAGE, 3 LINEs, 6 WORDs a page, and the query's 2 blocks on page 1: every page, in order, once.
    assert len(blocks) == 32
    assert len({b["Id"] for b in blocks}) == 32
    assert [b["Page"] for b in blocks if b["BlockType"] == "PAGE"] == [1, 2, 3]
    assert [b["Page"] for b in blocks] == sorted(b["Page"] for b in blocks)
    assert result["DocumentMetadata"] == {"Pages": 3}  # once, not summed over the pages
    assert result["JobStatus"] == "SUCCEEDED"
    assert "NextToken" not in result and "Warnings" not in result
    assert any(b["BlockType"] == "QUERY_RESULT" for b in blocks)


async def test_large_result_is_written_to_a_file(simulator: str) -> None:
    await make_bucket(simulator)
    await sim_patch(simulator, textract_page_blocks=4)
    async with textract_client(simulator) as client:

        def sized(max_asset_bytes: int, max_answer_bytes: int = 0) -> TextractAdapter:
            return TextractAdapter(
                client,
                region=REGION,
                bucket=BUCKET,
                s3_endpoint_url=simulator + "/s3",
                max_asset_bytes=max_asset_bytes,
                max_answer_bytes=max_answer_bytes,
                spill_bytes=2048,
            )

        small = sized(10**6)
        submitted = await small.submit(request(options={"feature_types": ["FORMS"]}))
        await until_terminal(small, submitted)
        # Spilled to a file past 2 KiB, read back as JSON: within what the store keeps whole.
        whole = await small.fetch_result(submitted.vendor_run_id, submitted.state)
        assert len(whole["Blocks"]) == 30 and whole["DocumentMetadata"] == {"Pages": 3}
        # Past what the store keeps whole, within the answer cap: the file itself.
        result = await sized(4096, 10**6).fetch_result(submitted.vendor_run_id, submitted.state)
        assert isinstance(result, base.ResultFile) and result.media_type == "application/json"
        try:
            with open(result.path, "rb") as f:
                assert json.load(f) == whole
            assert result.size == os.path.getsize(result.path)
        finally:
            os.unlink(result.path)
        tiny = TextractAdapter(
            client,
            region=REGION,
            bucket=BUCKET,
            s3_endpoint_url=simulator + "/s3",
            max_asset_bytes=4096,
            spill_bytes=1024,
        )
        with pytest.raises(base.VendorResultTooLarge):
            await tiny.fetch_result(submitted.vendor_run_id, submitted.state)


async def test_a_retried_start_returns_the_same_job(adapter: TextractAdapter) -> None:
    first = await adapter.submit(request(run_id="run_RETRY1"))
    again = await adapter.submit(request(run_id="run_RETRY1"))
    assert again.vendor_run_id == first.vendor_run_id
    other = await adapter.submit(request(run_id="run_RETRY2"))
    assert other.vendor_run_id != first.vendor_run_id


async def test_partial_success_is_success_with_its_warnings(adapter: TextractAdapter) -> None:
    doc = Document(content=THREE_PAGES, filename="partial-scan.pdf", media_type="application/pdf")
    submitted = await adapter.submit(request(doc, run_id="run_PARTIAL1", operation="text", options={}))
    polled = await until_terminal(adapter, submitted)
    assert (polled.status, polled.vendor_status) == (base.SUCCEEDED, "PARTIAL_SUCCESS")
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    assert result["JobStatus"] == "PARTIAL_SUCCESS"
    assert result["Warnings"] == [{"ErrorCode": "PAGE_PROCESSING_FAILED", "Pages": [3]}]
    assert {b["Page"] for b in result["Blocks"]} == {1, 2}


async def test_a_failed_job_carries_its_status_message(adapter: TextractAdapter) -> None:
    doc = Document(content=THREE_PAGES, filename="fail.pdf", media_type="application/pdf")
    submitted = await adapter.submit(request(doc, run_id="run_FAIL1", operation="expense", options={}))
    polled = await until_terminal(adapter, submitted)
    assert (polled.status, polled.vendor_status) == (base.FAILED, "FAILED")
    assert polled.error and "unreadable" in polled.error


@pytest.mark.parametrize(
    ("knob", "status", "type_"),
    [
        ("textract_rate_throughput", 400, "ProvisionedThroughputExceededException"),
        ("textract_rate_throttling", 500, "ThrottlingException"),
    ],
)
async def test_throttling_slows_never_fails(
    adapter: TextractAdapter, simulator: str, knob: str, status: int, type_: str
) -> None:
    submitted = await adapter.submit(request(run_id="run_THROTTLE1"))
    await sim_patch(simulator, **{knob: 1.0})
    for call in (
        adapter.submit(request(run_id="run_THROTTLE2")),
        adapter.poll(submitted.vendor_run_id, submitted.state),
        adapter.fetch_result(submitted.vendor_run_id, submitted.state),
    ):
        with pytest.raises(VendorRateLimited) as raised:
            await call
        assert raised.value.status_code == status and type_ in raised.value.message
    await sim_patch(simulator, **{knob: 0.0})
    assert (await until_terminal(adapter, submitted)).status == base.SUCCEEDED


async def test_the_concurrent_job_cap_slows_never_fails(adapter: TextractAdapter, simulator: str) -> None:
    await sim_patch(simulator, textract_max_concurrent_jobs=1, duration_s=[30, 30])
    await adapter.submit(request(run_id="run_CAP1"))
    with pytest.raises(VendorRateLimited) as raised:
        await adapter.submit(request(run_id="run_CAP2"))
    assert raised.value.status_code == 400 and "LimitExceededException" in raised.value.message


async def test_an_expired_job_is_vendor_expired(adapter: TextractAdapter, simulator: str) -> None:
    submitted = await adapter.submit(request(run_id="run_EXPIRE1"))
    await sim_patch(simulator, textract_job_lifetime_s=0.001)
    with pytest.raises(VendorExpired):
        await adapter.poll(submitted.vendor_run_id, submitted.state)


async def test_s3_url_is_passed_as_is_and_never_deleted(adapter: TextractAdapter, simulator: str) -> None:
    staged = await adapter.submit(request(run_id="run_OWNER1"))
    assert await s3_status(simulator, "runs/run_OWNER1/invoice.pdf") == 200
    doc = Document(url=f"s3://{BUCKET}/runs/run_OWNER1/invoice.pdf", filename="x.pdf")
    submitted = await adapter.submit(request(doc, run_id="run_S3URL1"))
    assert submitted.state == {"operation": "analyze"}  # nothing staged
    assert (await until_terminal(adapter, submitted)).status == base.SUCCEEDED
    with pytest.raises(VendorRejected, match="nothing was staged; Textract keeps its own copy"):
        await adapter.delete(submitted.vendor_run_id, submitted.state)
    assert await s3_status(simulator, "runs/run_OWNER1/invoice.pdf") == 200
    # The staged one is deleted; Textract's own copy is not, and the adapter says so.
    with pytest.raises(VendorRejected, match="staged document was deleted; Textract keeps its own copy"):
        await adapter.delete(staged.vendor_run_id, staged.state)
    assert await s3_status(simulator, "runs/run_OWNER1/invoice.pdf") == 404


async def test_the_service_model_refuses_before_staging(adapter: TextractAdapter, simulator: str) -> None:
    with pytest.raises(VendorRejected, match="FeatureTypes"):
        await adapter.submit(request(run_id="run_NOFEATURE", options={}))
    assert await s3_status(simulator, "runs/run_NOFEATURE/invoice.pdf") == 404


async def test_a_wrong_secret_is_refused_by_the_signature_check(simulator: str) -> None:
    await make_bucket(simulator)
    doc = Document(url=f"s3://{BUCKET}/anything.pdf")
    async with textract_client(simulator, credentials("not-the-secret")) as client:
        wrong = TextractAdapter(client, region=REGION)
        with pytest.raises(VendorRejected, match=r"InvalidSignatureException.*does not match"):
            await wrong.submit(request(doc, run_id="run_BADSIG"))
    async with textract_client(simulator, region="eu-west-1") as client:
        other_region = TextractAdapter(client, region="eu-west-1")
        with pytest.raises(VendorRejected, match=r"InvalidSignatureException.*region"):
            await other_region.submit(request(doc, run_id="run_REGION"))


async def test_credentials_come_from_the_environment_chain(
    monkeypatch: pytest.MonkeyPatch, adapter: TextractAdapter
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    frozen = await aws.AwsCredentials().frozen()
    assert (frozen.access_key, frozen.secret_key) == (KEY_ID, SECRET)


def test_region_falls_back_to_aws_region_then_default() -> None:
    assert aws.region_of("eu-west-3", {"AWS_REGION": "x", "AWS_DEFAULT_REGION": "y"}) == "eu-west-3"
    assert aws.region_of("", {"AWS_REGION": "x", "AWS_DEFAULT_REGION": "y"}) == "x"
    assert aws.region_of("", {"AWS_DEFAULT_REGION": "y"}) == "y"
    assert aws.region_of("", {}) == ""


class SettledBudget:
    """A budget that records what the vendor client tells it after each request (``http.Budget``)."""

    def __init__(self) -> None:
        self.settled: list[int | None] = []

    async def acquire(self, ticket: object | None = None) -> None:
        return None

    async def settle(self, ticket: object | None, status: int | None, retry_after: float | None) -> None:
        self.settled.append(status)


@pytest.mark.parametrize(
    ("knob", "status"), [("textract_rate_throughput", 400), ("textract_rate_throttling", 500)]
)
async def test_throttling_pauses_the_vendor_as_a_429_does(simulator: str, knob: str, status: int) -> None:
    """Textract never answers 429 (§2.7): its 400 and 500 throttling answers reach the vendor's budget as a
    429 (``SPEC.throttled``), so the pause holds every worker back, not only the run that met it; any
    other error answer is told as it is."""
    await make_bucket(simulator)
    budget = SettledBudget()
    auth = aws.SigV4(credentials(), "textract", REGION)
    client = make_client(
        simulator + "/textract",
        {},
        timeout_s=5,
        vendor="textract",
        budget=budget,
        auth=auth,
        throttled=textract.SPEC.throttled,
    )
    async with client:
        adapter = TextractAdapter(
            client,
            region=REGION,
            bucket=BUCKET,
            prefix=PREFIX,
            s3_endpoint_url=simulator + "/s3",
            throttle_pause_s=0.01,
        )
        submitted = await adapter.submit(request(run_id="run_THROTTLE3"))
        assert budget.settled == [200]
        await sim_patch(simulator, **{knob: 1.0})
        with pytest.raises(VendorRateLimited) as raised:
            await adapter.poll(submitted.vendor_run_id, submitted.state)
        assert raised.value.status_code == status  # the adapter still sees the vendor's own answer
        assert budget.settled[-1] == 429
        await sim_patch(simulator, **{knob: 0.0})
        with pytest.raises((VendorExpired, VendorRejected)):
            await adapter.poll("0" * 64, submitted.state)  # an unknown JobId: a 400 that is no throttle
        assert budget.settled[-1] == 400
