"""Whatever a vendor step raises ends in a bounded outcome, never a lease that comes back for ever.

The vendor answers here come from a scripted HTTP peer (httpx.MockTransport at the vendor boundary): the
simulator never refuses a cancel with 401/403/404 nor answers a poll with HTML. The worker, Redis, the
leases and the API are real. At 9efe3c0 each of these cases left the run in its due set, re-stepped every
``LEASE_S`` without end.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis.asyncio as aioredis

from service.store import keys
from tests.conftest import Clocked, ClockedFactory, Stack, StackFactory, eventually, store_client
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
    client = store_client(stack.redis_url)
    try:

        async def gone() -> bool:
            return await _nothing_left(client, run_id)

        await eventually(gone, timeout=timeout, what=f"{run_id} has nothing left to do")
    finally:
        await client.aclose()


async def _nothing_left(client: aioredis.Redis, run_id: str) -> bool:
    shard = keys.shard_of(run_id)
    due = await client.zscore(keys.due_runs("nutrient", shard), run_id)
    active = await client.sismember(keys.active_runs(shard), run_id)
    return due is None and not active


async def _submitted(c: Clocked) -> dict[str, Any]:
    run = await c.stack.submit("nutrient")
    await c.step()
    assert (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()["status"] == "submitted"
    return run


@pytest.mark.parametrize("status", [401, 403, 404, 400])
async def test_a_refused_cancel_ends_once(make_clocked: ClockedFactory, status: int) -> None:
    vendor = Nutrient(cancel_status=status)
    c = await make_clocked(httpx.MockTransport(vendor), **FAST)
    run = await _submitted(c)
    canceled = await c.stack.api.post(f"/v1/runs/{run['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    await c.step()
    # The clock has not moved past a lease: a lease loop would still hold it in the due set.
    assert await _nothing_left(c.worker.store.redis, run["id"])
    assert vendor.calls["cancel"] == 1
    await c.advance(3 * 9)  # three leases later: nothing comes back
    assert vendor.calls["cancel"] == 1
    assert (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()["status"] == "canceled"


async def test_a_cancel_that_keeps_failing_transiently_is_given_up_after_the_budget(
    make_clocked: ClockedFactory,
) -> None:
    vendor = Nutrient(cancel_status=502)
    c = await make_clocked(httpx.MockTransport(vendor), **FAST, HOOKBRIDGE_NUTRIENT_POLL_MAX_S="100ms")
    run = await _submitted(c)
    await c.stack.api.post(f"/v1/runs/{run['id']}/cancel")
    await c.step()
    assert vendor.calls["cancel"] == 1 and not await _nothing_left(c.worker.store.redis, run["id"])
    await c.advance(1)  # past the backoff (POLL_INITIAL_S doubled per attempt, 100 ms at most here)
    await c.advance(1)
    assert vendor.calls["cancel"] == 3  # VENDOR_MAX_TRANSIENT_FAILURES, then given up
    assert await _nothing_left(c.worker.store.redis, run["id"])
    await c.advance(3 * 9)
    assert vendor.calls["cancel"] == 3


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
    make_clocked: ClockedFactory, answer: httpx.Response
) -> None:
    vendor = Nutrient(poll_answer=answer)
    c = await make_clocked(httpx.MockTransport(vendor), **FAST)
    run = await _submitted(c)
    for _ in range(3):
        await c.advance(1)  # the next poll, or the backoff after a fault (POLL_MAX_S: 200 ms here)
    ended = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
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


async def test_a_poll_that_never_answers_is_cut_by_the_step_timeout(make_clocked: ClockedFactory) -> None:
    """The step's own timeout (twice VENDOR_TIMEOUT_S; service/worker/deadlines.py) ends a poll that the
    transport never times out (a MockTransport has no timeouts of its own): a transient fault each time."""
    answered = Nutrient()
    never = asyncio.Event()

    async def vendor(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/async"):
            return answered(request)
        answered.calls["poll"] += 1
        await never.wait()
        raise AssertionError("unreachable")

    c = await make_clocked(httpx.MockTransport(vendor), **FAST, HOOKBRIDGE_VENDOR_TIMEOUT_S="100ms")
    run = await _submitted(c)
    for _ in range(3):
        await c.advance(1)  # the next poll, or the backoff after a fault; each cut after 200 ms
    ended = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert ended["status"] == "failed", json.dumps(ended)
    assert ended["error"]["code"] == "vendor_unreachable"
    assert "TimeoutError" in ended["error"]["message"]
    assert answered.calls["poll"] == 3


async def test_a_poll_answer_past_the_cap_fails_the_run_at_once(make_clocked: ClockedFactory) -> None:
    """A poll answer longer than what hookbridge keeps of a result (MAX_DOCUMENT_BYTES and an envelope's room:
    Cloudsquid and Uptiq carry the result inline) is not read whole and not retried: the run fails,
    ``result_too_large``. (The read's cap on every path, with a real server: tests/integration/
    test_vendor_client.py.)"""
    huge = httpx.Response(200, json={"status": "processing", "pad": "x" * (200 * 1024)})
    vendor = Nutrient(poll_answer=huge)
    c = await make_clocked(httpx.MockTransport(vendor), **FAST, HOOKBRIDGE_MAX_DOCUMENT_BYTES="1024")
    run = await _submitted(c)
    await c.advance(3)  # past the first poll (2 s and its jitter)
    ended = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert ended["status"] == "failed", json.dumps(ended)
    assert ended["error"]["code"] == "result_too_large"
    assert "HOOKBRIDGE_MAX_DOCUMENT_BYTES" in ended["error"]["message"]
    assert vendor.calls["poll"] == 1
    assert await _nothing_left(c.worker.store.redis, run["id"])


# Issue 23 rows 5 and 9: vendor text is data, not trusted -----------------------------------------------

KEY = "sim-nutrient-key"  # the Nutrient key of the test settings (tests/conftest.py base_env)
ECHOES = [
    f"Authorization: Bearer {KEY}",
    quote(KEY, safe=""),
]
MEGABYTE = "x" * (1024 * 1024)


def _assert_clean(run: dict[str, Any], logged: str) -> None:
    seen = json.dumps(run)  # the record, its error, progress and trail: what the events and callbacks carry
    for secret in (KEY, base64.b64encode(KEY.encode()).decode(), quote(KEY, safe="")):
        assert secret not in seen
        assert secret not in logged
    assert len(run["error"]["message"]) <= 2048


class Echoing(Nutrient):
    """A Nutrient that echoes our key in its error text, with a megabyte of padding, on one path."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def __call__(self, request: httpx.Request) -> httpx.Response:
        echo = " ".join(ECHOES) + " " + base64.b64encode(f"{KEY}:".encode()).decode() + MEGABYTE
        if self.path == "submit" and request.url.path.endswith("/async"):
            self.calls["submit"] += 1
            return httpx.Response(400, json={"message": echo, "code": "invalid_request"})
        if self.path == "poll" and request.method == "GET":
            self.calls["poll"] += 1
            error = {"status": 422, "message": echo, "details": {"source": "engine", "echo": echo}}
            return httpx.Response(200, json={"id": "nr-1", "status": "error", "error": error})
        if self.path == "transient" and request.method == "GET":
            self.calls["poll"] += 1
            return httpx.Response(500, json={"message": echo})
        if self.path == "progress" and request.method == "GET":
            self.calls["poll"] += 1
            progress = {"phase": echo, "percent": 10}
            return httpx.Response(200, json={"id": "nr-1", "status": "running", "progress": progress})
        return super().__call__(request)


@pytest.mark.parametrize("path", ["submit", "poll", "transient", "progress"])
async def test_vendor_text_is_cut_and_scrubbed_on_every_path(
    make_clocked: ClockedFactory, capsys: pytest.CaptureFixture[str], path: str
) -> None:
    """A vendor echoing the Authorization header (and its base64, URL-encoded forms) with a megabyte of
    padding: neither the key nor the megabyte reaches the run, its trail, its events, Redis or a log line.
    At 9706972 the key was copied into run.error.message verbatim and the run record was 2 MiB."""
    c = await make_clocked(httpx.MockTransport(Echoing(path)), **FAST)
    run = await c.stack.submit("nutrient")
    for _ in range(4):
        await c.advance(1)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    if path != "progress":
        assert got["status"] == "failed", got["status"]
    else:
        got.setdefault("error", {"message": ""})
        got["error"] = got["error"] or {"message": ""}
    _assert_clean(got, capsys.readouterr().out)
    client = store_client(c.stack.redis_url)
    try:
        record = await client.get(keys.run(run["id"]))
    finally:
        await client.aclose()
    assert record is not None and len(record) < 64 * 1024  # was 2 MiB
    events = await c.stack.api.get("/v1/events", params={"run_id": run["id"]})
    assert events.status_code == 200 and run["id"] in events.text  # the feed holds the run's events
    assert KEY not in events.text and len(events.text) < 64 * 1024


async def test_a_refused_key_on_a_poll_ends_the_run_at_once(make_clocked: ClockedFactory) -> None:
    """Issue 24: a 401 on a Nutrient poll was retried ten times as transient."""
    vendor = Nutrient(poll_answer=httpx.Response(401, json={"message": "invalid API key"}))
    c = await make_clocked(httpx.MockTransport(vendor), **FAST)
    run = await _submitted(c)
    await c.advance(1)
    ended = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert ended["status"] == "failed" and ended["error"]["code"] == "vendor_rejected"
    assert vendor.calls["poll"] == 1
