"""LlamaParse through the real API and worker against ``hookbridge simulator``'s LlamaParse: the run's
options as the API checks them, its result as the client gets it, its usage, and zero retention."""

from __future__ import annotations

import base64
import logging
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from service.testing import Receiver, Stack, StackFactory, eventually

pytestmark = pytest.mark.asyncio


def body(filename: str = "invoice.pdf", **fields: Any) -> dict[str, Any]:
    content = base64.b64encode(b"%PDF-1.4 " + filename.encode()).decode()
    return {
        "vendor": "llamaparse",
        "operation": "parse",
        "document": {"content_base64": content, "filename": filename, "media_type": "application/pdf"},
        "options": {"tier": "agentic"},
        **fields,
    }


async def submit(stack: Stack, **fields: Any) -> dict[str, Any]:
    response = await stack.api.post("/v1/runs", json=body(**fields))
    assert response.status_code == 202, response.text
    return dict(response.json())


async def sim_log(stack: Stack) -> list[tuple[str, str, int | None]]:
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        entries = (await sim.get("/_sim/requests", params={"vendor": "llamaparse"})).json()["data"]
    return [(e["method"], e["path"], e["status"]) for e in entries]


async def sim_patch(stack: Stack, **changes: Any) -> None:
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        (await sim.patch("/_sim/config", json=changes)).raise_for_status()


async def test_a_parse_by_upload_and_one_by_url_are_called_back_with_the_job_and_its_parts(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack()
    await stack.subscribe(receiver.url)
    by_bytes = await submit(stack)
    by_url = await submit(
        stack, document={"url": "https://docs.example/statement.pdf", "media_type": "application/pdf"}
    )
    for run in (by_bytes, by_url):
        done = await stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done
        assert done["usage"]["credits"] > 0, done  # the job's usage.credits

        async def called_back(run_id: str = run["id"]) -> list[dict[str, Any]]:
            return [e for e in receiver.events("run.succeeded") if e["data"]["run"]["id"] == run_id]

        event = (await eventually(called_back, what="run.succeeded"))[0]
        result = event["data"]["result"]
        assert set(result) == {"job", "text", "markdown", "items"}
        assert result["job"]["id"] == done["vendor_run_id"] and result["job"]["status"] == "COMPLETED"
    posts = [p for m, p, _ in await sim_log(stack) if m == "POST"]
    assert sorted(posts) == ["/llamaparse/api/v2/parse", "/llamaparse/api/v2/parse/upload"]  # either order


@pytest.mark.parametrize(
    ("options", "pointer"),
    [
        ({}, "/options/tier"),
        ({"tier": "premium"}, "/options/tier"),
        ({"tier": "fast", "version": "newest"}, "/options/version"),
        ({"tier": "fast", "source_url": "https://x.example/a.pdf"}, "/options"),
    ],
)
async def test_options_are_checked_at_submit(
    make_stack: StackFactory, options: dict[str, Any], pointer: str
) -> None:
    stack = await make_stack(worker=False)
    response = await stack.api.post("/v1/runs", json={**body(), "options": options})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["code"] == "validation_error"
    assert pointer in [e["pointer"] for e in problem["errors"]], problem


async def test_failed_and_out_of_credits(make_stack: StackFactory) -> None:
    stack = await make_stack()
    failed = await stack.wait_status((await submit(stack, document=_doc("will-fail.pdf")))["id"], "failed")
    assert failed["error"]["code"] == "vendor_failed"
    assert failed["error"]["message"] == "simulated failure: unreadable document"
    await sim_patch(stack, llamaparse_credits=0)
    refused = await stack.wait_status((await submit(stack))["id"], "failed")
    assert refused["error"]["code"] == "vendor_rejected", refused
    assert "credits" in refused["error"]["message"]


async def test_zero_retention_deletes_the_job_after_its_result_is_fetched(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack()
    await stack.subscribe(receiver.url)
    run = await submit(stack, zero_retention=True)

    async def deleted() -> dict[str, Any] | None:
        got: dict[str, Any] = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        return got if got["vendor_deleted"] else None

    final = await eventually(deleted, what="vendor_deleted")
    assert final["status"] == "succeeded" and final["vendor_delete_error"] is None
    job = final["vendor_run_id"]
    requests = await sim_log(stack)
    assert [r for r in requests if r[0] == "DELETE"] == [("DELETE", f"/llamaparse/api/v2/parse/{job}", 200)]
    last_get = max(i for i, r in enumerate(requests) if r[0] == "GET")
    assert requests.index(("DELETE", f"/llamaparse/api/v2/parse/{job}", 200)) > last_get


async def test_zero_retention_without_a_delete_route_says_not_deleted(make_stack: StackFactory) -> None:
    stack = await make_stack()
    await sim_patch(stack, llamaparse_delete="405")
    run = await submit(stack, zero_retention=True)

    async def given_up() -> dict[str, Any] | None:
        got: dict[str, Any] = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        return got if got["vendor_delete_error"] else None

    final = await eventually(given_up, what="vendor_delete_error", timeout=30)
    assert final["status"] == "succeeded" and final["vendor_deleted"] is False
    assert "not deleted: HTTP 405" in final["vendor_delete_error"], final


@pytest.mark.parametrize(("reading", "slower"), [("always", True), ("never", False)])
async def test_retry_after_on_the_create_answer_sets_the_first_poll(
    make_stack: StackFactory, reading: str, slower: bool
) -> None:
    """Retry-After on a create or poll answer is undocumented (§4.4): where it comes, the worker asks
    again no sooner (here 2 s, with POLL_INITIAL_S 50 ms); where it does not, the poll schedule's own."""
    stack = await make_stack(HOOKBRIDGE_LLAMAPARSE_PAUSE_MAX_S="5s")
    await sim_patch(stack, llamaparse_retry_after=reading, llamaparse_retry_after_s=2)
    run = await submit(stack)
    await stack.wait_status(run["id"], "succeeded")
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        entries = (await sim.get("/_sim/requests", params={"vendor": "llamaparse"})).json()["data"]
    (posted,) = [e["t"] for e in entries if e["method"] == "POST"]
    first_poll = min(e["t"] for e in entries if e["method"] == "GET")
    assert (first_poll - posted >= 1.9) is slower, first_poll - posted


async def test_a_run_logs_neither_the_key_nor_a_presigned_url(
    make_stack: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The key (our Authorization) and the presigned URLs' signatures (a credential of their own) reach
    no log line, even at debug level, through a success by URL, a failure and presigned downloads."""
    caplog.set_level(logging.DEBUG)
    with capture_logs() as entries:
        stack = await make_stack(HOOKBRIDGE_LOG_LEVEL="debug")
        await sim_patch(stack, llamaparse_inline_max_bytes=1)  # every part from its presigned URL
        runs = [await submit(stack), await submit(stack, document=_doc("will-fail.pdf"))]
        for run in runs:
            await stack.wait_status(run["id"], "succeeded", "failed")
    text = "\n".join(repr(e) for e in entries) + "\n" + caplog.text
    assert any(e.get("event") == "run finished" for e in entries)  # the capture saw the runs
    key = stack.settings.vendor("llamaparse").api_key
    assert key and key not in text
    assert "X-Signature" not in text and "llamaparse-storage" not in text
    assert [p for _, p, _ in await sim_log(stack) if p.startswith("/llamaparse-storage/")]


def _doc(filename: str) -> dict[str, str]:
    return {
        "content_base64": base64.b64encode(b"%PDF-1.4 " + filename.encode()).decode(),
        "filename": filename,
        "media_type": "application/pdf",
    }
