"""The simulated Nutrient async-runs API against nutrient-run-asynchronously.md."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.core.clock import ManualClock
from service.simulator import SimulatorConfig, create_app

AUTH = {"Authorization": "Bearer sim-nutrient-key"}
BASE = "/nutrient/extraction"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def client(clock: ManualClock) -> AsyncIterator[httpx.AsyncClient]:
    # Fixed 10 s runs on a manual clock: queued for 2 s, running for 8 s.
    app = create_app(SimulatorConfig(duration_s=(10.0, 10.0)), clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
        yield c


async def submit(
    client: httpx.AsyncClient,
    content: bytes = b"%PDF-1.7 invoice",
    filename: str = "invoice.pdf",
    *,
    operation: str = "parse",
    instructions: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        f"{BASE}/{operation}/async",
        headers={**AUTH, **(headers or {})},
        files={"file": (filename, content, "application/pdf")},
        data={"instructions": json.dumps(instructions or {"mode": "agentic"})},
    )


async def get_run(client: httpx.AsyncClient, run_id: str) -> httpx.Response:
    return await client.get(f"{BASE}/runs/{run_id}", headers=AUTH)


async def test_submit_answers_202_with_location_and_a_queued_run(client: httpx.AsyncClient) -> None:
    response = await submit(client)
    assert response.status_code == 202
    run = response.json()
    assert len(run["id"]) == 26 and run["id"].isalnum() and run["id"].upper() == run["id"]
    assert response.headers["location"] == f"/extraction/runs/{run['id']}"
    assert response.headers["x-nutrient-run-id"] == run["id"]
    assert "idempotency-replayed" not in response.headers
    assert run["status"] == "queued"
    assert run["usage"] == {}
    assert [a["name"] for a in run["assets"]] == ["input"]
    assert "progress" not in run


async def test_run_goes_queued_running_done_and_serves_its_result(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    content = b"%PDF-1.7 a good invoice"
    run_id = (await submit(client, content)).json()["id"]

    clock.advance(1.0)
    assert (await get_run(client, run_id)).json()["status"] == "queued"
    assert (await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH)).status_code == 409

    clock.advance(3.0)
    running = (await get_run(client, run_id)).json()
    assert running["status"] == "running"
    progress = running["progress"]
    assert set(progress) == {"phase", "percent", "pagesProcessed", "pagesTotal"}
    assert 0 < progress["percent"] < 100
    assert 0 <= progress["pagesProcessed"] <= progress["pagesTotal"]
    early = (await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH)).json()
    assert early["errorDetails"]["code"] == "run_in_flight"

    clock.advance(2.0)
    assert (await get_run(client, run_id)).json()["progress"]["percent"] > progress["percent"]

    clock.advance(10.0)
    done = (await get_run(client, run_id)).json()
    assert done["status"] == "done"
    assert "progress" not in done
    assert done["error"] is None
    assert done["usage"]["data_extraction_credits"]["cost"] > 0
    assert {a["name"] for a in done["assets"]} == {"input", "result"}

    result = await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH)
    assert result.status_code == 200
    digest = hashlib.sha256(content).hexdigest()
    fields = result.json()["output"]["fields"]
    assert fields["invoice_number"] == f"INV-{digest[:6]}"
    assert fields["sha256"] == digest
    assert isinstance(fields["total"], float)
    assert (
        result.json()["usage"]["data_extraction_credits"]["cost"]
        == done["usage"]["data_extraction_credits"]["cost"]
    )


async def test_json_url_submission_with_top_level_fields(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    response = await client.post(
        f"{BASE}/extract/async",
        headers=AUTH,
        json={"url": "https://example.com/invoice.pdf", "mode": "understand"},
    )
    assert response.status_code == 202
    run = response.json()
    assert run["operation"] == "extract"
    assert run["assets"][0]["url"] == "https://example.com/invoice.pdf"
    clock.advance(20.0)
    assert (await get_run(client, run["id"])).json()["status"] == "done"


async def test_failing_document_ends_in_error_without_result(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    run_id = (await submit(client, filename="will-FAIL.pdf")).json()["id"]
    clock.advance(20.0)
    run = (await get_run(client, run_id)).json()
    assert run["status"] == "error"
    assert run["error"]["status"] == 422
    assert run["error"]["details"]["source"] == "processing"
    assert run["error"]["message"] == "simulated failure: unreadable document"
    assert run["usage"] == {}
    assert (await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH)).status_code == 404


async def test_marker_in_first_bytes_counts(client: httpx.AsyncClient, clock: ManualClock) -> None:
    run_id = (await submit(client, b"this document should fail", filename="x.pdf")).json()["id"]
    clock.advance(20.0)
    assert (await get_run(client, run_id)).json()["status"] == "error"


async def test_billing_document_ends_in_402_billing_error(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    run_id = (await submit(client, filename="billing.pdf")).json()["id"]
    clock.advance(20.0)
    run = (await get_run(client, run_id)).json()
    assert run["status"] == "error"
    assert run["error"]["status"] == 402
    assert run["error"]["details"]["source"] == "billing"


async def test_rejected_document_is_refused_at_submit(client: httpx.AsyncClient) -> None:
    response = await submit(client, filename="reject-me.pdf")
    assert response.status_code == 400
    body = response.json()
    assert body["errorMessage"] and body["requestId"]
    stats = (await client.get("/_sim/stats")).json()
    assert stats["nutrient"] == {}


@pytest.mark.parametrize(
    "instructions", [{"storeRun": False}, {"mode": "text", "storeRun": False}], ids=["alone", "with-mode"]
)
async def test_store_run_false_is_400(client: httpx.AsyncClient, instructions: dict[str, Any]) -> None:
    response = await submit(client, instructions=instructions)
    assert response.status_code == 400
    assert response.json()["errorDetails"]["code"] == "invalid_request"


async def test_submit_without_a_document_or_with_bad_instructions_is_400(client: httpx.AsyncClient) -> None:
    assert (await client.post(f"{BASE}/parse/async", headers=AUTH, json={"mode": "text"})).status_code == 400
    response = await client.post(
        f"{BASE}/parse/async",
        headers=AUTH,
        files={"file": ("a.pdf", b"x")},
        data={"instructions": "{not json"},
    )
    assert response.status_code == 400


async def test_stuck_run_stays_running_until_the_processing_limit(clock: ManualClock) -> None:
    config = SimulatorConfig(duration_s=(10.0, 10.0), nutrient_max_processing_s=60.0)
    app = create_app(config, clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        run_id = (await submit(client, filename="stuck.pdf")).json()["id"]
        clock.advance(55.0)
        run = (await get_run(client, run_id)).json()
        assert run["status"] == "running"
        assert run["progress"]["percent"] <= 99
        clock.advance(10.0)
        run = (await get_run(client, run_id)).json()
        assert run["status"] == "error"
        assert run["error"]["details"]["source"] == "processing"


async def test_slow_document_takes_ten_times_longer(client: httpx.AsyncClient, clock: ManualClock) -> None:
    slow_id = (await submit(client, filename="slow.pdf")).json()["id"]
    normal_id = (await submit(client, filename="normal.pdf")).json()["id"]
    clock.advance(11.0)
    assert (await get_run(client, normal_id)).json()["status"] == "done"
    assert (await get_run(client, slow_id)).json()["status"] == "queued"
    clock.advance(15.0)
    assert (await get_run(client, slow_id)).json()["status"] == "running"
    clock.advance(75.0)
    assert (await get_run(client, slow_id)).json()["status"] == "done"


async def test_processing_limit_knob_turns_long_runs_into_errors(clock: ManualClock) -> None:
    config = SimulatorConfig(duration_s=(10.0, 10.0), nutrient_max_processing_s=5.0)
    app = create_app(config, clock=clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        run_id = (await submit(client)).json()["id"]
        clock.advance(7.5)
        assert (await get_run(client, run_id)).json()["status"] == "error"


class TestIdempotency:
    async def test_same_request_replays_the_original_run(self, client: httpx.AsyncClient) -> None:
        key = {"Idempotency-Key": "7c9e6679-7425-40de-944b-e07fc1f90ae7"}
        first = await submit(client, headers=key)
        again = await submit(client, headers=key)
        assert first.status_code == again.status_code == 202
        assert again.json()["id"] == first.json()["id"]
        assert again.headers["idempotency-replayed"] == "true"
        assert again.headers["x-nutrient-run-id"] == first.json()["id"]
        assert "idempotency-replayed" not in first.headers
        assert (await client.get("/_sim/stats")).json()["nutrient"] == {"queued": 1}

    @pytest.mark.parametrize(
        ("content", "instructions"),
        [(b"%PDF-1.7 invoice", {"mode": "text"}), (b"%PDF-1.7 other bytes", {"mode": "agentic"})],
        ids=["other-instructions", "other-bytes"],
    )
    async def test_same_key_different_request_is_409(
        self, client: httpx.AsyncClient, content: bytes, instructions: dict[str, Any]
    ) -> None:
        key = {"Idempotency-Key": "k-1"}
        assert (await submit(client, headers=key)).status_code == 202
        reused = await submit(client, content, instructions=instructions, headers=key)
        assert reused.status_code == 409
        assert reused.json()["errorDetails"]["code"] == "idempotency_key_reused"
        assert reused.json()["errorMessage"]

    async def test_key_is_scoped_to_the_operation(self, client: httpx.AsyncClient) -> None:
        key = {"Idempotency-Key": "shared"}
        parse = await submit(client, headers=key)
        extract = await submit(client, operation="extract", headers=key)
        assert extract.status_code == 202
        assert extract.json()["id"] != parse.json()["id"]

    @pytest.mark.parametrize(
        "key", ["", "x" * 256, "tab\tinside", "del\x7f"], ids=["empty", "256", "tab", "del"]
    )
    async def test_bad_key_is_400_invalid_request(self, client: httpx.AsyncClient, key: str) -> None:
        response = await submit(client, headers={"Idempotency-Key": key})
        assert response.status_code == 400
        assert response.json()["errorDetails"]["code"] == "invalid_request"

    async def test_a_key_outside_printable_ascii_is_400(self, client: httpx.AsyncClient) -> None:
        response = await client.post(
            f"{BASE}/parse/async",
            headers=[*AUTH.items(), ("Idempotency-Key", b"caf\xe9")],
            files={"file": ("a.pdf", b"%PDF")},
        )
        assert response.status_code == 400
        assert response.json()["errorDetails"]["code"] == "invalid_request"
        assert (await client.get("/_sim/stats")).json()["nutrient"] == {}

    async def test_longest_key_is_fine(self, client: httpx.AsyncClient) -> None:
        assert (await submit(client, headers={"Idempotency-Key": "~" * 255})).status_code == 202

    async def test_failed_run_keeps_its_key_until_deleted(
        self, client: httpx.AsyncClient, clock: ManualClock
    ) -> None:
        key = {"Idempotency-Key": "retry-me"}
        first = (await submit(client, filename="fail.pdf", headers=key)).json()
        clock.advance(20.0)
        replay = await submit(client, filename="fail.pdf", headers=key)
        assert replay.json()["id"] == first["id"]
        assert replay.json()["status"] == "error"
        assert (await client.delete(f"{BASE}/runs/{first['id']}", headers=AUTH)).status_code == 204
        fresh = await submit(client, filename="fail.pdf", headers=key)
        assert fresh.status_code == 202
        assert fresh.json()["id"] != first["id"]
        assert "idempotency-replayed" not in fresh.headers


class TestCancelAndDelete:
    async def test_cancel_is_200_and_idempotent(self, client: httpx.AsyncClient, clock: ManualClock) -> None:
        run_id = (await submit(client)).json()["id"]
        clock.advance(3.0)
        first = await client.post(f"{BASE}/runs/{run_id}/cancel", headers=AUTH)
        assert first.status_code == 200
        assert first.json()["status"] == "canceled"
        again = await client.post(f"{BASE}/runs/{run_id}/cancel", headers=AUTH)
        assert again.status_code == 200
        assert again.json()["status"] == "canceled"
        # The engine would have finished by now; the run stays canceled and uncharged.
        clock.advance(30.0)
        run = (await get_run(client, run_id)).json()
        assert run["status"] == "canceled"
        assert run["usage"] == {}
        assert (await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH)).status_code == 404

    @pytest.mark.parametrize("filename", ["ok.pdf", "fail.pdf"])
    async def test_cancel_of_a_finished_run_is_409(
        self, client: httpx.AsyncClient, clock: ManualClock, filename: str
    ) -> None:
        run_id = (await submit(client, filename=filename)).json()["id"]
        clock.advance(20.0)
        response = await client.post(f"{BASE}/runs/{run_id}/cancel", headers=AUTH)
        assert response.status_code == 409
        assert response.json()["errorDetails"]["code"] == "run_not_cancelable"

    async def test_delete_in_flight_is_409_then_204_after_cancel(self, client: httpx.AsyncClient) -> None:
        run_id = (await submit(client)).json()["id"]
        refused = await client.delete(f"{BASE}/runs/{run_id}", headers=AUTH)
        assert refused.status_code == 409
        assert refused.json()["errorDetails"]["code"] == "run_in_flight"
        await client.post(f"{BASE}/runs/{run_id}/cancel", headers=AUTH)
        assert (await client.delete(f"{BASE}/runs/{run_id}", headers=AUTH)).status_code == 204
        assert (await get_run(client, run_id)).status_code == 404


async def test_finished_run_expires_after_retention(client: httpx.AsyncClient, clock: ManualClock) -> None:
    await client.patch("/_sim/config", json={"nutrient_retention_s": 100})
    run_id = (await submit(client)).json()["id"]
    clock.advance(50.0)
    assert (await get_run(client, run_id)).status_code == 200
    clock.advance(100.0)
    for response in (
        await get_run(client, run_id),
        await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH),
        await client.post(f"{BASE}/runs/{run_id}/cancel", headers=AUTH),
    ):
        assert response.status_code == 410
        assert response.json()["errorDetails"]["code"] == "run_expired"
    assert (await client.delete(f"{BASE}/runs/{run_id}", headers=AUTH)).status_code == 204


async def test_credits_are_checked_at_submit_and_charged_on_done(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    await client.patch("/_sim/config", json={"nutrient_credits": 0})
    refused = await submit(client)
    assert refused.status_code == 402
    assert set(refused.json()) == {"error", "code", "message"}

    await client.patch("/_sim/config", json={"nutrient_credits": 1})
    run_id = (await submit(client)).json()["id"]
    # Not charged until done: a second submit still passes the check.
    second_id = (await submit(client, b"%PDF-1.7 second")).json()["id"]
    clock.advance(20.0)
    assert (await get_run(client, run_id)).json()["status"] == "done"
    assert (await get_run(client, second_id)).json()["status"] == "done"
    assert (await submit(client, b"%PDF-1.7 third")).status_code == 402


async def test_enqueue_failure_is_503_and_stores_nothing(client: httpx.AsyncClient) -> None:
    await client.patch("/_sim/config", json={"nutrient_rate_enqueue_fail": 1.0})
    response = await submit(client, headers={"Idempotency-Key": "k"})
    assert response.status_code == 503
    assert response.json()["errorDetails"]["code"] == "run_enqueue_failed"
    assert (await client.get("/_sim/stats")).json()["nutrient"] == {}
    await client.patch("/_sim/config", json={"nutrient_rate_enqueue_fail": 0})
    retried = await submit(client, headers={"Idempotency-Key": "k"})
    assert retried.status_code == 202
    assert "idempotency-replayed" not in retried.headers


async def test_auth_and_unknown_runs(client: httpx.AsyncClient) -> None:
    missing = await client.post(f"{BASE}/parse/async", files={"file": ("a.pdf", b"x")})
    assert missing.status_code == 401
    assert missing.json()["errorMessage"] and missing.json()["requestId"]
    wrong = await client.get(f"{BASE}/runs/X", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    unknown = await get_run(client, "0" * 26)
    assert unknown.status_code == 404
    assert unknown.json()["errorMessage"]
    assert (await client.post(f"{BASE}/ocr/async", headers=AUTH)).status_code == 404


async def test_real_clock_run_finishes() -> None:
    """The same lifecycle on the system clock, polled with a deadline."""
    app = create_app(SimulatorConfig(duration_s=(0.05, 0.1)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        run_id = (await submit(client)).json()["id"]
        seen: list[str] = []
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            status = (await get_run(client, run_id)).json()["status"]
            if not seen or seen[-1] != status:
                seen.append(status)
            if status == "done":
                break
            await asyncio.sleep(0.01)
        assert seen[0] == "queued" and seen[-1] == "done"


class TestStrictReading:
    """What the documents do not allow is refused, and nothing is stored (S003, NU-parse)."""

    async def test_nested_instructions_in_a_json_body_are_400(self, client: httpx.AsyncClient) -> None:
        response = await client.post(
            f"{BASE}/parse/async",
            headers=AUTH,
            json={"url": "https://example.com/a.pdf", "instructions": {"mode": "text"}},
        )
        assert response.status_code == 400
        assert response.json()["errorDetails"]["code"] == "invalid_request"
        assert "top level" in response.json()["errorMessage"]
        assert (await client.get("/_sim/stats")).json()["nutrient"] == {}

    async def test_top_level_mode_of_a_json_body_is_read(
        self, client: httpx.AsyncClient, clock: ManualClock
    ) -> None:
        url = "https://example.com/a.pdf"
        text = await client.post(f"{BASE}/parse/async", headers=AUTH, json={"url": url, "mode": "text"})
        default = await client.post(f"{BASE}/parse/async", headers=AUTH, json={"url": url})
        clock.advance(20.0)
        costs = [
            (await get_run(client, r.json()["id"])).json()["usage"]["data_extraction_credits"]["cost"]
            for r in (text, default)
        ]
        # text costs 1 credit a page, the default (understand) 9 (NU-price).
        assert costs[1] == 9 * costs[0]

    async def test_an_unknown_parse_mode_is_400(self, client: httpx.AsyncClient) -> None:
        response = await submit(client, instructions={"mode": "telepathy"})
        assert response.status_code == 400
        assert response.json()["errorDetails"]["code"] == "invalid_request"

    @pytest.mark.parametrize("operation", ["translate", "PARSE", "runs"])
    async def test_an_unknown_operation_is_404_and_stores_nothing(
        self, client: httpx.AsyncClient, operation: str
    ) -> None:
        response = await submit(client, operation=operation)
        assert response.status_code == 404
        assert (await client.get("/_sim/stats")).json()["nutrient"] == {}

    async def test_a_url_in_a_multipart_body_is_400(self, client: httpx.AsyncClient) -> None:
        response = await client.post(
            f"{BASE}/parse/async",
            headers=AUTH,
            data={"url": "https://example.com/a.pdf", "instructions": "{}"},
            files={"unrelated": ("x", b"x")},
        )
        assert response.status_code == 400

    async def test_a_json_url_must_be_http(self, client: httpx.AsyncClient) -> None:
        response = await client.post(f"{BASE}/parse/async", headers=AUTH, json={"url": "file:///etc/passwd"})
        assert response.status_code == 400


class TestSplitZip:
    async def finished_split(self, client: httpx.AsyncClient, clock: ManualClock, output: str) -> str:
        response = await submit(
            client, b"%PDF-1.7 two invoices", operation="split", instructions={"output": output}
        )
        assert response.status_code == 202, response.text
        clock.advance(20.0)
        return str(response.json()["id"])

    @pytest.mark.parametrize("output", ["zip", "both"])
    async def test_zip_output_adds_a_zip_asset_named_by_download_url(
        self, client: httpx.AsyncClient, clock: ManualClock, output: str
    ) -> None:
        run_id = await self.finished_split(client, clock, output)
        run = (await get_run(client, run_id)).json()
        assert [a["name"] for a in run["assets"]] == ["input", "result", "zip"]
        result = (await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH)).json()
        url = result["output"]["downloadUrl"]
        assert url == f"http://sim{BASE}/runs/{run_id}/assets/zip"
        # With zip alone, the result omits page ranges (S003).
        assert ("documents" in result["output"]) is (output == "both")
        assert (await client.get(url)).status_code == 401  # only Nutrient's key fetches it
        fetched = await client.get(url, headers=AUTH)
        assert fetched.status_code == 200
        assert fetched.headers["content-type"] == "application/zip"
        with zipfile.ZipFile(io.BytesIO(fetched.content)) as archive:
            assert archive.read("invoice-1.pdf") == b"%PDF-1.7 two invoices"

    async def test_json_output_has_page_ranges_and_no_zip(
        self, client: httpx.AsyncClient, clock: ManualClock
    ) -> None:
        run_id = await self.finished_split(client, clock, "json")
        result = (await client.get(f"{BASE}/runs/{run_id}/assets/result", headers=AUTH)).json()
        assert "downloadUrl" not in result["output"] and result["output"]["documents"]
        assert (await client.get(f"{BASE}/runs/{run_id}/assets/zip", headers=AUTH)).status_code == 404

    async def test_an_unknown_output_is_400(self, client: httpx.AsyncClient) -> None:
        response = await submit(client, operation="split", instructions={"output": "tarball"})
        assert response.status_code == 400
