"""The event feed and its streams over HTTP: ``GET /v1/events`` (iterator, filters, long-poll, 410),
``GET /v1/events/stream`` and ``GET /v1/runs/{id}/stream`` read by a real HTTP client (httpx streaming),
against the real stack (Redis, the simulator, a worker)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.conftest import ALICE, Stack, StackFactory, eventually

TERMINAL = ("run.succeeded", "run.failed", "run.canceled")


async def _feed(stack: Stack, **params: Any) -> httpx.Response:
    return await stack.api.get("/v1/events", params=params)


async def _all(stack: Stack, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    iterator = None
    while True:
        page = (await _feed(stack, **params, **({"iterator": iterator} if iterator else {}))).json()
        out += page["data"]
        iterator = page["iterator"]
        if page["done"]:
            return out


async def _sse(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Yields each event ({id, event, data}) and each comment ({comment}) of a text/event-stream."""
    frame: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if line == "":
            if frame:
                yield frame
            frame = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(": ")
            frame[name] = json.loads(value) if name == "data" else value


async def test_the_feed_lists_a_runs_events_in_order_as_the_callbacks_carry_them(stack: Stack) -> None:
    run = await stack.submit("nutrient")
    await stack.wait_status(run["id"], "succeeded")
    emitted = (await stack.api.get(f"/v1/runs/{run['id']}/events")).json()["data"]
    feed = await _all(stack)
    # Progress that no subscription asked for is kept in the feed only (this client has none).
    assert [e["event_id"] for e in feed if e["type"] != "run.progress"] == [e["id"] for e in emitted]
    assert {"run.submitted", "run.succeeded"} <= {e["type"] for e in feed}  # progress: if the poll saw it
    assert feed[-1]["type"] == "run.succeeded" and feed[-1]["data"]["run"]["id"] == run["id"]
    assert set(feed[0]) == {"id", "event_id", "type", "timestamp", "data"}
    assert feed[0]["data"] == emitted[0]["data"] and feed[0]["timestamp"] == emitted[0]["created_at"]
    assert len({e["id"] for e in feed}) == len(feed)
    # Filters, and another client sees none of it.
    assert [e["type"] for e in await _all(stack, type="run.succeeded")] == ["run.succeeded"]
    assert len(await _all(stack, type="run.*", run_id=run["id"], vendor="nutrient")) == len(feed)
    assert await _all(stack, vendor="uptiq") == []
    assert (await stack.bob.get("/v1/events")).json()["data"] == []
    # Paging: limit 1 hands out one event per page, each page's iterator leads to the next.
    first = (await _feed(stack, limit=1)).json()
    assert [e["id"] for e in first["data"]] == [feed[0]["id"]] and not first["done"]
    second = (await _feed(stack, limit=1, iterator=first["iterator"])).json()
    assert [e["id"] for e in second["data"]] == [feed[1]["id"]]


async def test_a_long_poll_returns_as_soon_as_an_event_arrives(stack: Stack) -> None:
    start = (await _feed(stack)).json()
    assert start["data"] == [] and start["done"]
    # Whether the long-poll is already waiting when the event comes or reads it first, it returns with it.
    poll = asyncio.create_task(_feed(stack, iterator=start["iterator"], wait=25, type="run.submitted"))
    run = await stack.submit("nutrient")
    answer = (await asyncio.wait_for(poll, 20)).json()
    assert [(e["type"], e["data"]["run"]["id"]) for e in answer["data"]] == [("run.submitted", run["id"])]
    # A long-poll with nothing to find gives back an iterator that leads on, without events.
    quiet = (await _feed(stack, iterator=answer["iterator"], wait=0.3, vendor="uptiq")).json()
    assert quiet["data"] == [] and quiet["done"]


async def test_hostile_feed_inputs_are_clear_problems(stack: Stack) -> None:
    cases = [
        ({"iterator": "abc"}, 422, "invalid_iterator"),
        ({"iterator": "1-2-3"}, 422, "invalid_iterator"),
        ({"iterator": "99999999999999999999999-0"}, 422, "invalid_iterator"),
        ({"iterator": "9999999999999-0"}, 422, "invalid_iterator"),  # in the future
        ({"wait": "31"}, 422, "validation_error"),
        ({"wait": "nan"}, 422, "validation_error"),
        ({"wait": "-1"}, 422, "validation_error"),
        ({"limit": "100000"}, 422, "validation_error"),
        ({"type": "run.nope"}, 422, "validation_error"),
        ({"run_id": "../../etc"}, 422, "validation_error"),
        ({"vendor": "acme"}, 422, "validation_error"),
    ]
    for params, status, code in cases:
        response = await _feed(stack, **params)
        assert response.status_code == status, (params, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == code, params
    async with httpx.AsyncClient(base_url=stack.api_url) as anonymous:
        for path in ("/v1/events", "/v1/events/stream", "/v1/runs/run_x/stream"):
            assert (await anonymous.get(path)).status_code == 401
    head = await stack.api.head("/v1/events/stream")  # answered at once: no stream to hold open
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")
    bad = await stack.api.get("/v1/events/stream", headers={"Last-Event-ID": "nope"})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_iterator"
    assert (await stack.api.get("/v1/runs/run_01J9Z3K8V2Q4M6N8P0R2S4T6V8/stream")).status_code == 404


async def test_an_iterator_past_retention_answers_410(make_stack: StackFactory) -> None:
    stack = await make_stack(HOOKBRIDGE_RETENTION_S="1")
    run = await stack.submit("nutrient")
    await stack.wait_status(run["id"], "succeeded")
    old = (await _feed(stack, limit=1)).json()
    assert old["data"]

    # Later events trim the old ones (each append trims by the retention window).
    async def trimmed() -> bool:
        await stack.submit("nutrient")
        response = await _feed(stack, iterator=old["iterator"])
        return response.status_code == 410

    await eventually(trimmed, timeout=15, interval=0.3, what="the old iterator expired")
    problem = (await _feed(stack, iterator=old["iterator"])).json()
    assert problem["code"] == "iterator_expired" and problem["status"] == 410
    assert (await _feed(stack)).status_code == 200  # no iterator: from the oldest kept


async def test_sse_resumes_with_last_event_id_losing_and_repeating_nothing(make_stack: StackFactory) -> None:
    stack = await make_stack(HOOKBRIDGE_SSE_HEARTBEAT_S="0.2")
    runs = [await stack.submit("nutrient") for _ in range(3)]
    for run in runs:
        await stack.wait_status(run["id"], "succeeded")
    feed = await _all(stack)
    assert len(feed) >= 6
    seen: list[dict[str, Any]] = []
    comments: list[str] = []
    async with stack.api.stream("GET", "/v1/events/stream") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for frame in _sse(response):
            if "comment" in frame:
                comments.append(frame["comment"])
                if frame["comment"] == "keep-alive":
                    break  # caught up: the stream is idle
            else:
                seen.append(frame)
    assert [f["id"] for f in seen] == [e["id"] for e in feed]
    assert [f["event"] for f in seen] == [e["type"] for e in feed]
    assert seen[2]["data"] == feed[2]
    assert "keep-alive" in comments
    # Cut after the third event; resume by header, then by query parameter; then live.
    for how in ("header", "query"):
        cut = seen[2]["id"]
        options: dict[str, Any] = (
            {"headers": {"Last-Event-ID": cut}} if how == "header" else {"params": {"last_event_id": cut}}
        )
        resumed: list[str] = []
        async with stack.api.stream("GET", "/v1/events/stream", **options) as response:
            async for frame in _sse(response):
                if frame.get("comment") == "keep-alive":
                    break
                if "id" in frame:
                    resumed.append(frame["id"])
        assert resumed == [e["id"] for e in feed[3:]], how
    live: list[str] = []
    async with stack.api.stream(
        "GET", "/v1/events/stream", headers={"Last-Event-ID": seen[-1]["id"]}
    ) as response:
        new = await stack.submit("nutrient")
        async for frame in _sse(response):
            if frame.get("event") in TERMINAL:
                live.append(frame["data"]["data"]["run"]["id"])
                break
            if "id" in frame:
                live.append(frame["data"]["data"]["run"]["id"])
    assert set(live) == {new["id"]}


async def test_a_run_stream_starts_at_its_first_event_and_closes_after_its_terminal_one(
    stack: Stack,
) -> None:
    other = await stack.submit("nutrient")
    run = await stack.submit("nutrient")
    frames: list[dict[str, Any]] = []
    async with stack.api.stream("GET", f"/v1/runs/{run['id']}/stream") as response:
        assert response.status_code == 200
        async for frame in _sse(response):  # ends when the server closes the stream
            if "id" in frame:
                frames.append(frame)
    assert frames and frames[-1]["event"] == "run.succeeded"
    assert {f["data"]["data"]["run"]["id"] for f in frames} == {run["id"]}
    emitted = (await stack.api.get(f"/v1/runs/{run['id']}/events")).json()["data"]
    shown = [f["data"]["event_id"] for f in frames if f["event"] != "run.progress"]
    assert shown == [e["id"] for e in emitted] and frames[0]["event"] == "run.submitted"
    # The run has ended: its stream replays it and closes at once; resuming after its end closes too.
    async with stack.api.stream("GET", f"/v1/runs/{run['id']}/stream") as response:
        again = [f["id"] async for f in _sse(response) if "id" in f]
    assert again == [f["id"] for f in frames]
    async with stack.api.stream(
        "GET", f"/v1/runs/{run['id']}/stream", headers={"Last-Event-ID": frames[-1]["id"]}
    ) as response:
        assert [f async for f in _sse(response) if "id" in f] == []
    assert (await stack.bob.get(f"/v1/runs/{other['id']}/stream")).status_code == 404


async def test_streams_per_client_are_capped_and_a_closed_stream_frees_its_slot(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_MAX_STREAMS_PER_CLIENT="2")
    opened = []
    for _ in range(2):
        request = stack.api.build_request("GET", "/v1/events/stream")
        response = await stack.api.send(request, stream=True)
        assert response.status_code == 200
        opened.append(response)
    over = await stack.api.get("/v1/events/stream")
    assert over.status_code == 429 and over.json()["code"] == "too_many_streams"
    assert "retry-after" in over.headers
    waiting = await stack.api.get("/v1/events", params={"wait": "1"})
    assert waiting.status_code == 429  # a long-poll that would wait takes a slot too
    assert (await stack.api.get("/v1/events")).status_code == 200  # one that does not wait is free
    assert (await stack.bob.get("/v1/events", params={"wait": "0.1"})).status_code == 200  # per client
    await opened[0].aclose()

    async def freed() -> bool:
        response = await stack.api.get("/v1/events", params={"wait": "0.05"})
        return response.status_code == 200

    await eventually(freed, timeout=10, what="the closed stream's slot freed")
    await opened[1].aclose()


async def test_the_stream_authenticates_like_every_route(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.api_url) as anonymous:
        wrong = await anonymous.get("/v1/events/stream", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        async with anonymous.stream("GET", "/v1/events", headers={"Authorization": f"Bearer {ALICE}"}) as ok:
            assert ok.status_code == 200


async def test_a_run_shows_its_vendor_trail(stack: Stack) -> None:
    run = await stack.submit("nutrient")
    await stack.wait_status(run["id"], "succeeded")
    shown = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    kinds = [e["kind"] for e in shown["trail"]]
    assert kinds[0] == "submitted" and kinds[-1] == "result"
    assert set(kinds[1:-1]) <= {"poll", "progress"} and len(kinds) >= 2
    assert all(isinstance(e["latency_ms"], int) and e["at"].endswith("Z") for e in shown["trail"])
    assert shown["rate_limited"] == 0 and shown["trail_dropped"] >= 0
    # The trail is on the run's own page, not in every event nor in the list.
    listed = (await stack.api.get("/v1/runs")).json()["data"][0]
    assert "trail" not in listed
