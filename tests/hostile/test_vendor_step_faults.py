"""Whatever a vendor step raises ends in a bounded outcome, never a lease that comes back for ever.

The vendor answers here come from a scripted HTTP peer (httpx.MockTransport at the vendor boundary): the
simulator never refuses a cancel with 401/403/404 nor answers a poll with HTML. The worker, Redis, the
leases and the API are real. At 9efe3c0 each of these cases left the run in its due set, re-stepped every
``LEASE_S`` without end.
"""

from __future__ import annotations

import itertools
import json

import httpx
import pytest
import redis.asyncio as aioredis

from service.store import keys
from tests.conftest import Stack, StackFactory, eventually
from tests.hostile._store_helpers import scripted_worker

FAST = {"HOOKBRIDGE_LEASE_S": "9", "HOOKBRIDGE_VENDOR_MAX_TRANSIENT_FAILURES": "3"}


class Nutrient:
    """A scripted Nutrient: submit accepted, polls ``processing`` (or ``poll_answer``), cancel answered
    ``cancel_status``. Counts what it was asked."""

    def __init__(self, *, cancel_status: int = 200, poll_answer: httpx.Response | None = None) -> None:
        self.cancel_status = cancel_status
        self.poll_answer = poll_answer
        self.calls: dict[str, int] = {"submit": 0, "poll": 0, "cancel": 0}
        self._ids = itertools.count(1)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/async"):
            self.calls["submit"] += 1
            return httpx.Response(200, json={"id": f"nr-{next(self._ids)}", "status": "queued"})
        if path.endswith("/cancel"):
            self.calls["cancel"] += 1
            return httpx.Response(self.cancel_status, json={"message": "no such run", "code": "not_found"})
        self.calls["poll"] += 1
        if self.poll_answer is not None:
            return self.poll_answer
        return httpx.Response(200, json={"id": path.rsplit("/", 1)[-1], "status": "processing"})


async def _leaves_due_set(stack: Stack, run_id: str, timeout: float) -> None:
    client = aioredis.from_url(stack.redis_url)
    try:

        async def gone() -> bool:
            due = await client.zscore(keys.due_runs("nutrient"), run_id)
            active = await client.sismember(keys.ACTIVE_RUNS, run_id)
            return due is None and not active

        await eventually(gone, timeout=timeout, what=f"{run_id} has nothing left to do")
    finally:
        await client.aclose()


@pytest.mark.parametrize("status", [401, 403, 404, 400])
async def test_a_refused_cancel_ends_once(make_stack: StackFactory, status: int) -> None:
    stack = await make_stack(worker=False, **FAST)
    vendor = Nutrient(cancel_status=status)
    async with scripted_worker(stack.settings, vendor):
        run = await stack.submit("nutrient")
        await stack.wait_status(run["id"], "submitted", "running")
        canceled = await stack.api.post(f"/v1/runs/{run['id']}/cancel")
        assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
        # Well inside one lease: a lease loop would still hold it in the due set.
        await _leaves_due_set(stack, run["id"], timeout=6)
        assert vendor.calls["cancel"] == 1
    assert (await stack.api.get(f"/v1/runs/{run['id']}")).json()["status"] == "canceled"


async def test_a_cancel_that_keeps_failing_transiently_is_given_up_after_the_budget(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(worker=False, **FAST, HOOKBRIDGE_NUTRIENT_POLL_MAX_S="100ms")
    vendor = Nutrient(cancel_status=502)
    async with scripted_worker(stack.settings, vendor):
        run = await stack.submit("nutrient")
        await stack.wait_status(run["id"], "submitted", "running")
        await stack.api.post(f"/v1/runs/{run['id']}/cancel")
        await _leaves_due_set(stack, run["id"], timeout=8)
        assert vendor.calls["cancel"] == 3  # VENDOR_MAX_TRANSIENT_FAILURES, then given up


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, text="<html>maintenance</html>", headers={"content-type": "text/html"}),
        httpx.Response(200, json=["not", "an", "object"]),
        httpx.Response(200, json="a string"),
        httpx.Response(200, content=b"\xff\xfe\x00garbage", headers={"content-type": "application/json"}),
    ],
    ids=["html", "json-list", "json-string", "bytes"],
)
async def test_a_poll_answer_we_cannot_read_is_a_transient_fault(
    make_stack: StackFactory, answer: httpx.Response
) -> None:
    stack = await make_stack(worker=False, **FAST)
    vendor = Nutrient(poll_answer=answer)
    async with scripted_worker(stack.settings, vendor):
        run = await stack.submit("nutrient")
        ended = await stack.wait_status(run["id"], "failed", "succeeded", timeout=15)
    assert ended["status"] == "failed", json.dumps(ended)
    assert ended["error"]["code"] == "vendor_unreachable"
    assert "3 transient faults" in ended["error"]["message"]
    assert vendor.calls["poll"] == 3


async def test_a_submit_that_raises_something_unexpected_ends_bounded(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, **FAST)

    def vendor(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("a bug in a transport layer")  # not an httpx.TransportError

    async with scripted_worker(stack.settings, vendor):
        run = await stack.submit("nutrient")
        ended = await stack.wait_status(run["id"], "failed", timeout=15)
    assert ended["error"]["code"] == "vendor_unreachable"
