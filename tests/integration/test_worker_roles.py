"""WORKER_ROLE splits vendor steps and callback deliveries over separate worker processes."""

from __future__ import annotations

from tests.conftest import Receiver, StackFactory, eventually


async def test_a_runs_worker_and_a_deliveries_worker_together_finish_and_call_back(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    runs_only = await make_stack(HOOKBRIDGE_WORKER_ROLE="runs")
    sub = await runs_only.subscribe(receiver.url)
    run = await runs_only.submit("nutrient")
    await runs_only.wait_status(run["id"], "succeeded")
    # The run is done, but nobody delivers: the callback waits for a worker that does.
    [delivery] = (await runs_only.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    assert delivery["status"] == "pending" and receiver.received == []

    await make_stack(HOOKBRIDGE_WORKER_ROLE="deliveries")
    await eventually(lambda: _value(receiver.events("run.succeeded")), what="the deliveries worker sent it")


async def _value(value: object) -> object:
    return value
