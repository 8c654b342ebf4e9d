"""The simulated Uptiq DocAI async extraction against uptiq-async-extraction-and-polling.md (NOTES.md §3)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.core.clock import ManualClock
from service.simulator import SimulatorConfig, create_app

AUTH = {"X-Api-Key": "sim-uptiq-key"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def client(clock: ManualClock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SimulatorConfig(duration_s=(10.0, 10.0)), clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
        yield c


async def submit(client: httpx.AsyncClient, **body: Any) -> str:
    response = await client.post(
        "/uptiq/extract", headers=AUTH, json={"documentType": "BalanceSheet", **body}
    )
    assert response.status_code == 200, response.text
    extraction_id = response.json()["data"]["_id"]
    assert isinstance(extraction_id, str)
    return extraction_id


async def poll(client: httpx.AsyncClient, extraction_id: str) -> httpx.Response:
    return await client.get(f"/uptiq/document-extractions/{extraction_id}", headers=AUTH)


async def extraction(client: httpx.AsyncClient, extraction_id: str) -> dict[str, Any]:
    response = await poll(client, extraction_id)
    assert response.status_code == 200, response.text
    body = response.json()
    # The envelope status never reflects the job (S004).
    assert body["status"] == "success"
    record: dict[str, Any] = body["extraction"]
    return record


async def test_single_document_type_is_200_with_data_envelope(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/uptiq/extract", headers=AUTH, json={"documentType": "BalanceSheet", "fileUrl": "https://x/a.pdf"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "success"
    assert body["message"] == "Document queued for extraction"
    data = body["data"]
    assert data["documentStatus"] == "Pending"
    assert data["documentType"] == "BalanceSheet"
    assert data["subtype"] is None
    assert data["_id"] and data["requestId"]


async def test_multiple_document_types_is_202(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/uptiq/extract",
        headers=AUTH,
        json={"documentTypes": ["BalanceSheet", "W2"], "fileUrl": "https://x/a"},
    )
    assert response.status_code == 202
    assert response.json()["data"]["documentStatus"] == "Pending"


async def test_first_poll_is_404_then_pending_processing_processed(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    extraction_id = await submit(
        client, fileBase64=base64.b64encode(b"%PDF balance").decode(), fileName="b.pdf"
    )
    early = await poll(client, extraction_id)
    assert early.status_code == 404

    clock.advance(1.0)  # the default window: "wait a second and retry" (S004)
    pending = await extraction(client, extraction_id)
    assert pending["status"] == "Pending"
    assert pending["_id"] == extraction_id
    assert set(pending["processingStage"]) == {"stage", "message", "updatedAt"}

    clock.advance(4.0)
    processing = await extraction(client, extraction_id)
    assert processing["status"] == "Processing"
    assert processing["processingStage"]["message"]

    clock.advance(10.0)
    processed = await extraction(client, extraction_id)
    assert processed["status"] == "Processed"
    assert processed["documentType"] == "BalanceSheet"
    assert processed["processingStage"]["stage"] == "completed"
    result = processed["result"]
    assert result["extractedData"]["invoice_number"].startswith("INV-")
    assert 0 < result["extractionMetrics"]["accuracyScore"] <= 1


async def test_the_early_404_lasts_a_window_of_time_not_a_number_of_polls(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    await client.patch("/_sim/config", json={"uptiq_early_404_s": 3})
    extraction_id = await submit(client, fileUrl="https://x/a.pdf")
    # However often it is polled inside the window, the record stays invisible.
    assert {(await poll(client, extraction_id)).status_code for _ in range(20)} == {404}
    clock.advance(2.9)
    assert (await poll(client, extraction_id)).status_code == 404
    clock.advance(0.1)
    assert (await poll(client, extraction_id)).status_code == 200
    # A record first polled late is visible at once: the window runs from the submit, not the first poll.
    late = await submit(client, fileUrl="https://x/b.pdf")
    clock.advance(3.0)
    assert (await poll(client, late)).status_code == 200
    await client.patch("/_sim/config", json={"uptiq_early_404_s": 0})
    assert (await poll(client, await submit(client, fileUrl="https://x/c.pdf"))).status_code == 200


async def test_failed_extraction_carries_document_quality(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    content = base64.b64encode(b"a scan that will fail").decode()
    extraction_id = await submit(client, fileBase64=content, fileName="scan.png")
    clock.advance(20.0)
    failed = await extraction(client, extraction_id)
    assert failed["status"] == "Failed"
    assert failed["result"]["documentQuality"] == {"score": 0.12, "issues": ["blurry"]}
    assert failed["processingStage"]["message"] == "simulated failure: unreadable document"


async def test_stuck_switch_keeps_extractions_processing(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    await client.patch("/_sim/config", json={"uptiq_stuck": True})
    stuck_id = await submit(client, fileUrl="https://x/a.pdf")
    await client.patch("/_sim/config", json={"uptiq_stuck": False})
    by_name_id = await submit(client, fileUrl="https://x/stuck.pdf")
    normal_id = await submit(client, fileUrl="https://x/b.pdf")
    clock.advance(100_000.0)
    assert (await extraction(client, stuck_id))["status"] == "Processing"
    assert (await extraction(client, by_name_id))["status"] == "Processing"
    assert (await extraction(client, normal_id))["status"] == "Processed"


async def test_rejected_document_is_400_error_envelope(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/uptiq/extract", headers=AUTH, json={"documentType": "W2", "fileUrl": "https://x/reject.pdf"}
    )
    assert response.status_code == 400
    assert response.json()["status"] == "error"
    assert response.json()["message"]


@pytest.mark.parametrize(
    "body", [{}, {"documentType": ""}, {"documentTypes": []}, {"documentTypes": [1]}, ["BalanceSheet"]]
)
async def test_body_without_a_document_type_is_400(client: httpx.AsyncClient, body: Any) -> None:
    response = await client.post("/uptiq/extract", headers=AUTH, json=body)
    assert response.status_code == 400
    assert response.json()["status"] == "error"


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"fileName": "a.pdf"},
        {"fileUrl": ""},
        {"fileUrl": "ftp://x/a.pdf"},
        {"fileBase64": "not base64 at all"},
        {"fileBase64": ""},
        {"fileUrl": "https://x/a.pdf", "fileBase64": "JVBERg=="},
    ],
    ids=["none", "a-name-only", "empty-url", "not-http", "bad-base64", "empty-bytes", "both"],
)
async def test_a_submission_without_exactly_one_document_is_400(
    client: httpx.AsyncClient, document: dict[str, Any]
) -> None:
    response = await client.post("/uptiq/extract", headers=AUTH, json={"documentType": "W2", **document})
    assert response.status_code == 400
    assert response.json()["status"] == "error"
    assert (await client.get("/_sim/stats")).json()["uptiq"] == {}  # nothing was queued


async def test_other_fields_beside_the_document_are_accepted(client: httpx.AsyncClient) -> None:
    await submit(
        client, fileUrl="https://x/a.pdf", whatever={"nested": True}, model="gpt", enableCaching=True
    )


async def test_auth_and_unknown_extraction(client: httpx.AsyncClient) -> None:
    response = await client.post("/uptiq/extract", json={"documentType": "W2"})
    assert response.status_code == 401
    assert (await client.get("/uptiq/document-extractions/x", headers={"X-Api-Key": "no"})).status_code == 401
    assert (await poll(client, "nope")).status_code == 404


async def test_record_echoes_job_parameters(client: httpx.AsyncClient, clock: ManualClock) -> None:
    extraction_id = await submit(client, fileUrl="https://x/a.pdf", model="m1", processorId="p1")
    clock.advance(1.0)
    record = await extraction(client, extraction_id)
    assert record["model"] == "m1"
    assert record["processorId"] == "p1"


async def test_the_async_record_carries_credit_reservation_webhook_status_and_fraud_results(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    # S004: "plus creditReservation, webhookStatus and fraudResults". Their shapes are guesses.
    extraction_id = await submit(client, fileUrl="https://x/a.pdf")
    clock.advance(1.0)
    pending = await extraction(client, extraction_id)
    assert pending["creditReservation"]["status"] == "reserved"
    assert pending["fraudResults"] is None
    clock.advance(20.0)
    done = await extraction(client, extraction_id)
    assert done["creditReservation"]["status"] == "consumed"
    assert done["creditReservation"]["credits"] > 0
    assert done["webhookStatus"]
    assert 0 <= done["fraudResults"]["riskScore"] < 1
