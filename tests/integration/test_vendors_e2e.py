"""Every vendor end to end through the API: API → Redis → worker → adapter → simulator → signed callback."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from tests.conftest import Receiver, Stack, StackFactory, eventually

VENDORS = ["nutrient", "cloudsquid", "uptiq"]
# What each simulated vendor reports once its run is over, as GET /_sim/stats counts it.
VENDOR_DONE = {"nutrient": "done", "cloudsquid": "done", "uptiq": "Processed"}


def fields_of(vendor: str, result: dict[str, Any]) -> dict[str, Any]:
    """Where each vendor puts the extracted fields in its result."""
    if vendor == "nutrient":
        return dict(result["output"]["fields"])
    if vendor == "uptiq":
        return dict(result["extractedData"])
    return result  # Cloudsquid: the DataRow's data object itself


def sent_bytes(filename: str) -> bytes:
    return b"%PDF-1.4 test " + filename.encode()  # what Stack.submit sends


async def callbacks(receiver: Receiver, event_type: str, run_id: str) -> list[Any]:
    return [r for r in receiver.received if r.json()["type"] == event_type and _run_id(r.json()) == run_id]


def _run_id(event: dict[str, Any]) -> str:
    return str(event["data"]["run"]["id"])


async def sim_stats(stack: Stack, vendor: str) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        stats: dict[str, int] = (await sim.get("/_sim/stats")).json()[vendor]
    return stats


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_run_succeeds_with_a_verified_callback_carrying_the_result(
    stack: Stack, receiver: Receiver, vendor: str
) -> None:
    sub = await stack.subscribe(receiver.url)
    run = await stack.submit(vendor, filename="statement.pdf", metadata={"ref": vendor})

    delivered = (
        await eventually(lambda: callbacks(receiver, "run.succeeded", run["id"]), what="run.succeeded")
    )[0]
    payload = Webhook(sub["secret"]).verify(delivered.body, delivered.headers)
    assert payload["data"]["run"]["vendor"] == vendor and payload["data"]["run"]["status"] == "succeeded"
    assert payload["data"]["run"]["metadata"] == {"ref": vendor}
    fields = fields_of(vendor, payload["data"]["result"])
    assert fields["sha256"] == hashlib.sha256(sent_bytes("statement.pdf")).hexdigest()
    assert fields["invoice_number"].startswith("INV-")

    final = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["vendor_run_id"] and final["vendor_status"] == VENDOR_DONE[vendor]
    stored = await stack.api.get(f"/v1/runs/{run['id']}/result")
    assert stored.status_code == 200 and stored.json() == payload["data"]["result"]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_vendor_failure_reaches_failed_with_the_vendor_message(
    stack: Stack, receiver: Receiver, vendor: str
) -> None:
    sub = await stack.subscribe(receiver.url)
    run = await stack.submit(vendor, filename="fail-smudged.pdf")

    final = await stack.wait_status(run["id"], "failed")
    assert final["error"]["code"] == "vendor_failed"
    assert "simulated failure: unreadable document" in final["error"]["message"]
    if vendor == "uptiq":
        assert "documentQuality" in final["error"]["message"]
    delivered = (await eventually(lambda: callbacks(receiver, "run.failed", run["id"]), what="run.failed"))[0]
    payload = Webhook(sub["secret"]).verify(delivered.body, delivered.headers)
    assert payload["data"]["run"]["error"] == final["error"]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_canceled_run_never_calls_back_succeeded(
    stack: Stack, receiver: Receiver, vendor: str
) -> None:
    await stack.subscribe(receiver.url)
    # slow-: the vendor takes 1-3 s, long enough to cancel while it works, short enough to outwait.
    run = await stack.submit(vendor, filename="slow-contract.pdf")
    await stack.wait_status(run["id"], "submitted", "running")
    canceled = await stack.api.post(f"/v1/runs/{run['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    await eventually(lambda: callbacks(receiver, "run.canceled", run["id"]), what="run.canceled")

    # Outwait the vendor: Nutrient is told and cancels; the others, which cannot cancel, finish anyway.
    expected = {"canceled": 1} if vendor == "nutrient" else {VENDOR_DONE[vendor]: 1}

    async def vendor_over() -> bool:
        return await sim_stats(stack, vendor) == expected

    await eventually(vendor_over, what=f"the {vendor} run to be over at the vendor")
    # A later run of the same vendor calls back: the worker has had every chance to misreport the first.
    later = await stack.submit(vendor, filename="later.pdf")
    await eventually(
        lambda: callbacks(receiver, "run.succeeded", later["id"]), what="the later run.succeeded"
    )

    assert await callbacks(receiver, "run.succeeded", run["id"]) == []
    final = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["status"] == "canceled" and final["error"] is None


@pytest.mark.parametrize("vendor", VENDORS)
async def test_max_run_s_ends_a_stuck_run_timed_out(
    make_stack: StackFactory, receiver: Receiver, vendor: str
) -> None:
    stack = await make_stack(**{f"HOOKBRIDGE_{vendor.upper()}_MAX_RUN_S": "1"})
    await stack.subscribe(receiver.url)
    run = await stack.submit(vendor, filename="stuck-forever.pdf")

    final = await stack.wait_status(run["id"], "failed", timeout=15)
    assert final["error"]["code"] == "timed_out"
    assert f"HOOKBRIDGE_{vendor.upper()}_MAX_RUN_S" in final["error"]["message"]
    await eventually(lambda: callbacks(receiver, "run.failed", run["id"]), what="run.failed")
    if vendor == "nutrient":  # the one vendor that can be told to stop
        await eventually(
            lambda: _equal(sim_stats(stack, vendor), {"canceled": 1}), what="the vendor run canceled"
        )


async def _equal(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
