"""The Document AI adapter against the simulated Document AI, its OAuth token endpoint and its GCS
(gcp-storage-emulator) on a real port (next-vendors.md §3): a throwaway service-account key whose
``token_uri`` is the simulator's, google-auth minting the tokens."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.vendors import base, gcp
from service.vendors.base import Document, PollResult, SubmitRequest, VendorExpired, VendorRejected
from service.vendors.google_docai import GoogleDocaiAdapter, shard_order
from service.vendors.http import make_client
from tests.conftest import eventually

BUCKET, PREFIX = "hookbridge-docai", "runs/"
PDF = b"%PDF-1.7\n1 0 obj <</Type /Page>> 2 0 obj <</Type /Page>>\n"
TERMINAL = (base.SUCCEEDED, base.FAILED, base.CANCELED)


async def sim_patch(simulator: str, **knobs: Any) -> None:
    async with httpx.AsyncClient() as client:
        (await client.patch(f"{simulator}/_sim/config", json=knobs)).raise_for_status()


async def gcs(simulator: str, method: str, path: str, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=simulator + "/gcs") as client:
        return await client.request(method, path, **kw)


async def put_object(simulator: str, name: str, content: bytes, bucket: str = BUCKET) -> None:
    response = await gcs(
        simulator,
        "POST",
        f"/upload/storage/v1/b/{bucket}/o",
        params={"uploadType": "media", "name": name},
        content=content,
        headers={"Content-Type": "application/pdf"},
    )
    assert response.status_code == 200, response.text


async def names(simulator: str, prefix: str = "") -> list[str]:
    response = await gcs(simulator, "GET", f"/storage/v1/b/{BUCKET}/o", params={"prefix": prefix})
    return [item["name"] for item in response.json().get("items", [])]


@pytest.fixture
async def key_file(simulator: str, tmp_path: Path) -> str:
    async with httpx.AsyncClient() as client:
        info = (await client.post(f"{simulator}/_sim/google/service-account")).raise_for_status().json()
        created = await client.post(
            f"{simulator}/gcs/storage/v1/b", params={"project": "sim-project"}, json={"name": BUCKET}
        )
        assert created.status_code in (200, 409), created.text
    path = tmp_path / "sa.json"
    path.write_text(json.dumps(info))
    return str(path)


def docai_client(simulator: str, key_file: str) -> httpx.AsyncClient:
    """The vendor client as the worker builds it: google-auth's tokens on every request (``SPEC.auth``)."""
    auth = gcp.GoogleAuth(gcp.GoogleTokens(key_file))
    return make_client(
        simulator + "/google_docai", {}, timeout_s=5, vendor="google_docai", budget=None, auth=auth
    )


def make_adapter(client: httpx.AsyncClient, simulator: str) -> GoogleDocaiAdapter:
    return GoogleDocaiAdapter(
        client,
        project="sim-project",
        location="us",
        processor="proc1",
        bucket=BUCKET,
        prefix=PREFIX,
        gcs_base_url=simulator + "/gcs",
    )


@pytest.fixture
async def adapter(simulator: str, key_file: str) -> AsyncIterator[GoogleDocaiAdapter]:
    async with docai_client(simulator, key_file) as client:
        yield make_adapter(client, simulator)


def request(document: Document | None = None, *, run_id: str = "run_DOCAI1", **options: Any) -> SubmitRequest:
    return SubmitRequest(
        run_id=run_id,
        operation="process",
        document=document or Document(content=PDF, filename="invoice.pdf", media_type="application/pdf"),
        options=options,
        zero_retention=True,
    )


async def until_terminal(adapter: GoogleDocaiAdapter, submitted: base.Submitted) -> list[PollResult]:
    seen: list[PollResult] = []

    async def check() -> bool:
        seen.append(await adapter.poll(submitted.vendor_run_id, submitted.state))
        return seen[-1].status in TERMINAL

    await eventually(check, what="a terminal Document AI status")
    return seen


async def test_process_reads_the_shards_back_and_cleans_up(
    adapter: GoogleDocaiAdapter, simulator: str
) -> None:
    submitted = await adapter.submit(request())
    # The operation's name uses the project number (§3.3).
    assert submitted.vendor_run_id.startswith("projects/123456789012/locations/us/operations/")
    assert submitted.state == {
        "output": f"gs://{BUCKET}/runs/run_DOCAI1/output/",
        "staged": f"gs://{BUCKET}/runs/run_DOCAI1/invoice.pdf",
    }
    seen = await until_terminal(adapter, submitted)
    assert seen[-1].status == base.SUCCEEDED and seen[-1].needs_fetch
    # Document AI wrote one shard; more are written beside it here to check the order (doc-2 before
    # doc-10): the simulator writes a single shard unless asked for pages per shard.
    destination = (await names(simulator, "runs/run_DOCAI1/output/"))[0].rsplit("/", 1)[0]
    for index in range(1, 12):
        shard = {"shardInfo": {"shardIndex": str(index), "shardCount": "12"}, "text": f"shard {index}"}
        await put_object(simulator, f"{destination}/invoice-{index}.json", json.dumps(shard).encode())
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    [document] = result["documents"]
    assert document["input"] == f"gs://{BUCKET}/runs/run_DOCAI1/invoice.pdf"
    assert document["status"] == {}
    assert [int(s["shardInfo"]["shardIndex"]) for s in document["shards"]] == list(range(12))
    assert document["shards"][0]["text"].startswith("Invoice")
    # Zero retention: the staged document and every output object go.
    assert len(await names(simulator, "runs/run_DOCAI1/")) == 13
    await adapter.delete(submitted.vendor_run_id, submitted.state)
    assert await names(simulator, "runs/run_DOCAI1/") == []


async def test_some_documents_failed_is_success_with_each_status(
    adapter: GoogleDocaiAdapter, simulator: str
) -> None:
    await put_object(simulator, "in/a.pdf", PDF)
    await put_object(simulator, "in/fail-scan.pdf", PDF)
    submitted = await adapter.submit(request(Document(url=f"gs://{BUCKET}/in/"), run_id="run_PREFIX1"))
    assert "staged" not in submitted.state  # a gs:// URL is passed as it is
    assert (await until_terminal(adapter, submitted))[-1].status == base.SUCCEEDED
    result = await adapter.fetch_result(submitted.vendor_run_id, submitted.state)
    by_input = {d["input"]: d for d in result["documents"]}
    good, bad = by_input[f"gs://{BUCKET}/in/a.pdf"], by_input[f"gs://{BUCKET}/in/fail-scan.pdf"]
    assert good["status"] == {} and len(good["shards"]) == 1
    assert bad["status"]["code"] == 3 and bad["shards"] == []
    await adapter.delete(submitted.vendor_run_id, submitted.state)
    assert sorted(await names(simulator, "in/")) == ["in/a.pdf", "in/fail-scan.pdf"]  # the caller's own


async def test_every_document_failed_is_a_failure(adapter: GoogleDocaiAdapter) -> None:
    doc = Document(content=PDF, filename="fail.pdf", media_type="application/pdf")
    submitted = await adapter.submit(request(doc, run_id="run_ALLFAIL"))
    last = (await until_terminal(adapter, submitted))[-1]
    assert last.status == base.FAILED and last.error


async def test_cancel(adapter: GoogleDocaiAdapter, simulator: str) -> None:
    await sim_patch(simulator, duration_s=[30, 30])
    submitted = await adapter.submit(request(run_id="run_CANCEL1"))
    assert (await adapter.poll(submitted.vendor_run_id, submitted.state)).status in (
        base.QUEUED,
        base.RUNNING,
    )
    await adapter.cancel(submitted.vendor_run_id, submitted.state)
    seen = await until_terminal(adapter, submitted)
    assert [p.vendor_status for p in seen][-2:] == ["CANCELLING", "CANCELLED"]
    assert seen[-1].status == base.CANCELED


async def test_over_the_batch_quota_is_rate_limited(adapter: GoogleDocaiAdapter, simulator: str) -> None:
    await sim_patch(simulator, duration_s=[30, 30], google_docai_max_concurrent=1)
    await adapter.submit(request(run_id="run_QUOTA1"))
    with pytest.raises(base.VendorRateLimited) as raised:
        await adapter.submit(request(run_id="run_QUOTA2"))
    assert raised.value.status_code == 429 and "Concurrent batch" in raised.value.message


async def test_a_forgotten_operation_is_expired(adapter: GoogleDocaiAdapter, simulator: str) -> None:
    submitted = await adapter.submit(request(run_id="run_GONE1"))
    await until_terminal(adapter, submitted)
    await sim_patch(simulator, google_docai_retention_s=0.001)
    with pytest.raises(VendorExpired):
        await adapter.poll(submitted.vendor_run_id, submitted.state)


async def test_an_untrusted_key_is_refused(simulator: str, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode()
    )
    info = {
        "type": "service_account",
        "project_id": "sim-project",
        "private_key_id": "0" * 40,
        "private_key": pem,
        "client_email": "stranger@sim-project.iam.gserviceaccount.com",
        "token_uri": f"{simulator}/token",
    }
    path = tmp_path / "stranger.json"
    path.write_text(json.dumps(info))
    async with docai_client(simulator, str(path)) as client:
        adapter = make_adapter(client, simulator)
        with pytest.raises(VendorRejected, match="refused the credentials"):
            await adapter.submit(request(Document(url=f"gs://{BUCKET}/x.pdf"), run_id="run_STRANGER"))


def test_shard_order_is_natural() -> None:
    assert sorted(["d-10.json", "d-2.json", "d-0.json"], key=shard_order) == [
        "d-0.json",
        "d-2.json",
        "d-10.json",
    ]
