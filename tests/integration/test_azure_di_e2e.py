"""azure_di end to end: API → Redis → worker → adapter → simulated Azure AI Document Intelligence → signed
callback, each documented rule of next-vendors.md §1 seen on the wire (the simulator's request log)."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from service.simulator import SimulatorConfig
from tests.conftest import Receiver, Stack, StackFactory, eventually

OPTIONS = {"model_id": "prebuilt-invoice"}


@pytest.fixture
def sim_config() -> SimulatorConfig:
    # The documented floor stays on (2 s between two polls of one operation: 429 otherwise), so a run whose
    # polls come closer shows as a 429 in the log.
    return SimulatorConfig(duration_s=(0.1, 0.3), seed=7, azure_di_retry_after="never")


async def sim_log(stack: Stack) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        entries: list[dict[str, Any]] = (
            await sim.get("/_sim/requests", params={"vendor": "azure_di"})
        ).json()["data"]
    return entries


async def sim_patch(stack: Stack, **changes: Any) -> None:
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        (await sim.patch("/_sim/config", json=changes)).raise_for_status()


async def callback(receiver: Receiver, event_type: str, run_id: str) -> Any:
    async def found() -> Any:
        hits = [r for r in receiver.received if r.json()["type"] == event_type]
        return next((r for r in hits if r.json()["data"]["run"]["id"] == run_id), None)

    return await eventually(found, what=event_type, timeout=30)


def polls_of(log: list[dict[str, Any]], result_id: str) -> list[dict[str, Any]]:
    return [e for e in log if e["method"] == "GET" and e["path"].endswith(result_id)]


async def test_a_run_succeeds_with_the_analyze_result_in_a_verified_callback(
    stack: Stack, receiver: Receiver
) -> None:
    sub = await stack.subscribe(receiver.url)
    run = await stack.submit("azure_di", filename="invoice.pdf", options=OPTIONS, metadata={"ref": "a"})
    delivered = await callback(receiver, "run.succeeded", run["id"])
    payload = Webhook(sub["secret"]).verify(delivered.body, delivered.headers)
    result = payload["data"]["result"]
    # "The result is inline in the poll response, as analyzeResult" (§1.5): the run's result is it.
    assert result["apiVersion"] == "2024-11-30" and result["modelId"] == "prebuilt-invoice"
    digest = hashlib.sha256(b"%PDF-1.4 test invoice.pdf").hexdigest()
    assert result["documents"][0]["fields"]["InvoiceId"]["valueString"] == f"INV-{digest[:6]}"
    final = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["vendor_status"] == "succeeded" and final["status"] == "succeeded"
    stored = await stack.api.get(f"/v1/runs/{run['id']}/result")
    assert stored.status_code == 200 and stored.json() == result

    log = await sim_log(stack)
    submit = log[0]
    # Raw bytes with the document's media type, the options as the query (§1.2).
    assert (submit["method"], submit["status"]) == ("POST", 202)
    assert submit["path"] == "/documentintelligence/documentModels/prebuilt-invoice:analyze"
    polls = polls_of(log, final["vendor_run_id"])
    # Polled exactly the Operation-Location (§1.9), never sooner than 2 s apart (§1.4): no 429 met.
    assert polls and all(e["status"] == 200 for e in polls)
    gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(polls)]
    assert all(gap >= 2.0 for gap in gaps), gaps
    assert polls[0]["t"] - submit["t"] >= 2.0


async def test_a_failed_analysis_fails_the_run_with_the_vendor_error(
    stack: Stack, receiver: Receiver
) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit("azure_di", filename="fail-blurred.pdf", options=OPTIONS)
    final = await stack.wait_status(run["id"], "failed", timeout=30)
    # "A failed analysis is HTTP 200 with status failed and an error object" (§1.4).
    assert final["error"]["code"] == "vendor_failed" and final["vendor_status"] == "failed"
    assert "InvalidRequest" in final["error"]["message"]
    assert final["error"]["details"]["details"][0]["target"] == "1"
    await callback(receiver, "run.failed", run["id"])


async def test_a_refused_document_is_vendor_rejected(stack: Stack) -> None:
    run = await stack.submit("azure_di", filename="reject-this.pdf", options=OPTIONS)
    final = await stack.wait_status(run["id"], "failed", timeout=30)
    assert final["error"]["code"] == "vendor_rejected", final
    assert "InvalidContent" in final["error"]["message"]
    assert [e["method"] for e in await sim_log(stack)] == ["POST"]


async def test_zero_retention_deletes_the_result_and_confirms_it(stack: Stack, receiver: Receiver) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit("azure_di", filename="private.pdf", options=OPTIONS, zero_retention=True)
    await callback(receiver, "run.succeeded", run["id"])

    async def deleted() -> dict[str, Any] | None:
        current: dict[str, Any] = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        return current if current["vendor_deleted"] is True else None

    final = await eventually(deleted, what="vendor_deleted", timeout=30)
    log = await sim_log(stack)
    # "DELETE .../analyzeResults/{resultId} → 204" (§1.5), on the operation's own URL, after its result.
    deletes = [e for e in log if e["method"] == "DELETE"]
    assert [(e["path"].rsplit("/", 1)[-1], e["status"]) for e in deletes] == [(final["vendor_run_id"], 204)]
    assert log.index(deletes[0]) > max(i for i, e in enumerate(log) if e["method"] == "GET")
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        gone = await sim.get(
            deletes[0]["path"],
            params={"api-version": "2024-11-30"},
            headers={"Ocp-Apim-Subscription-Key": "sim-azure-di-key"},
        )
    assert gone.status_code == 404


async def test_retry_after_sets_the_next_poll(make_stack: StackFactory, stack: Stack) -> None:
    # Retry-After: 4 on the 202 and on unfinished polls (one reading of §1.3/§1.4): the first poll waits 4 s.
    await sim_patch(stack, azure_di_retry_after="always", azure_di_retry_after_s=4, azure_di_running_polls=1)
    run = await stack.submit("azure_di", filename="later.pdf", options=OPTIONS)
    final = await stack.wait_status(run["id"], "succeeded", timeout=40)
    log = await sim_log(stack)
    polls = polls_of(log, final["vendor_run_id"])
    assert [e["status"] for e in polls] == [200, 200]
    assert polls[0]["t"] - log[0]["t"] >= 4.0
    assert polls[1]["t"] - polls[0]["t"] >= 4.0


async def test_an_unknown_status_is_running_until_max_run_s(make_stack: StackFactory) -> None:
    stack = await make_stack(HOOKBRIDGE_AZURE_DI_MAX_RUN_S="5s")
    # "future values can appear [inference: treat unknown values as non-terminal]" (§1.4)
    await sim_patch(stack, azure_di_unknown_status="skipped")
    run = await stack.submit("azure_di", filename="odd.pdf", options=OPTIONS)
    final = await stack.wait_status(run["id"], "failed", timeout=30)
    assert final["error"]["code"] == "timed_out" and final["vendor_status"] == "skipped"
    assert final["polls"] >= 1


async def test_an_unconfigured_key_is_refused_at_the_vendor_as_rejected(make_stack: StackFactory) -> None:
    stack = await make_stack(HOOKBRIDGE_AZURE_DI_API_KEY="k-3f9a7c")
    run = await stack.submit("azure_di", filename="a.pdf", options=OPTIONS)
    final = await stack.wait_status(run["id"], "failed", timeout=30)
    assert final["error"]["code"] == "vendor_rejected"
    assert "invalid subscription key" in final["error"]["message"]
    # The key never reaches a run record, a log line or an error.
    assert "k-3f9a7c" not in str(final)


@pytest.mark.parametrize(("reading", "deleted"), [("allow", True), ("409", False)])
async def test_zero_retention_of_a_run_that_ended_here_while_azure_works(
    make_stack: StackFactory, reading: str, deleted: bool
) -> None:
    # A DELETE of an unfinished operation: the spec does not rule (the simulator plays 204 or 409). A
    # deletion is reported only when confirmed (contract §10): under 409 the run says "not deleted".
    stack = await make_stack(HOOKBRIDGE_AZURE_DI_MAX_RUN_S="3s")
    await sim_patch(stack, azure_di_delete_unfinished=reading)
    run = await stack.submit("azure_di", filename="stuck-private.pdf", options=OPTIONS, zero_retention=True)

    async def told() -> dict[str, Any] | None:
        current: dict[str, Any] = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        settled = current["vendor_deleted"] is True or current["vendor_delete_error"]
        return current if current["status"] == "failed" and settled else None

    final = await eventually(told, what="the delete's outcome", timeout=40)
    assert final["error"]["code"] == "timed_out"
    assert final["vendor_deleted"] is deleted
    if not deleted:
        assert "not deleted: HTTP 409" in final["vendor_delete_error"]
    deletes = [e["status"] for e in await sim_log(stack) if e["method"] == "DELETE"]
    assert deletes[-1] == (204 if deleted else 409)


async def test_a_large_result_is_read_past_memory_and_served(stack: Stack, receiver: Receiver) -> None:
    # "max OCR JSON response 500 MB" (§1.5): a 6 MB analyzeResult goes past the adapter's 4 MiB read
    # buffer on to a file, is cut out of the answer there, and is kept and served as the run's result.
    await stack.subscribe(receiver.url)
    await sim_patch(stack, azure_di_result_pad_bytes=6_000_000)
    run = await stack.submit("azure_di", filename="thick.pdf", options=OPTIONS)
    delivered = await callback(receiver, "run.succeeded", run["id"])
    event = delivered.json()
    assert event["data"].get("result") is None and event["data"]["result_url"].endswith("/result")
    stored = await stack.api.get(f"/v1/runs/{run['id']}/result")
    assert stored.status_code == 200 and len(stored.content) > 6_000_000
    result = stored.json()
    assert result["modelId"] == "prebuilt-invoice" and result["paragraphs"][-1]["content"].startswith("lorem")


async def test_a_result_past_what_is_kept_fails_result_too_large(make_stack: StackFactory) -> None:
    # Past what the store keeps whole, the adapter hands over a ResultFile, which this version's worker
    # does not keep (protocol v2): the run fails result_too_large, the file removed.
    stack = await make_stack(HOOKBRIDGE_MAX_DOCUMENT_BYTES="5000000")
    await sim_patch(stack, azure_di_result_pad_bytes=6_000_000)
    run = await stack.submit("azure_di", filename="thicker.pdf", options=OPTIONS)
    final = await stack.wait_status(run["id"], "failed", timeout=40)
    assert final["error"]["code"] == "result_too_large", final
