"""Textract and Document AI end to end: API → Redis → worker → adapter (SigV4 / google-auth) → simulated
vendor and its storage (moto S3, gcp-storage-emulator) → signed callback; zero retention's clean-up of
the staged and output objects; ``s3://`` and ``gs://`` URLs taken by their vendors only."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.simulator import SimulatorConfig, cloud
from service.testing.proxy import FaultProxy
from service.vendors import aws
from tests.conftest import Receiver, Stack, StackFactory, eventually

BUCKET = cloud.BUCKET
PDF = b"%PDF-1.7\n1 0 obj <</Type /Page>> 2 0 obj <</Type /Page>> 3 0 obj <</Type /Page>>\n"


@pytest.fixture
def sim_config() -> SimulatorConfig:
    return SimulatorConfig(duration_s=(0.1, 0.3), seed=7, storage_buckets=BUCKET, textract_page_blocks=7)


CloudStackFactory = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def make_cloud_stack(
    make_stack: StackFactory, simulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> CloudStackFactory:
    """A stack whose Textract and Document AI are the simulator's, with its S3 and GCS; ``overrides``
    last (another base URL, a pause)."""

    async def make(**overrides: str) -> Stack:
        config = SimulatorConfig()
        env = cloud.environment(("textract", "google_docai"), cloud.Reach(config, simulator, tmp_path))
        # The simulator trusts keys it made: the key file comes from it (its token_uri is its /token).
        async with httpx.AsyncClient() as client:
            info = (await client.post(f"{simulator}/_sim/google/service-account")).raise_for_status().json()
            (await client.get(f"{simulator}/_sim/storage")).raise_for_status()  # the buckets are made
        key = tmp_path / "sa.json"
        key.write_text(json.dumps(info))
        env["HOOKBRIDGE_GOOGLE_DOCAI_CREDENTIALS_FILE"] = str(key)
        # AWS's chain reads the process environment (service.dev.stack exports them the same way).
        for name in cloud.PROCESS_VARIABLES:
            monkeypatch.setenv(name, env.pop(name))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        settings = {k: v for k, v in env.items() if not k.startswith("HOOKBRIDGE_SIM_")}
        for vendor in ("TEXTRACT", "GOOGLE_DOCAI"):
            settings[f"HOOKBRIDGE_{vendor}_POLL_INITIAL_S"] = "50ms"
            settings[f"HOOKBRIDGE_{vendor}_POLL_MAX_S"] = "200ms"
        return await make_stack(**{**settings, **overrides})

    return make


@pytest.fixture
async def cloud_stack(make_cloud_stack: CloudStackFactory) -> Stack:
    return await make_cloud_stack()


async def submit(stack: Stack, vendor: str, document: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body = {"vendor": vendor, "document": document, **cloud.DEMO_RUNS[vendor], **fields}
    response = await stack.api.post("/v1/runs", json=body)
    assert response.status_code == 202, response.text
    return dict(response.json())


def pdf(filename: str = "invoice.pdf") -> dict[str, Any]:
    return {
        "content_base64": base64.b64encode(PDF).decode(),
        "filename": filename,
        "media_type": "application/pdf",
    }


async def s3_status(simulator: str, key: str) -> int:
    request = httpx.Request("GET", f"{simulator}/s3/{BUCKET}/{key}")
    frozen = aws.Frozen("AKIASIMULATOR0000001", "sim-textract-secret-access-key", None)
    aws.sign(request, frozen, "s3", "us-east-1")
    async with httpx.AsyncClient() as client:
        return (await client.send(request)).status_code


async def gcs_names(simulator: str, prefix: str) -> list[str]:
    async with httpx.AsyncClient() as client:
        listed = await client.get(f"{simulator}/gcs/storage/v1/b/{BUCKET}/o", params={"prefix": prefix})
    return [item["name"] for item in listed.json().get("items", [])]


async def delivered(receiver: Receiver, run_id: str, event_type: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        for r in receiver.received:
            event = r.json()
            if event["type"] == event_type and event["data"]["run"]["id"] == run_id:
                return dict(event)
        return None

    found: dict[str, Any] = await eventually(check, what=f"{event_type} of {run_id}")
    return found


async def test_textract_run_with_zero_retention(cloud_stack: Stack, receiver: Receiver) -> None:
    stack = cloud_stack
    await stack.subscribe(receiver.url)
    run = await submit(stack, "textract", pdf(), zero_retention=True)
    event = await delivered(receiver, run["id"], "run.succeeded")
    result = event["data"]["result"]
    # Three pages over 5 Get pages (7 Blocks a page), merged in order, DocumentMetadata once.
    assert result["DocumentMetadata"] == {"Pages": 3}
    assert [b["Page"] for b in result["Blocks"] if b["BlockType"] == "PAGE"] == [1, 2, 3]
    assert len(result["Blocks"]) == 30
    key = f"staged/{run['id']}/invoice.pdf"

    async def told() -> dict[str, Any] | None:
        got = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        return got if got.get("vendor_delete_error") else None  # vendor_deleted is false while pending

    final = await eventually(told, what="the vendor told")
    assert await s3_status(stack.simulator_url, key) == 404  # the staged document is gone
    # Textract's own copy cannot be deleted: the run says so.
    assert final["vendor_deleted"] is False
    assert "staged document was deleted" in final["vendor_delete_error"]
    assert "Textract keeps its own copy" in final["vendor_delete_error"]


async def test_textract_partial_success_is_succeeded_with_warnings(cloud_stack: Stack) -> None:
    run = await submit(cloud_stack, "textract", pdf("partial.pdf"), operation="text", options={})
    done = await cloud_stack.wait_status(run["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done
    result = (await cloud_stack.api.get(f"/v1/runs/{run['id']}/result")).json()
    assert result["JobStatus"] == "PARTIAL_SUCCESS"
    assert result["Warnings"] == [{"ErrorCode": "PAGE_PROCESSING_FAILED", "Pages": [3]}]


async def textract_answers(simulator: str) -> list[dict[str, Any]]:
    """Every request that reached the simulated Textract, in order, with its answer's status."""
    async with httpx.AsyncClient() as client:
        got = await client.get(f"{simulator}/_sim/requests", params={"vendor": "textract"})
    return list(got.raise_for_status().json()["data"])


async def sim_patch(simulator: str, **knobs: Any) -> None:
    async with httpx.AsyncClient() as client:
        (await client.patch(f"{simulator}/_sim/config", json=knobs)).raise_for_status()


@pytest.mark.parametrize(
    ("knob", "status"), [("textract_rate_throughput", 400), ("textract_rate_throttling", 500)]
)
async def test_textract_throttling_slows_the_run_and_never_fails_it(
    make_cloud_stack: CloudStackFactory, knob: str, status: int
) -> None:
    """§2.7: Textract throttles with 400 ProvisionedThroughputExceededException or 500 ThrottlingException,
    never 429. Through the worker: every answer throttled (more than the run's transient faults allowed in
    a row, 2 here) leaves the run waiting, not failed; then half of them throttled, the Start and the Gets
    alike (the simulator's seeded draw), and the run succeeds with its result."""
    stack = await make_cloud_stack(
        HOOKBRIDGE_TEXTRACT_PAUSE_MAX_S="1s", HOOKBRIDGE_VENDOR_MAX_TRANSIENT_FAILURES="2"
    )
    await sim_patch(stack.simulator_url, **{knob: 1.0})
    run = await submit(stack, "textract", pdf())

    async def throttled_thrice() -> bool:
        return len([a for a in await textract_answers(stack.simulator_url) if a["status"] == status]) >= 3

    await eventually(throttled_thrice, what=f"three {status} answers to the Start")
    waiting = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert waiting["status"] == "queued" and waiting["error"] is None, waiting
    await sim_patch(stack.simulator_url, **{knob: 0.5})
    done = await stack.wait_status(run["id"], "succeeded", "failed", timeout=60)
    assert done["status"] == "succeeded" and done["error"] is None, done
    result = (await stack.api.get(f"/v1/runs/{run['id']}/result")).json()
    assert result["DocumentMetadata"] == {"Pages": 3}
    statuses = [a["status"] for a in await textract_answers(stack.simulator_url)]
    accepted = statuses.index(200)  # the Start that went through; every request after it is a Get
    assert status in statuses[accepted + 1 :], statuses  # a Get throttled too
    assert set(statuses) == {200, status}, statuses


async def test_textract_a_lost_start_answer_is_sent_again_and_names_the_same_job(
    make_cloud_stack: CloudStackFactory, simulator: str, servers: Servers
) -> None:
    """§2.6 "same token + same Start operation + same input → same JobId": the Start reaches Textract and
    its answer is lost on the way back (the proxy forwards it, then closes the connection). Textract is
    idempotent by ClientRequestToken (the run id), so the worker sends the Start again, gets the job the
    first one made, and the run succeeds on it: one Textract job for two Starts."""
    proxy = FaultProxy(simulator)
    proxy_url = await servers.start(proxy, free_port())
    proxy.faults = ["lost"]
    stack = await make_cloud_stack(HOOKBRIDGE_TEXTRACT_BASE_URL=proxy_url + "/textract")
    run = await submit(stack, "textract", pdf())
    done = await stack.wait_status(run["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done
    first, again = proxy.log[:2]  # both Starts (the staging goes to S3, not through the proxy)
    assert (first.fault, first.status) == ("lost", 200)  # Textract made the job; the worker never heard
    assert (again.fault, again.status) == (None, 200)
    async with httpx.AsyncClient(base_url=stack.simulator_url) as client:
        jobs = (await client.get("/_sim/runs", params={"vendor": "textract"})).json()["data"]
    assert [job["id"] for job in jobs] == [done["vendor_run_id"]]


async def test_google_docai_run_with_zero_retention(cloud_stack: Stack, receiver: Receiver) -> None:
    stack = cloud_stack
    await stack.subscribe(receiver.url)
    run = await submit(stack, "google_docai", pdf(), zero_retention=True)
    event = await delivered(receiver, run["id"], "run.succeeded")
    [document] = event["data"]["result"]["documents"]
    assert document["input"] == f"gs://{BUCKET}/docai/{run['id']}/invoice.pdf"
    assert document["status"] == {} and document["shards"][0]["text"].startswith("Invoice")

    async def cleaned() -> bool:
        got = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        return got.get("vendor_deleted") is True and not await gcs_names(stack.simulator_url, "docai/")

    await eventually(cleaned, what="the staged document and the output deleted")


async def test_google_docai_all_documents_failed_is_vendor_failed(cloud_stack: Stack) -> None:
    run = await submit(cloud_stack, "google_docai", pdf("fail.pdf"))
    done = await cloud_stack.wait_status(run["id"], "succeeded", "failed")
    assert done["status"] == "failed" and done["error"]["code"] == "vendor_failed", done


async def test_google_docai_a_failed_document_among_others_is_reported_per_document(
    cloud_stack: Stack, receiver: Receiver
) -> None:
    """§3.8 "Success is not success": a batch over a ``gs://`` prefix where one document fails is a
    succeeded run whose callback gives each document's own status (the failed one's code, no shards);
    zero retention deletes the output and leaves the caller's own input objects alone."""
    stack = cloud_stack
    await stack.subscribe(receiver.url)
    async with httpx.AsyncClient(base_url=f"{stack.simulator_url}/gcs") as client:
        for name in ("in/a.pdf", "in/fail-scan.pdf"):
            put = await client.post(
                f"/upload/storage/v1/b/{BUCKET}/o",
                params={"uploadType": "media", "name": name},
                content=PDF,
                headers={"Content-Type": "application/pdf"},
            )
            assert put.status_code == 200, put.text
    run = await submit(stack, "google_docai", {"url": f"gs://{BUCKET}/in/"}, zero_retention=True)
    event = await delivered(receiver, run["id"], "run.succeeded")
    by_input = {d["input"]: d for d in event["data"]["result"]["documents"]}
    good, bad = by_input[f"gs://{BUCKET}/in/a.pdf"], by_input[f"gs://{BUCKET}/in/fail-scan.pdf"]
    assert good["status"] == {} and good["shards"][0]["text"].startswith("Invoice")
    assert bad["status"]["code"] == 3 and bad["shards"] == [], bad

    async def cleaned() -> bool:
        got = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        return got.get("vendor_deleted") is True and not await gcs_names(stack.simulator_url, "docai/")

    await eventually(cleaned, what="the output deleted")
    assert sorted(await gcs_names(stack.simulator_url, "in/")) == ["in/a.pdf", "in/fail-scan.pdf"]


async def test_google_docai_cancel(cloud_stack: Stack) -> None:
    async with httpx.AsyncClient() as client:
        await client.patch(f"{cloud_stack.simulator_url}/_sim/config", json={"duration_s": [30, 30]})
    run = await submit(cloud_stack, "google_docai", pdf())
    await cloud_stack.wait_status(run["id"], "running", "queued")

    async def submitted() -> bool:
        got = (await cloud_stack.api.get(f"/v1/runs/{run['id']}")).json()
        return bool(got.get("vendor_run_id"))

    await eventually(submitted, what="the operation started")
    canceled = await cloud_stack.api.post(f"/v1/runs/{run['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"

    async def cancelled_at_google() -> bool:
        async with httpx.AsyncClient(base_url=cloud_stack.simulator_url) as client:
            runs = (await client.get("/_sim/runs", params={"vendor": "google_docai"})).json()["data"]
        return [r["status"] for r in runs] == ["CANCELLING"]  # the :cancel arrived; nobody polls since

    await eventually(cancelled_at_google, what="the operation cancelled at Document AI")


@pytest.mark.parametrize(
    ("vendor", "url", "accepted"),
    [
        ("textract", f"s3://{BUCKET}/in/invoice.pdf", True),
        ("google_docai", f"gs://{BUCKET}/in/invoice.pdf", True),
        ("textract", f"gs://{BUCKET}/in/invoice.pdf", False),
        ("google_docai", f"s3://{BUCKET}/in/invoice.pdf", False),
        ("nutrient", f"s3://{BUCKET}/in/invoice.pdf", False),
        ("uptiq", f"gs://{BUCKET}/in/invoice.pdf", False),
    ],
)
async def test_cloud_urls_only_for_their_vendor(
    cloud_stack: Stack, vendor: str, url: str, accepted: bool
) -> None:
    body = {"vendor": vendor, "document": {"url": url}, **cloud.DEMO_RUNS.get(vendor, {})}
    if vendor == "uptiq":
        body["options"] = {"documentType": "Invoice"}
    response = await cloud_stack.api.post("/v1/runs", json=body)
    if accepted:
        assert response.status_code == 202, response.text
    else:
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["pointer"] == "/document/url"
