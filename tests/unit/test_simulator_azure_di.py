"""The simulated Azure AI Document Intelligence against next-vendors.md §1, over raw HTTP, on a manual
clock."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.core.clock import ManualClock
from service.simulator import SimulatorConfig, create_app

AUTH = {"Ocp-Apim-Subscription-Key": "sim-azure-di-key"}
V = {"api-version": "2024-11-30"}
MODELS = "/documentintelligence/documentModels"
URL_BODY = {"urlSource": "https://docs.example/invoice.pdf"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make_client(clock: ManualClock, **config: Any) -> httpx.AsyncClient:
    # Fixed 10 s runs: notStarted for 2 s, running for 8 s.
    settings: dict[str, Any] = {"duration_s": (10.0, 10.0), "azure_di_retry_after": "always", **config}
    app = create_app(SimulatorConfig(**settings), clock=clock)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim.test")


@pytest.fixture
async def client(clock: ManualClock) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(clock) as c:
        yield c


async def analyze(
    client: httpx.AsyncClient, model: str = "prebuilt-invoice", **kwargs: Any
) -> httpx.Response:
    kwargs.setdefault("headers", AUTH)
    kwargs.setdefault("params", V)
    if "content" not in kwargs:
        kwargs.setdefault("json", URL_BODY)
    return await client.post(f"{MODELS}/{model}:analyze", **kwargs)


async def poll(client: httpx.AsyncClient, location: str) -> httpx.Response:
    return await client.get(location, headers=AUTH)


async def test_submit_is_202_empty_with_an_absolute_operation_location(client: httpx.AsyncClient) -> None:
    response = await analyze(client)
    assert response.status_code == 202 and response.content == b""
    location = response.headers["operation-location"]
    assert re.fullmatch(
        r"http://sim\.test/documentintelligence/documentModels/prebuilt-invoice/analyzeResults/"
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}\?api-version=2024-11-30",
        location,
    )
    assert response.headers["retry-after"] == "2"


async def test_status_walk_not_started_running_succeeded_with_inline_result(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    location = (await analyze(client)).headers["operation-location"]
    first = (await poll(client, location)).json()
    assert first["status"] == "notStarted" and set(first) == {
        "status",
        "createdDateTime",
        "lastUpdatedDateTime",
    }
    clock.advance(3)
    running = await poll(client, location)
    assert running.json()["status"] == "running" and running.headers["retry-after"] == "2"
    clock.advance(10)
    done = await poll(client, location)
    body = done.json()
    assert done.status_code == 200 and body["status"] == "succeeded" and "retry-after" not in done.headers
    result = body["analyzeResult"]
    assert {"apiVersion", "modelId", "stringIndexType", "content", "pages"} <= set(result)
    assert result["apiVersion"] == "2024-11-30" and result["stringIndexType"] == "textElements"
    assert result["documents"][0]["docType"] == "invoice"
    assert body["createdDateTime"] < body["lastUpdatedDateTime"]


async def test_failed_is_http_200_with_error_details(client: httpx.AsyncClient, clock: ManualClock) -> None:
    location = (await analyze(client, json={"urlSource": "https://docs.example/fail.pdf"})).headers[
        "operation-location"
    ]
    clock.advance(20)
    response = await poll(client, location)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "failed" and "analyzeResult" not in body
    assert body["error"]["code"] == "InvalidRequest"
    assert body["error"]["details"][0]["target"] == "1"


@pytest.mark.parametrize(
    ("model", "kwargs", "status", "code", "target"),
    [
        ("prebuilt-read", {"params": {}}, 400, "InvalidArgument", "api-version"),
        ("prebuilt-read", {"params": {"api-version": "2023-07-31"}}, 400, "InvalidArgument", "api-version"),
        ("prebuilt-read", {"json": {}}, 400, "InvalidRequest", None),
        ("prebuilt-read", {"json": {**URL_BODY, "base64Source": "JVBERg=="}}, 400, "InvalidRequest", None),
        ("prebuilt-read", {"json": {"urlSource": "ftp://x/y.pdf"}}, 400, "InvalidArgument", "urlSource"),
        ("prebuilt-read", {"json": {"base64Source": "not base64!"}}, 400, "InvalidArgument", "base64Source"),
        (
            "prebuilt-read",
            {"content": b"x", "headers": {**AUTH, "Content-Type": "text/plain"}},
            415,
            "UnsupportedMediaType",
            None,
        ),
        (
            "prebuilt-read",
            {"content": b"", "headers": {**AUTH, "Content-Type": "application/pdf"}},
            400,
            "InvalidRequest",
            None,
        ),
        ("prebuilt-read", {"params": {**V, "pages": "1-"}}, 400, "InvalidArgument", "pages"),
        (
            "prebuilt-read",
            {"params": {**V, "features": "barcodes,colour"}},
            400,
            "InvalidArgument",
            "features",
        ),
        (
            "prebuilt-read",
            {"params": {**V, "outputContentFormat": "html"}},
            400,
            "InvalidArgument",
            "outputContentFormat",
        ),
        (
            "prebuilt-read",
            {"params": {**V, "stringIndexType": "bytes"}},
            400,
            "InvalidArgument",
            "stringIndexType",
        ),
        ("prebuilt-read", {"params": {**V, "output": "png"}}, 400, "InvalidArgument", "output"),
        ("-bad", {}, 400, "InvalidArgument", "modelId"),
        ("prebuilt-unknown", {}, 404, "NotFound", None),
        ("prebuilt-read", {"headers": {"Ocp-Apim-Subscription-Key": "wrong"}}, 401, "401", None),
        ("prebuilt-read", {"headers": {}}, 401, "401", None),
        (
            "prebuilt-read",
            {"json": {"urlSource": "https://docs.example/reject.pdf"}},
            400,
            "InvalidRequest",
            None,
        ),
    ],
)
async def test_strict_refusals(
    client: httpx.AsyncClient, model: str, kwargs: dict[str, Any], status: int, code: str, target: str | None
) -> None:
    response = await analyze(client, model, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    assert error.get("target") == target
    assert "operation-location" not in response.headers
    runs = (await client.get("/_sim/runs", params={"vendor": "azure_di"})).json()["data"]
    assert runs == []  # a refusal changes nothing


async def test_raw_bytes_and_base64_of_one_document_give_one_result(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    content = b"%PDF-1.7 one document"
    raw = await analyze(client, content=content, headers={**AUTH, "Content-Type": "application/pdf"})
    encoded = await analyze(client, json={"base64Source": base64.b64encode(content).decode()})
    clock.advance(20)
    contents = [
        (await poll(client, r.headers["operation-location"])).json()["analyzeResult"]["content"]
        for r in (raw, encoded)
    ]
    assert contents[0] == contents[1]


async def test_query_options_shape_the_result(client: httpx.AsyncClient, clock: ManualClock) -> None:
    params = {
        **V,
        "pages": "1",
        "outputContentFormat": "markdown",
        "features": "queryFields",
        "queryFields": "PONumber,Vendor",
        "locale": "en-US",
    }
    location = (await analyze(client, "prebuilt-layout", params=params)).headers["operation-location"]
    clock.advance(20)
    result = (await poll(client, location)).json()["analyzeResult"]
    assert result["contentFormat"] == "markdown" and result["content"].startswith("# ")
    assert [p["pageNumber"] for p in result["pages"]] == [1]
    assert set(result["documents"][0]["fields"]) == {"PONumber", "Vendor"}
    assert result["languages"][0]["locale"] == "en-US"


async def test_delete_is_204_and_then_the_result_is_404(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    location = (await analyze(client)).headers["operation-location"]
    clock.advance(20)
    assert (await client.delete(location, headers=AUTH)).status_code == 204
    gone = await poll(client, location)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "NotFound"
    assert (await client.delete(location, headers=AUTH)).status_code == 404


@pytest.mark.parametrize(("reading", "status"), [("allow", 204), ("409", 409)])
async def test_delete_of_an_unfinished_operation_plays_both_readings(
    clock: ManualClock, reading: str, status: int
) -> None:
    async with make_client(clock, azure_di_delete_unfinished=reading) as client:
        location = (await analyze(client)).headers["operation-location"]
        refused = await client.delete(location, headers=AUTH)
        assert refused.status_code == status
        if status == 409:
            assert refused.json()["error"]["code"] == "Conflict"
            clock.advance(20)  # finished: deletable under either reading
            assert (await client.delete(location, headers=AUTH)).status_code == 204


async def test_the_result_grows_by_the_padding(clock: ManualClock) -> None:
    async with make_client(clock, azure_di_result_pad_bytes=200_000) as client:
        location = (await analyze(client)).headers["operation-location"]
        clock.advance(20)
        answer = await poll(client, location)
        assert 200_000 <= len(answer.content) <= 230_000
        assert answer.json()["analyzeResult"]["paragraphs"][-1]["content"].startswith("lorem ipsum")


async def test_results_expire_after_retention_from_submit(clock: ManualClock) -> None:
    async with make_client(clock, azure_di_retention_s=100) as client:
        location = (await analyze(client)).headers["operation-location"]
        clock.advance(99)
        assert (await poll(client, location)).json()["status"] == "succeeded"
        clock.advance(1)
        assert (await poll(client, location)).status_code == 404


async def test_polls_closer_than_the_floor_are_429(clock: ManualClock) -> None:
    async with make_client(clock, azure_di_min_poll_s=2.0, azure_di_429_retry_after="always") as client:
        location = (await analyze(client)).headers["operation-location"]
        assert (await poll(client, location)).status_code == 200
        clock.advance(1.0)
        early = await poll(client, location)
        assert early.status_code == 429 and early.json()["error"]["code"] == "429"
        assert early.headers["retry-after"] == "1"
        clock.advance(1.0)
        assert (await poll(client, location)).status_code == 200


async def test_429_without_retry_after_mode(clock: ManualClock) -> None:
    async with make_client(clock, azure_di_min_poll_s=2.0, azure_di_429_retry_after="never") as client:
        location = (await analyze(client)).headers["operation-location"]
        await poll(client, location)
        early = await poll(client, location)
        assert early.status_code == 429 and "retry-after" not in early.headers


async def test_analyze_and_read_budgets_are_separate(clock: ManualClock) -> None:
    async with make_client(
        clock, azure_di_analyze_tps=2, azure_di_get_tps=3, azure_di_min_poll_s=0
    ) as client:
        locations = [(await analyze(client)).headers["operation-location"] for _ in range(2)]
        assert (await analyze(client)).status_code == 429  # the third submit in one second
        assert [(await poll(client, locations[0])).status_code for _ in range(4)] == [200, 200, 200, 429]
        clock.advance(1.0)
        assert (await analyze(client)).status_code == 202  # reads being over their limit never stops submits
        other_key = await analyze(client, headers={"Ocp-Apim-Subscription-Key": "sim-azure-di-key"})
        assert other_key.status_code == 202


async def test_retry_after_is_played_present_and_absent(clock: ManualClock) -> None:
    async with make_client(clock, azure_di_retry_after="random") as client:
        seen = {"retry-after" in (await analyze(client)).headers for _ in range(12)}
    assert seen == {True, False}
    async with make_client(clock, azure_di_retry_after="never") as client:
        assert "retry-after" not in (await analyze(client)).headers


async def test_running_polls_and_unknown_status(clock: ManualClock) -> None:
    async with make_client(clock, azure_di_running_polls=2, azure_di_min_poll_s=0) as client:
        location = (await analyze(client)).headers["operation-location"]
        clock.advance(20)
        statuses = [(await poll(client, location)).json()["status"] for _ in range(3)]
        assert statuses == ["running", "running", "succeeded"]
    async with make_client(clock, azure_di_unknown_status="skipped") as client:
        location = (await analyze(client)).headers["operation-location"]
        clock.advance(20)
        body = (await poll(client, location)).json()
        assert body["status"] == "skipped" and "analyzeResult" not in body


async def test_bearer_token_is_accepted_and_client_request_id_echoed(client: httpx.AsyncClient) -> None:
    response = await analyze(
        client,
        headers={"Authorization": "Bearer sim-azure-di-token", "x-ms-client-request-id": "abc-123"},
    )
    assert response.status_code == 202 and response.headers["x-ms-client-request-id"] == "abc-123"
    wrong = await analyze(client, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


async def test_poll_of_an_unknown_or_mismatched_result_is_404(client: httpx.AsyncClient) -> None:
    location = (await analyze(client)).headers["operation-location"]
    mismatched = location.replace("prebuilt-invoice", "prebuilt-read")
    assert (await poll(client, mismatched)).status_code == 404
    unknown = await client.get(f"{MODELS}/prebuilt-read/analyzeResults/not-a-uuid", headers=AUTH, params=V)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NotFound"
    batch = await client.post(f"{MODELS}/prebuilt-read:analyzeBatch", headers=AUTH, params=V, json={})
    assert batch.status_code == 404 and batch.json()["error"]["code"] == "NotFound"


async def test_injected_faults_use_the_error_envelope(clock: ManualClock) -> None:
    async with make_client(clock, rate_5xx=1.0, vendors_faulty=frozenset({"azure_di"})) as client:
        statuses = set()
        for _ in range(12):
            response = await analyze(client)
            statuses.add((response.status_code, response.json()["error"]["code"]))
        log = (await client.get("/_sim/requests", params={"vendor": "azure_di"})).json()["data"]
    assert (503, "ServiceUnavailable") in statuses and (500, "InternalServerError") in statuses
    assert len(log) == 12 and {e["fault"] for e in log} == {"5xx"}


async def test_sim_routes_know_the_vendor(client: httpx.AsyncClient, clock: ManualClock) -> None:
    submitted_at = clock.time()
    location = (await analyze(client)).headers["operation-location"]
    await poll(client, location)
    runs = (await client.get("/_sim/runs", params={"vendor": "azure_di"})).json()["data"]
    assert [(r["id"], r["status"]) for r in runs] == [(location.split("/")[-1].split("?")[0], "notStarted")]
    assert runs[0]["created_t"] == pytest.approx(submitted_at)
    assert runs[0]["finish_t"] == pytest.approx(submitted_at + 10.0)
    assert (await client.get("/_sim/stats")).json()["azure_di"] == {"notStarted": 1}
    log = (await client.get("/_sim/requests", params={"vendor": "azure_di"})).json()["data"]
    assert [(e["method"], e["status"]) for e in log] == [("POST", 202), ("GET", 200)]


def test_knobs_from_the_environment_and_patch() -> None:
    config = SimulatorConfig.from_env(
        {
            "HOOKBRIDGE_SIM_AZURE_DI_RETRY_AFTER": "never",
            "HOOKBRIDGE_SIM_AZURE_DI_RUNNING_POLLS": "3",
            "HOOKBRIDGE_SIM_AZURE_DI_ANALYZE_TPS": "1",
            "HOOKBRIDGE_SIM_AZURE_DI_UNKNOWN_STATUS": "paused",
        }
    )
    assert (config.azure_di_retry_after, config.azure_di_running_polls) == ("never", 3)
    assert (config.azure_di_analyze_tps, config.azure_di_unknown_status) == (1.0, "paused")
    patched = config.patched(
        {"azure_di_min_poll_s": 0, "azure_di_retry_after_s": 5, "azure_di_retry_after": "always"}
    )
    assert (patched.azure_di_min_poll_s, patched.azure_di_retry_after_s) == (0.0, 5)


@pytest.mark.parametrize(
    "changes",
    [
        {"azure_di_retry_after": "sometimes"},
        {"azure_di_429_retry_after": True},
        {"azure_di_running_polls": -1},
        {"azure_di_running_polls": 1.5},
        {"azure_di_get_tps": -1},
        {"azure_di_api_key": ""},
        {"azure_di_bearer_token": 5},
    ],
)
def test_bad_knobs_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(changes))):
        SimulatorConfig().patched(changes)


def test_bad_environment_names_the_variable() -> None:
    with pytest.raises(ValueError, match="HOOKBRIDGE_SIM_AZURE_DI_RETRY_AFTER"):
        SimulatorConfig.from_env({"HOOKBRIDGE_SIM_AZURE_DI_RETRY_AFTER": "maybe"})
