"""Contract tests of the Cloudsquid adapter against the simulator on a real port (NOTES.md §1)."""

from __future__ import annotations

import hashlib
import json
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
from service.vendors.cloudsquid import CloudsquidAdapter
from service.vendors.http import make_client
from tests.conftest import eventually

PROJECT = "test-project"
TABLE = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
KEY = "sim-cloudsquid-key"


@pytest.fixture
async def sim(simulator: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=simulator) as client:
        yield client


@pytest.fixture
async def adapter(simulator: str) -> AsyncIterator[CloudsquidAdapter]:
    client = make_client(
        simulator + "/cloudsquid/api", {"X-API-Key": KEY}, timeout_s=5, vendor="cloudsquid", budget=None
    )
    async with client:
        yield CloudsquidAdapter(client, project=PROJECT, table_id=TABLE)


def pdf(name: str = "invoice.pdf") -> Document:
    return Document(content=b"%PDF-1.4 " + name.encode(), filename=name, media_type="application/pdf")


class Checkpoints:
    def __init__(self) -> None:
        self.saved: list[dict[str, Any]] = []

    async def __call__(self, update: dict[str, Any]) -> None:
        self.saved.append(update)


def request(
    document: Document | None = None,
    *,
    options: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
    checkpoint: Checkpoints | None = None,
) -> SubmitRequest:
    return SubmitRequest(
        run_id="run_test",
        operation="extract",
        document=document or pdf(),
        options=options or {},
        zero_retention=False,
        state=state or {},
        checkpoint=checkpoint,
    )


async def until_terminal(adapter: CloudsquidAdapter, submitted: base.Submitted) -> list[PollResult]:
    seen: list[PollResult] = []

    async def check() -> bool:
        seen.append(await adapter.poll(submitted.vendor_run_id, submitted.state))
        return seen[-1].status in (base.SUCCEEDED, base.FAILED)

    await eventually(check, what="a terminal Cloudsquid status")
    return seen


async def vendor_requests(sim: httpx.AsyncClient) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = (await sim.get("/_sim/requests", params={"vendor": "cloudsquid"})).json()[
        "data"
    ]
    return entries


async def test_binary_upload_runs_to_done_with_the_data(adapter: CloudsquidAdapter) -> None:
    doc = pdf()
    checkpoints = Checkpoints()
    submitted = await adapter.submit(request(doc, checkpoint=checkpoints))
    assert submitted.state["project"] == PROJECT and submitted.state["table_id"] == TABLE
    assert checkpoints.saved[0] == {
        "row_id": submitted.state["row_id"],
        "project": PROJECT,
        "table_id": TABLE,
    }

    seen = await until_terminal(adapter, submitted)
    final = seen[-1]
    assert final.status == base.SUCCEEDED and final.vendor_status == "done" and not final.needs_fetch
    # The simulator derives the fields from the bytes it decoded: base64 of exactly our bytes went up.
    assert final.result["sha256"] == hashlib.sha256(doc.content or b"").hexdigest()
    assert final.result["invoice_number"].startswith("INV-")


async def test_a_url_document_is_uploaded_as_uri(adapter: CloudsquidAdapter, sim: httpx.AsyncClient) -> None:
    url = "https://files.example.com/signed/invoice.pdf?sig=abc"
    doc = Document(url=url, filename="invoice.pdf")  # no media type given: guessed from the name
    seen = await until_terminal(adapter, await adapter.submit(request(doc)))
    assert seen[-1].status == base.SUCCEEDED
    assert seen[-1].result["sha256"] == hashlib.sha256(url.encode()).hexdigest()


async def test_multipart_email_parts_go_as_the_file_array(adapter: CloudsquidAdapter) -> None:
    parts = [{"headers": {"Content-Type": "text/plain"}, "body": "see attached"}]
    doc = Document(content=b"From: a@b.test", filename="mail.eml", media_type="message/rfc822")
    submitted = await adapter.submit(request(doc, options={"file_type": "multipart", "parts": parts}))
    seen = await until_terminal(adapter, submitted)
    assert seen[-1].status == base.SUCCEEDED
    # The simulator uses the JSON of the parts array as the document's identity.
    expected = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    assert seen[-1].result["sha256"] == expected


async def test_multipart_without_parts_is_refused_before_calling(
    adapter: CloudsquidAdapter, sim: httpx.AsyncClient
) -> None:
    with pytest.raises(VendorRejected, match=r"options\.parts"):
        await adapter.submit(request(options={"file_type": "multipart"}))
    assert await vendor_requests(sim) == []


async def test_failure_carries_the_vendor_message(adapter: CloudsquidAdapter) -> None:
    seen = await until_terminal(adapter, await adapter.submit(request(pdf("fail-scan.pdf"))))
    final = seen[-1]
    assert final.status == base.FAILED and final.vendor_status == "error"
    assert final.error == "simulated failure: unreadable document"
    assert final.error_details is not None


async def test_data_is_filled_only_on_done(adapter: CloudsquidAdapter, sim: httpx.AsyncClient) -> None:
    # slow- makes the run take ten times longer, so the first polls see it pending or running.
    submitted = await adapter.submit(request(pdf("slow-invoice.pdf")))
    first = await adapter.poll(submitted.vendor_run_id, submitted.state)
    assert first.status == base.QUEUED and first.vendor_status == "pending" and first.result is None
    raw = await sim.get(
        f"/cloudsquid/api/projects/{PROJECT}/tables/{TABLE}/run/{submitted.vendor_run_id}",
        headers={"X-API-Key": KEY},
    )
    assert raw.json()["data"] == {}  # "required", but empty until done

    seen = await until_terminal(adapter, submitted)
    assert all(p.result is None for p in seen[:-1])
    assert {p.status for p in seen[:-1]} <= {base.QUEUED, base.RUNNING}
    assert seen[-1].result["invoice_number"].startswith("INV-")


async def test_the_older_status_result_shape_is_read(
    adapter: CloudsquidAdapter, sim: httpx.AsyncClient
) -> None:
    await sim.patch("/_sim/config", json={"cloudsquid_legacy_shape": True})
    submitted = await adapter.submit(request())
    seen = await until_terminal(adapter, submitted)
    assert seen[-1].status == base.SUCCEEDED and seen[-1].result["invoice_number"].startswith("INV-")
    raw = await sim.get(
        f"/cloudsquid/api/projects/{PROJECT}/tables/{TABLE}/run/{submitted.vendor_run_id}",
        headers={"X-API-Key": KEY},
    )
    assert "data" not in raw.json() and "result" in raw.json()

    failed = await until_terminal(adapter, await adapter.submit(request(pdf("fail.pdf"))))
    assert failed[-1].status == base.FAILED and "unreadable" in (failed[-1].error or "")


@pytest.mark.parametrize("body", [{"status": "reviewing", "data": {}}, {"data": {}}, {"status": None}])
async def test_an_unknown_or_missing_status_is_not_terminal(body: dict[str, Any]) -> None:
    """The simulator only produces documented statuses, so a MockTransport plays the vendor here. An
    unknown status is running; a missing one is a transient fault (bounded), never the status "None"."""

    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"row_id": "r", "created_at": "2026-01-01T00:00:00Z", **body})

    async with httpx.AsyncClient(base_url="http://cs.test/api", transport=httpx.MockTransport(vendor)) as c:
        adapter = CloudsquidAdapter(c)
        if isinstance(body.get("status"), str):
            result = await adapter.poll("run-1", {"project": "p", "table_id": "t"})
            assert result.status == base.RUNNING and result.result is None
        else:
            with pytest.raises(base.VendorTransient):
                await adapter.poll("run-1", {"project": "p", "table_id": "t"})


async def test_a_retried_submit_reuses_the_checkpointed_row(
    adapter: CloudsquidAdapter, sim: httpx.AsyncClient
) -> None:
    checkpoints = Checkpoints()
    first = await adapter.submit(request(checkpoint=checkpoints))
    row_state = checkpoints.saved[0]
    await sim.delete("/_sim/requests")

    # A worker died after the upload: the retry starts a run on the same row and uploads nothing.
    retried = await adapter.submit(request(state=row_state, checkpoint=Checkpoints()))
    paths = [(e["method"], e["path"]) for e in await vendor_requests(sim)]
    assert paths == [("POST", f"/cloudsquid/api/projects/{PROJECT}/tables/{TABLE}/run")]
    assert retried.state["row_id"] == first.state["row_id"]
    assert (await until_terminal(adapter, retried))[-1].status == base.SUCCEEDED

    # A worker died after the run started: the retry sends nothing at all.
    await sim.delete("/_sim/requests")
    again = await adapter.submit(request(state={**row_state, "run_id": retried.vendor_run_id}))
    assert again.vendor_run_id == retried.vendor_run_id
    assert await vendor_requests(sim) == []


async def test_project_and_table_come_from_options_and_stay_in_state(simulator: str) -> None:
    client = make_client(simulator + "/cloudsquid/api", {"X-API-Key": KEY}, timeout_s=5, vendor="cloudsquid")
    async with client:
        adapter = CloudsquidAdapter(client)  # no defaults
        with pytest.raises(VendorRejected, match="HOOKBRIDGE_CLOUDSQUID_PROJECT"):
            await adapter.submit(request())
        with pytest.raises(VendorRejected, match="HOOKBRIDGE_CLOUDSQUID_TABLE_ID"):
            await adapter.submit(request(options={"project": "other"}))
        table = "0b6a2f57-9a55-4c54-9d2c-0cf1c8f1b4a1"
        submitted = await adapter.submit(request(options={"project": "other", "table_id": table}))
        assert submitted.state["project"] == "other" and submitted.state["table_id"] == table
        assert (await until_terminal(adapter, submitted))[-1].status == base.SUCCEEDED


async def test_a_media_type_outside_the_enum_is_refused_before_calling(
    adapter: CloudsquidAdapter, sim: httpx.AsyncClient
) -> None:
    doc = Document(content=b"GIF89a", filename="scan.gif", media_type="image/gif")
    with pytest.raises(VendorRejected, match="image/gif"):
        await adapter.submit(request(doc))
    assert await vendor_requests(sim) == []


async def test_a_refused_upload_is_rejected_with_the_vendor_message(adapter: CloudsquidAdapter) -> None:
    with pytest.raises(VendorRejected, match="simulated rejection") as info:
        await adapter.submit(request(pdf("reject-me.pdf")))
    assert info.value.status_code == 400


async def test_a_wrong_key_is_rejected(simulator: str) -> None:
    client = make_client(
        simulator + "/cloudsquid/api", {"X-API-Key": "nope"}, timeout_s=5, vendor="cloudsquid"
    )
    async with client:
        with pytest.raises(VendorRejected, match="X-API-Key") as info:
            await CloudsquidAdapter(client, project=PROJECT, table_id=TABLE).submit(request())
    assert info.value.status_code == 401


async def test_5xx_and_429_are_transient(adapter: CloudsquidAdapter, sim: httpx.AsyncClient) -> None:
    await sim.patch("/_sim/config", json={"rate_5xx": 1.0, "vendors_faulty": ["cloudsquid"]})
    with pytest.raises(VendorTransient) as info:
        await adapter.submit(request())
    assert info.value.status_code in (500, 502, 503) and not isinstance(info.value, VendorRateLimited)

    # 429s come from the simulator's bucket per key: one request's worth, then empty for ~1000 s.
    await sim.patch("/_sim/config", json={"rate_5xx": 0.0, "cloudsquid_rps": 0.001, "cloudsquid_burst": 1})
    where = {"project": PROJECT, "table_id": TABLE}
    with pytest.raises(VendorExpired):
        await adapter.poll("8c1f9d0e-1111-4222-8333-444455556666", where)
    with pytest.raises(VendorRateLimited) as limited:
        await adapter.poll("8c1f9d0e-1111-4222-8333-444455556666", where)
    assert limited.value.retry_after is None  # Cloudsquid documents no Retry-After


async def test_an_unknown_run_is_expired(adapter: CloudsquidAdapter) -> None:
    with pytest.raises(VendorExpired):
        await adapter.poll("8c1f9d0e-1111-4222-8333-444455556666", {"project": PROJECT, "table_id": TABLE})


async def test_cancel_does_nothing(adapter: CloudsquidAdapter, sim: httpx.AsyncClient) -> None:
    assert adapter.supports_cancel is False
    await adapter.cancel("any", {})
    assert await vendor_requests(sim) == []
