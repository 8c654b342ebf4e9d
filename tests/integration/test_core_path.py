"""The core path over real parts: API → Redis → worker → simulator → signed callback → receiver."""

from __future__ import annotations

import pytest
from standardwebhooks import Webhook

from tests.conftest import Receiver, Stack, eventually


async def test_submitted_run_calls_back_with_a_verifiable_signature(stack: Stack, receiver: Receiver) -> None:
    sub = await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient", metadata={"order_id": "A-1001"})
    assert run["status"] == "queued"

    await eventually(lambda: _async(receiver.events("run.succeeded")), what="run.succeeded callback")
    delivered = next(r for r in receiver.received if r.json()["type"] == "run.succeeded")
    payload = Webhook(sub["secret"]).verify(delivered.body, delivered.headers)
    assert payload["data"]["run"]["id"] == run["id"]
    assert payload["data"]["run"]["status"] == "succeeded"
    assert payload["data"]["run"]["metadata"] == {"order_id": "A-1001"}
    assert payload["data"]["result"]["output"]["fields"]["invoice_number"].startswith("INV-")
    assert delivered.headers["webhook-id"].startswith("evt_")
    assert delivered.headers["user-agent"].startswith("hookbridge/")

    final = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["status"] == "succeeded" and final["completed_at"] and final["polls"] >= 1
    result = await stack.api.get(f"/v1/runs/{run['id']}/result")
    assert result.status_code == 200 and result.json() == payload["data"]["result"]
    events = (await stack.api.get(f"/v1/runs/{run['id']}/events")).json()["data"]
    types = [e["type"] for e in events]
    assert types[0] == "run.submitted" and types[-1] == "run.succeeded"
    assert set(types[1:-1]) <= {"run.progress"}


async def test_a_failed_delivery_is_retried_with_the_same_webhook_id(
    stack: Stack, receiver: Receiver
) -> None:
    receiver.answers = [500]
    sub = await stack.subscribe(receiver.url)
    await stack.submit("nutrient")

    await eventually(lambda: _async(len(receiver.received) >= 2), what="a retry")
    first, second = receiver.received[:2]
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.body == second.body
    Webhook(sub["secret"]).verify(second.body, second.headers)

    deliveries = (await stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    assert deliveries[0]["status"] == "succeeded" and deliveries[0]["attempts"] == 2
    detail = (await stack.api.get(f"/v1/deliveries/{deliveries[0]['id']}")).json()
    assert [a["status_code"] for a in detail["attempt_log"]] == [500, 204]


@pytest.mark.parametrize("filename", ["fail-me.pdf"])
async def test_vendor_failure_reaches_failed_with_the_vendor_message(
    stack: Stack, receiver: Receiver, filename: str
) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient", filename=filename)
    final = await stack.wait_status(run["id"], "failed")
    assert final["error"]["code"] == "vendor_failed"
    assert "unreadable" in final["error"]["message"]
    await eventually(lambda: _async(receiver.events("run.failed")), what="run.failed callback")


async def _async(value: object) -> object:
    return value
