"""The simulated Cloudsquid tables API against cloudsquid-*.md (NOTES.md §1)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.core.clock import ManualClock
from service.simulator import SimulatorConfig, create_app

AUTH = {"X-API-Key": "sim-cloudsquid-key"}
TABLE = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
BASE = f"/cloudsquid/api/projects/my-project/tables/{TABLE}"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def client(clock: ManualClock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SimulatorConfig(duration_s=(10.0, 10.0)), clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
        yield c


def upload_body(
    content: bytes = b"%PDF-1.7 invoice", filename: str = "invoice.pdf", **over: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "file": base64.b64encode(content).decode(),
        "filename": filename,
        "mimetype": "application/pdf",
        "file_type": "binary",
    }
    body.update(over)
    return body


async def start(client: httpx.AsyncClient, body: dict[str, Any] | None = None) -> str:
    uploaded = await client.post(f"{BASE}/files", headers=AUTH, json=body or upload_body())
    assert uploaded.status_code == 201, uploaded.text
    run = await client.post(f"{BASE}/run", headers=AUTH, json={"row_id": uploaded.json()["row_id"]})
    assert run.status_code == 202, run.text
    run_id = run.json()["run_id"]
    assert isinstance(run_id, str)
    return run_id


async def poll(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    response = await client.get(f"{BASE}/run/{run_id}", headers=AUTH)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_upload_run_poll_pending_running_done(client: httpx.AsyncClient, clock: ManualClock) -> None:
    content = b"%PDF-1.7 a real invoice"
    uploaded = await client.post(f"{BASE}/files", headers=AUTH, json=upload_body(content))
    assert uploaded.status_code == 201
    row_id = uploaded.json()["row_id"]
    run = await client.post(f"{BASE}/run", headers=AUTH, json={"row_id": row_id, "zero_retention": True})
    assert run.status_code == 202
    assert set(run.json()) == {"run_id"}
    run_id = run.json()["run_id"]

    pending = await poll(client, run_id)
    assert pending["status"] == "pending"
    assert pending["data"] == {}
    assert pending["row_id"] == row_id
    assert pending["created_at"].endswith("Z")
    assert pending["input"]["files"][0]["id"]

    clock.advance(5.0)
    running = await poll(client, run_id)
    assert running["status"] == "running"
    assert running["data"] == {}

    clock.advance(10.0)
    done = await poll(client, run_id)
    assert done["status"] == "done"
    data = done["data"]
    assert data["sha256"] == hashlib.sha256(content).hexdigest()
    assert all(isinstance(v, str | int | float | bool) for v in data.values())
    assert done["reasoning"]
    assert "errorMessage" not in done


async def test_failing_document_ends_in_error_with_reason(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    run_id = await start(client, upload_body(filename="fail.pdf"))
    clock.advance(20.0)
    row = await poll(client, run_id)
    assert row["status"] == "error"
    assert row["data"] == {}
    assert row["reasoning"] == row["errorMessage"] == "simulated failure: unreadable document"


async def test_stuck_document_never_finishes(client: httpx.AsyncClient, clock: ManualClock) -> None:
    run_id = await start(client, upload_body(b"stuck forever"))
    clock.advance(100_000.0)
    assert (await poll(client, run_id))["status"] == "running"


async def test_billing_marker_has_no_meaning_here(client: httpx.AsyncClient, clock: ManualClock) -> None:
    run_id = await start(client, upload_body(filename="billing.pdf"))
    clock.advance(20.0)
    assert (await poll(client, run_id))["status"] == "done"


async def test_legacy_shape_has_status_and_result_and_no_pending(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    await client.patch("/_sim/config", json={"cloudsquid_legacy_shape": True})
    run_id = await start(client)
    assert await poll(client, run_id) == {"status": "running", "result": {}}
    clock.advance(20.0)
    done = await poll(client, run_id)
    assert set(done) == {"status", "result"}
    assert done["status"] == "done"
    assert done["result"]["invoice_number"].startswith("INV-")

    failing = await start(client, upload_body(filename="fail.pdf"))
    clock.advance(20.0)
    failed = await poll(client, failing)
    assert failed["status"] == "error"
    assert failed["errorMessage"]


async def test_uri_and_multipart_files_are_accepted(client: httpx.AsyncClient) -> None:
    uri = upload_body(file="https://bucket.example/signed?sig=1", file_type="uri")
    assert (await client.post(f"{BASE}/files", headers=AUTH, json=uri)).status_code == 201
    multipart = upload_body(file=[{"body": "hello"}], file_type="multipart", mimetype="message/rfc822")
    assert (await client.post(f"{BASE}/files", headers=AUTH, json=multipart)).status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        upload_body(mimetype="application/zip"),
        upload_body(file_type="stream"),
        upload_body(file="not base64!!"),
        upload_body(file=""),
        upload_body(filename=""),
        {"filename": "a.pdf", "mimetype": "application/pdf", "file_type": "binary"},
        upload_body(file=123, file_type="uri"),
        upload_body(file="x", file_type="multipart"),
    ],
    ids=[
        "mimetype",
        "file_type",
        "base64",
        "empty-file",
        "filename",
        "no-file",
        "uri-not-str",
        "parts-not-list",
    ],
)
async def test_upload_validation_is_400_error_message(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    response = await client.post(f"{BASE}/files", headers=AUTH, json=body)
    assert response.status_code == 400
    assert set(response.json()) == {"errorMessage"}


async def test_bad_table_id_and_bad_json_are_400(client: httpx.AsyncClient) -> None:
    bad_table = "/cloudsquid/api/projects/p/tables/not-a-uuid/files"
    assert (await client.post(bad_table, headers=AUTH, json=upload_body())).status_code == 400
    raw = await client.post(
        f"{BASE}/files", headers={**AUTH, "content-type": "application/json"}, content=b"{"
    )
    assert raw.status_code == 400
    assert (await client.get(f"{BASE}/run/not-a-uuid", headers=AUTH)).status_code == 400


async def test_rejected_document_is_refused_at_upload(client: httpx.AsyncClient) -> None:
    response = await client.post(f"{BASE}/files", headers=AUTH, json=upload_body(filename="REJECT.pdf"))
    assert response.status_code == 400
    assert response.json()["errorMessage"]


async def test_unknown_row_is_400_and_unknown_run_is_404(client: httpx.AsyncClient) -> None:
    unknown_row = await client.post(f"{BASE}/run", headers=AUTH, json={"row_id": TABLE})
    assert unknown_row.status_code == 400
    assert unknown_row.json()["errorMessage"]
    assert (await client.post(f"{BASE}/run", headers=AUTH, json={})).status_code == 400
    unknown_run = await client.get(f"{BASE}/run/{TABLE}", headers=AUTH)
    assert unknown_run.status_code == 404


async def test_rows_belong_to_their_table(client: httpx.AsyncClient) -> None:
    uploaded = await client.post(f"{BASE}/files", headers=AUTH, json=upload_body())
    other = "/cloudsquid/api/projects/my-project/tables/00000000-0000-4000-8000-000000000000"
    response = await client.post(f"{other}/run", headers=AUTH, json={"row_id": uploaded.json()["row_id"]})
    assert response.status_code == 400


async def test_auth_is_401_error_message(client: httpx.AsyncClient) -> None:
    for headers in ({}, {"X-API-Key": "wrong"}):
        response = await client.post(f"{BASE}/files", headers=headers, json=upload_body())
        assert response.status_code == 401
        assert set(response.json()) == {"errorMessage"}


async def test_sync_extract_returns_the_finished_data_row() -> None:
    app = create_app(SimulatorConfig(duration_s=(0.05, 0.1), cloudsquid_legacy_shape=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        response = await client.post(f"{BASE}/extract", headers=AUTH, json=upload_body())
        assert response.status_code == 200
        row = response.json()
        assert row["status"] == "done"
        assert row["data"]["invoice_number"].startswith("INV-")
        rejected = await client.post(f"{BASE}/extract", headers=AUTH, json=upload_body(filename="reject.pdf"))
        assert rejected.status_code == 400
