"""``GET /_sim/runs``: every simulated run with its status and when it was created and ends, as Unix times,
and the Nutrient credit settlement that no longer looks at every run on every request."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.core.clock import ManualClock
from service.simulator import SimulatorConfig, create_app

NUTRIENT_AUTH = {"Authorization": "Bearer sim-nutrient-key"}
CLOUDSQUID_AUTH = {"X-API-Key": "sim-cloudsquid-key"}
UPTIQ_AUTH = {"X-Api-Key": "sim-uptiq-key"}
CLOUDSQUID = "/cloudsquid/api/projects/p/tables/3fa85f64-5717-4562-b3fc-2c963f66afa6"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def client(clock: ManualClock) -> AsyncIterator[httpx.AsyncClient]:
    # Fixed 10 s runs on a manual clock: queued for 2 s, running for 8 s.
    app = create_app(SimulatorConfig(duration_s=(10.0, 10.0)), clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
        yield c


async def nutrient_submit(client: httpx.AsyncClient, url: str = "https://docs.example/invoice.pdf") -> str:
    response = await client.post(
        "/nutrient/extraction/extract/async", headers=NUTRIENT_AUTH, json={"url": url}
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def cloudsquid_submit(client: httpx.AsyncClient) -> str:
    body = {
        "file": base64.b64encode(b"%PDF-1.7 invoice").decode(),
        "filename": "invoice.pdf",
        "mimetype": "application/pdf",
        "file_type": "binary",
    }
    uploaded = await client.post(f"{CLOUDSQUID}/files", headers=CLOUDSQUID_AUTH, json=body)
    assert uploaded.status_code == 201, uploaded.text
    run = await client.post(
        f"{CLOUDSQUID}/run", headers=CLOUDSQUID_AUTH, json={"row_id": uploaded.json()["row_id"]}
    )
    assert run.status_code == 202, run.text
    return str(run.json()["run_id"])


async def uptiq_submit(client: httpx.AsyncClient) -> str:
    response = await client.post(
        "/uptiq/extract", headers=UPTIQ_AUTH, json={"documentType": "Invoice", "fileUrl": "https://x/a.pdf"}
    )
    assert response.status_code == 200, response.text
    return str(response.json()["data"]["_id"])


async def runs(client: httpx.AsyncClient, **params: str) -> list[dict[str, Any]]:
    response = await client.get("/_sim/runs", params=params)
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def test_lists_every_vendor_with_unix_times_and_the_status_of_the_clock(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    submitted_at = clock.time()
    ids = {
        "nutrient": await nutrient_submit(client),
        "cloudsquid": await cloudsquid_submit(client),
        "uptiq": await uptiq_submit(client),
    }
    listed = await runs(client)
    assert {(r["vendor"], r["id"]) for r in listed} == {(v, i) for v, i in ids.items()}
    for run in listed:
        assert set(run) == {"id", "vendor", "created_t", "finish_t", "status"}
        assert run["created_t"] == pytest.approx(submitted_at)
        assert run["finish_t"] == pytest.approx(submitted_at + 10.0)
    assert {r["vendor"]: r["status"] for r in listed} == {
        "nutrient": "queued",
        "cloudsquid": "pending",
        "uptiq": "Pending",
    }

    clock.advance(5.0)
    assert {r["vendor"]: r["status"] for r in await runs(client)} == {
        "nutrient": "running",
        "cloudsquid": "running",
        "uptiq": "Processing",
    }
    clock.advance(5.0)
    assert {r["vendor"]: r["status"] for r in await runs(client)} == {
        "nutrient": "done",
        "cloudsquid": "done",
        "uptiq": "Processed",
    }
    # The times do not move with the clock.
    assert all(r["created_t"] == pytest.approx(submitted_at) for r in await runs(client))


async def test_filters_by_vendor_and_refuses_an_unknown_one(client: httpx.AsyncClient) -> None:
    await nutrient_submit(client)
    await uptiq_submit(client)
    assert [r["vendor"] for r in await runs(client, vendor="uptiq")] == ["uptiq"]
    assert await runs(client, vendor="cloudsquid") == []
    refused = await client.get("/_sim/runs", params={"vendor": "acme"})
    assert refused.status_code == 400
    assert "acme" in refused.json()["error"]


async def test_a_canceled_run_ends_when_canceled_and_a_stuck_one_never(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    canceled = await nutrient_submit(client)
    stuck = await nutrient_submit(client, "https://docs.example/stuck.pdf")
    clock.advance(3.0)
    canceled_at = clock.time()
    response = await client.post(f"/nutrient/extraction/runs/{canceled}/cancel", headers=NUTRIENT_AUTH)
    assert response.status_code == 200
    by_id = {r["id"]: r for r in await runs(client, vendor="nutrient")}
    assert by_id[canceled]["status"] == "canceled"
    assert by_id[canceled]["finish_t"] == pytest.approx(canceled_at)
    assert by_id[stuck]["status"] == "running"
    assert by_id[stuck]["finish_t"] is not None  # Nutrient's processing limit ends even a stuck run
    assert by_id[stuck]["finish_t"] > by_id[stuck]["created_t"] + 800


async def test_runs_of_vendors_without_a_limit_that_never_finish_have_no_end(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/uptiq/extract",
        headers=UPTIQ_AUTH,
        json={"documentType": "Invoice", "fileUrl": "https://x/stuck.pdf"},
    )
    assert response.status_code == 200
    (run,) = await runs(client, vendor="uptiq")
    assert run["finish_t"] is None


async def test_credits_are_charged_once_per_done_run_and_never_for_canceled_or_failed_runs(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    await client.patch("/_sim/config", json={"nutrient_credits": 1_000_000})
    done = await nutrient_submit(client, "https://docs.example/a.pdf")
    await nutrient_submit(client, "https://docs.example/fail.pdf")
    canceled = await nutrient_submit(client, "https://docs.example/b.pdf")
    assert (
        await client.post(f"/nutrient/extraction/runs/{canceled}/cancel", headers=NUTRIENT_AUTH)
    ).is_success
    clock.advance(20.0)
    result = await client.get(f"/nutrient/extraction/runs/{done}/assets/result", headers=NUTRIENT_AUTH)
    credits = result.json()["usage"]["data_extraction_credits"]
    assert credits["remainingCredits"] == pytest.approx(1_000_000 - credits["cost"])
    # Looking again charges nothing more.
    again = await client.get(f"/nutrient/extraction/runs/{done}/assets/result", headers=NUTRIENT_AUTH)
    assert again.json()["usage"]["data_extraction_credits"]["remainingCredits"] == credits["remainingCredits"]
