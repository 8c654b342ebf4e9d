"""The simulated LlamaParse v2 against next-vendors.md §4, over raw HTTP, on a manual clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.core.clock import ManualClock
from service.simulator import SimulatorConfig, create_app

AUTH = {"Authorization": "Bearer llx-sim-llamaparse-key"}
PARSE = "/llamaparse/api/v2/parse"
BODY = {"tier": "agentic", "version": "latest", "source_url": "https://docs.example/invoice.pdf"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make_client(clock: ManualClock, host: str = "127.0.0.1:8000", **config: Any) -> httpx.AsyncClient:
    # Fixed 10 s runs: PENDING for 2 s, RUNNING for 8 s.
    app = create_app(SimulatorConfig(duration_s=(10.0, 10.0), **config), clock=clock)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


@pytest.fixture
async def client(clock: ManualClock) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(clock) as c:
        yield c


async def create(client: httpx.AsyncClient, body: Any = None, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("headers", AUTH)
    return await client.post(PARSE, json=BODY if body is None else body, **kwargs)


async def upload(
    client: httpx.AsyncClient, configuration: Any, content: bytes = b"%PDF-1.7 x", **kwargs: Any
) -> httpx.Response:
    kwargs.setdefault("headers", AUTH)
    data = {} if configuration is None else {"configuration": configuration}
    files = {"file": ("doc.pdf", content, "application/pdf")} if content is not None else None
    return await client.post(f"{PARSE}/upload", data=data, files=files, **kwargs)


async def get(client: httpx.AsyncClient, job_id: str, *expand: str) -> httpx.Response:
    return await client.get(f"{PARSE}/{job_id}", headers=AUTH, params=[("expand", e) for e in expand])


async def test_create_answers_a_flat_pending_job(client: httpx.AsyncClient) -> None:
    response = await create(client)
    assert response.status_code == 200
    job = response.json()
    assert job["status"] == "PENDING" and job["tier"] == "agentic" and job["error_message"] is None
    assert {"id", "project_id", "created_at", "updated_at"} <= set(job) and "job" not in job


@pytest.mark.parametrize(
    ("shape", "flat", "nested"), [("flat", True, False), ("nested", False, True), ("both", True, True)]
)
async def test_id_shapes(clock: ManualClock, shape: str, flat: bool, nested: bool) -> None:
    async with make_client(clock, llamaparse_id_shape=shape) as client:
        body = (await create(client)).json()
    assert ("id" in body) is flat and ("job" in body) is nested
    if nested:
        assert body["job"]["status"] == "PENDING"


async def test_random_id_shape_plays_both_readings(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_id_shape="random") as client:
        shapes = {"id" in (await create(client)).json() for _ in range(12)}
    assert shapes == {True, False}


@pytest.mark.parametrize(
    ("body", "status", "loc"),
    [
        ({"version": "latest", "source_url": "https://d/x.pdf"}, 422, ["body", "tier"]),
        ({"tier": "agentic", "source_url": "https://d/x.pdf"}, 422, ["body", "version"]),
        ({**BODY, "tier": "premium"}, 422, ["body", "tier"]),
        ({**BODY, "version": "v2"}, 422, ["body", "version"]),
        ({"tier": "fast", "version": "latest"}, 422, ["body"]),
        ({**BODY, "file_id": "f-1"}, 422, ["body"]),
        ({**BODY, "source_url": "file:///etc/passwd"}, 422, ["body", "source_url"]),
        ({**BODY, "parse_mode": "parse_page_with_llm"}, 422, ["body", "parse_mode"]),  # a v1 name
        ({**BODY, "user_metadata": {"a": 1}}, 422, ["body", "user_metadata"]),
        (["not", "an", "object"], 422, ["body"]),
    ],
)
async def test_create_refusals(client: httpx.AsyncClient, body: Any, status: int, loc: list[str]) -> None:
    response = await create(client, body)
    assert response.status_code == status, response.text
    assert response.json()["detail"][0]["loc"] == loc
    assert (await client.get("/_sim/runs", params={"vendor": "llamaparse"})).json()["data"] == []


@pytest.mark.parametrize(
    ("configuration", "content", "loc"),
    [
        (None, b"%PDF", ["body", "configuration"]),
        ("{not json", b"%PDF", ["body", "configuration"]),
        (json.dumps({"tier": "fast"}), b"%PDF", ["configuration", "version"]),
        (
            json.dumps({"tier": "fast", "version": "latest", "source_url": "https://d/x"}),
            b"%PDF",
            ["body", "configuration"],
        ),
        (json.dumps({"tier": "fast", "version": "latest"}), None, ["body", "file"]),
        (json.dumps({"tier": "fast", "version": "latest"}), b"", ["body", "file"]),
    ],
)
async def test_upload_refusals(
    client: httpx.AsyncClient, configuration: str | None, content: bytes | None, loc: list[str]
) -> None:
    response = await upload(client, configuration, content)  # type: ignore[arg-type]
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


async def test_upload_creates_a_job(client: httpx.AsyncClient) -> None:
    response = await upload(client, json.dumps({"tier": "cost_effective", "version": "2026-04-09"}))
    assert response.status_code == 200 and response.json()["tier"] == "cost_effective"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer llx-other"}, {"Authorization": "llx-sim-llamaparse-key"}]
)
async def test_bearer_key_is_required_everywhere(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    job_id = (await create(client)).json()["id"]
    assert (await create(client, headers=headers)).status_code == 401
    assert (await client.get(f"{PARSE}/{job_id}", headers=headers)).status_code == 401
    assert (await client.post(f"{PARSE}/{job_id}/cancel", headers=headers)).status_code == 401
    assert (await client.delete(f"{PARSE}/{job_id}", headers=headers)).status_code == 401


async def test_status_walk_and_expand_is_opt_in(client: httpx.AsyncClient, clock: ManualClock) -> None:
    job_id = (await create(client)).json()["id"]
    assert (await get(client, job_id, "text")).json() == {"job": (await get(client, job_id)).json()["job"]}
    assert (await get(client, job_id)).json()["job"]["status"] == "PENDING"
    clock.advance(3)
    assert (await get(client, job_id, "markdown")).json().keys() == {"job"}
    assert (await get(client, job_id)).json()["job"]["status"] == "RUNNING"
    clock.advance(10)
    bare = (await get(client, job_id)).json()
    assert bare.keys() == {"job"} and bare["job"]["status"] == "COMPLETED"  # no expand, no content
    full = (await get(client, job_id, "text", "markdown", "items", "metadata", "job_metadata")).json()
    assert {"text", "markdown", "items", "metadata", "job_metadata"} <= set(full)
    assert all(page["success"] for page in full["markdown"]["pages"])
    comma = (
        await client.get(f"{PARSE}/{job_id}", headers=AUTH, params={"expand": "text,markdown_full"})
    ).json()
    assert {"text", "markdown_full"} <= set(comma)


async def test_unknown_expand_is_refused(client: httpx.AsyncClient) -> None:
    job_id = (await create(client)).json()["id"]
    response = await get(client, job_id, "everything")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "expand"]


async def test_fast_tier_has_no_markdown_or_items(client: httpx.AsyncClient, clock: ManualClock) -> None:
    job_id = (await create(client, {**BODY, "tier": "fast"})).json()["id"]
    clock.advance(20)
    body = (await get(client, job_id, "text", "markdown", "markdown_full", "items")).json()
    assert "text" in body and not {"markdown", "markdown_full", "items"} & set(body)


async def test_failed_job_has_error_message(client: httpx.AsyncClient, clock: ManualClock) -> None:
    job_id = (await create(client, {**BODY, "source_url": "https://docs.example/fail.pdf"})).json()["id"]
    clock.advance(20)
    body = (await get(client, job_id, "text")).json()
    assert body["job"]["status"] == "FAILED" and body["job"]["error_message"] and "text" not in body


async def test_completed_with_failed_pages(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_failed_pages=True) as client:
        job_id = (await create(client)).json()["id"]
        clock.advance(20)
        body = (await get(client, job_id, "markdown", "items")).json()
    assert body["job"]["status"] == "COMPLETED"
    assert body["markdown"]["pages"][-1] == {
        "page_number": len(body["markdown"]["pages"]),
        "error": "simulated failure: unreadable document",
        "success": False,
    }
    assert body["items"]["pages"][-1]["success"] is False


async def test_presigned_urls_other_host_signature_and_expiry(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_presign_ttl_s=60) as client:
        job_id = (await create(client)).json()["id"]
        clock.advance(20)
        body = (
            await get(client, job_id, "text_full", "text_full_content_metadata", "xlsx_content_metadata")
        ).json()
        meta = body["result_content_metadata"]
        assert meta["xlsx"] == {"size_bytes": 0, "exists": False}
        url = httpx.URL(meta["text_full"]["presigned_url"])
        assert url.host == "localhost" and url.port == 8000 and url.path.startswith("/llamaparse-storage/")
        downloaded = await client.get(url, headers={})
        assert downloaded.status_code == 200 and downloaded.text == body["text_full"]
        assert meta["text_full"]["size_bytes"] == len(downloaded.content)
        forged = url.copy_with(path=url.path.replace("text_full", "markdown_full"))
        assert (await client.get(forged)).status_code == 403
        log = (await client.get("/_sim/requests", params={"vendor": "llamaparse"})).json()["data"]
        assert [e["status"] for e in log if e["path"].startswith("/llamaparse-storage/")] == [200, 403]
        clock.advance(61)
        expired = await client.get(url)
        assert expired.status_code == 403 and b"expired" in expired.content


async def test_large_inline_results_are_left_to_the_presigned_url(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_inline_max_bytes=10) as client:
        job_id = (await create(client)).json()["id"]
        clock.advance(20)
        body = (await get(client, job_id, "markdown_full", "markdown_full_content_metadata")).json()
    assert "markdown_full" not in body
    assert body["result_content_metadata"]["markdown_full"]["size_bytes"] > 10


async def test_storage_base_url_setting(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_storage_base_url="http://bucket.example:9000/") as client:
        job_id = (await create(client)).json()["id"]
        clock.advance(20)
        meta = (await get(client, job_id, "text_content_metadata")).json()["result_content_metadata"]
    assert meta["text"]["presigned_url"].startswith("http://bucket.example:9000/llamaparse-storage/")


async def test_cancel_and_its_refusal_on_terminal_jobs(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_refusal_status=409) as client:
        job_id = (await create(client)).json()["id"]
        canceled = await client.post(f"{PARSE}/{job_id}/cancel", headers=AUTH)
        assert canceled.status_code == 200 and canceled.json()["status"] == "CANCELLED"
        again = await client.post(f"{PARSE}/{job_id}/cancel", headers=AUTH)
        assert again.status_code == 409 and "detail" in again.json()
        clock.advance(20)
        assert (await get(client, job_id)).json()["job"]["status"] == "CANCELLED"
        assert (await client.post(f"{PARSE}/unknown/cancel", headers=AUTH)).status_code == 404


async def test_delete_only_terminal_then_404(client: httpx.AsyncClient, clock: ManualClock) -> None:
    job_id = (await create(client)).json()["id"]
    running = await client.delete(f"{PARSE}/{job_id}", headers=AUTH)
    assert running.status_code == 400
    clock.advance(20)
    url = (await get(client, job_id, "text_content_metadata")).json()["result_content_metadata"]["text"]
    deleted = await client.delete(f"{PARSE}/{job_id}", headers=AUTH)
    assert deleted.status_code == 200 and deleted.json()["id"] == job_id and "project_id" in deleted.json()
    assert (await get(client, job_id)).status_code == 404
    assert (await client.get(url["presigned_url"])).status_code == 404  # its results went with it


async def test_no_idempotency(client: httpx.AsyncClient) -> None:
    ids = {(await create(client)).json()["id"] for _ in range(3)}
    assert len(ids) == 3


async def test_submit_window_limit_with_and_without_retry_after(clock: ManualClock) -> None:
    for mode, has_header in (("always", True), ("never", False)):
        async with make_client(
            clock, llamaparse_window_limit=2, llamaparse_window_s=10, llamaparse_429_retry_after=mode
        ) as client:
            assert [(await create(client)).status_code for _ in range(2)] == [200, 200]
            clock.advance(4)
            limited = await upload(client, json.dumps({"tier": "fast", "version": "latest"}))
            assert limited.status_code == 429 and limited.json() == {"detail": "Too Many Requests"}
            assert ("retry-after" in limited.headers) is has_header
            if has_header:
                assert limited.headers["retry-after"] == "6"
            job_id = (await client.get(PARSE, headers=AUTH)).json()["items"][0]["id"]
            assert (await get(client, job_id)).status_code == 200  # polls are not limited
            clock.advance(6)
            assert (await create(client)).status_code == 200


async def test_credits_run_out_with_402(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_credits=1) as client:
        assert (await create(client)).status_code == 200
        assert (await create(client)).status_code == 200  # nothing is spent until a job finishes
        clock.advance(20)
        refused = await create(client)
        assert refused.status_code == 402 and "credits" in refused.json()["detail"]


async def test_list_jobs_by_status(client: httpx.AsyncClient, clock: ManualClock) -> None:
    first = (await create(client)).json()["id"]
    clock.advance(20)
    second = (await create(client)).json()["id"]
    listed = (await client.get(PARSE, headers=AUTH, params={"status": "PENDING"})).json()
    assert [j["id"] for j in listed["items"]] == [second] and listed["total_size"] == 1
    assert listed["next_page_token"] is None
    everything = (await client.get(PARSE, headers=AUTH)).json()
    assert {j["id"] for j in everything["items"]} == {first, second}


async def test_sim_routes_know_the_vendor(client: httpx.AsyncClient, clock: ManualClock) -> None:
    job_id = (await create(client)).json()["id"]
    clock.advance(3)
    await get(client, job_id)
    runs = (await client.get("/_sim/runs", params={"vendor": "llamaparse"})).json()["data"]
    assert [(r["id"], r["status"]) for r in runs] == [(job_id, "RUNNING")]
    assert (await client.get("/_sim/stats")).json()["llamaparse"] == {"RUNNING": 1}
    log = (await client.get("/_sim/requests", params={"vendor": "llamaparse"})).json()["data"]
    assert [(e["method"], e["path"], e["status"]) for e in log] == [
        ("POST", PARSE, 200),
        ("GET", f"{PARSE}/{job_id}", 200),
    ]


async def test_rps_bucket_answers_429_in_the_vendor_shape(clock: ManualClock) -> None:
    async with make_client(clock, llamaparse_rps=1, llamaparse_burst=1) as client:
        assert (await create(client)).status_code == 200
        limited = await create(client)
    assert limited.status_code == 429 and limited.json() == {"detail": "Too Many Requests"}


def test_knobs_from_the_environment_and_patch() -> None:
    config = SimulatorConfig.from_env(
        {
            "HOOKBRIDGE_SIM_LLAMAPARSE_ID_SHAPE": "both",
            "HOOKBRIDGE_SIM_LLAMAPARSE_CREDITS": "unlimited",
            "HOOKBRIDGE_SIM_LLAMAPARSE_FAILED_PAGES": "yes",
            "HOOKBRIDGE_SIM_LLAMAPARSE_WINDOW_LIMIT": "20",
            "HOOKBRIDGE_SIM_LLAMAPARSE_WINDOW_S": "60",
        }
    )
    assert (config.llamaparse_id_shape, config.llamaparse_credits) == ("both", None)
    assert config.llamaparse_failed_pages is True
    assert (config.llamaparse_window_limit, config.llamaparse_window_s) == (20, 60.0)
    patched = config.patched(
        {"llamaparse_credits": 5, "llamaparse_failed_pages": False, "llamaparse_burst": 2}
    )
    assert (patched.llamaparse_credits, patched.llamaparse_failed_pages, patched.llamaparse_burst) == (
        5.0,
        False,
        2,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"llamaparse_id_shape": "deep"},
        {"llamaparse_refusal_status": 500},
        {"llamaparse_refusal_status": "x"},
        {"llamaparse_failed_pages": 1},
        {"llamaparse_credits": -1},
        {"llamaparse_window_s": 0},
        {"llamaparse_api_key": ""},
    ],
)
def test_bad_knobs_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(changes))):
        SimulatorConfig().patched(changes)
