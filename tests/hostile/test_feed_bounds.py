"""A hostile tenant against the event feed and its streams (issue 23): stalled readers, the stream cap over
a stream's whole life, the blocking pool's fair share, a filter that matches nothing, Redis dying under
open streams, and ``recover`` over a long delivery log. The API runs on uvicorn as ``hookbridge api``
runs it (``api_config``: the connection guard), in this process, against a real Redis."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from service.api import events
from service.api.app import create_app
from service.core import domain
from service.dev.embedded_redis import EmbeddedRedis, free_port
from service.serving.server import EmbeddedServer, api_config
from service.store import bodies, connect, keys
from service.store.feed import Feed, FeedFilter, Lanes, ScanRate, admit
from service.vendors.registry import load_settings
from tests.conftest import ALICE, BOB, base_env, command_calls, eventually, store_client


@contextlib.asynccontextmanager
async def guarded_api(redis_url: str, **overrides: str) -> AsyncIterator[str]:
    settings = load_settings(base_env(redis_url, **overrides))
    port = free_port()
    config = api_config(create_app(settings), settings, host="127.0.0.1", port=port, lifespan="on")
    server = EmbeddedServer(config)
    task = asyncio.create_task(server.serve())

    async def started() -> bool:
        if task.done():
            task.result()
        return bool(server.started)

    await eventually(started, timeout=10, what="the API started")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def fill_feed(redis_url: str, client: str, count: int, size: int, run_id: str = "run_fill") -> None:
    """``count`` events of about ``size`` bytes each in the client's feed (incompressible bodies)."""
    redis = store_client(redis_url)
    try:
        pipe = redis.pipeline(transaction=False)
        for i in range(count):
            data = base64.b64encode(os.urandom(size * 3 // 4)).decode()
            body = f'{{"type":"run.progress","timestamp":"2026-01-01T00:00:00Z","data":{{"blob":"{data}"}}}}'
            fields = {"e": f"evt_fill{i}", "t": "run.progress", "r": run_id, "v": "nutrient"}
            pipe.xadd(keys.client_feed(client), {**fields, "b": bodies.packed(body)})
        await pipe.execute()
    finally:
        await redis.aclose()


def _stalled_stream(port: int, key: str = ALICE, path: str = "/v1/events/stream") -> socket.socket:
    """A stream whose reader reads the status line and then nothing: a tiny receive window, never read."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    head = sock.recv(12)
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


async def stalled_stream(port: int) -> socket.socket:
    return await asyncio.to_thread(_stalled_stream, port)  # the server runs in this event loop


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def _xrange_calls(redis: Redis) -> int:
    return await command_calls(redis, "xrange")


@pytest.mark.parametrize(
    ("held", "in_use", "size", "share", "reserve", "admitted"),
    [
        (0, 0, 8, 4, 2, True),  # an empty pool
        (3, 3, 8, 4, 2, True),
        (4, 4, 8, 4, 2, False),  # at its share
        (2, 6, 8, 4, 2, False),  # the last free lanes are kept for clients with none
        (0, 6, 8, 4, 2, True),  # ... such as this one
        (0, 7, 8, 4, 2, True),
        (0, 8, 8, 4, 2, False),  # the pool is full
        (1, 5, 8, 8, 0, True),  # no reserve
    ],
)
def test_who_may_take_a_blocking_lane(
    held: int, in_use: int, size: int, share: int, reserve: int, admitted: bool
) -> None:
    assert admit(held, in_use, size, share, reserve) is admitted


def test_lanes_count_per_client_and_come_back() -> None:
    lanes = Lanes(4, share=3, reserve=1)
    assert [lanes.take("a") for _ in range(4)] == [True, True, True, False]
    assert lanes.take("b") and not lanes.take("b") and lanes.in_use == 4
    lanes.give_back("a")
    assert lanes.take("c") and lanes.held == {"a": 2, "b": 1, "c": 1}


async def test_stalled_streams_cannot_outlive_the_cap(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short lease: before issue 23 a stalled stream stopped renewing, its slot ran out after one lease
    # and the client opened more (50 stalled streams under a cap of 10).
    monkeypatch.setattr(events, "SLOT_LEASE_S", 1.0)
    await fill_feed(redis_url, "alice", 40, 200_000)  # 8 MB: far more than the sockets' buffers
    async with guarded_api(
        redis_url, HOOKBRIDGE_MAX_STREAMS_PER_CLIENT="3", HOOKBRIDGE_SSE_SEND_TIMEOUT_S="60s"
    ) as url:
        socks = [await stalled_stream(_port(url)) for _ in range(3)]
        try:
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}) as api:
                deadline = time.monotonic() + 3.5  # three and a half leases
                refused = 0
                while time.monotonic() < deadline:
                    response = await api.get("/v1/events", params={"wait": "0.05", "run_id": "run_none"})
                    assert response.status_code == 429, (
                        "a fourth reader got a slot while 3 stalled streams hold them"
                    )
                    assert response.json()["code"] == "too_many_streams"
                    refused += 1
                    await asyncio.sleep(0.1)  # paced probes over a fixed span: the property is "for all time"
                assert refused > 10
        finally:
            for sock in socks:
                sock.close()
    redis = store_client(redis_url)
    try:
        await redis.delete(keys.client_feed("alice"), keys.client_streams("alice"))
    finally:
        await redis.aclose()


async def test_a_stalled_stream_is_closed_within_the_send_timeout(redis_url: str) -> None:
    await fill_feed(redis_url, "alice", 40, 200_000)
    async with guarded_api(
        redis_url, HOOKBRIDGE_MAX_STREAMS_PER_CLIENT="1", HOOKBRIDGE_SSE_SEND_TIMEOUT_S="1s"
    ) as url:
        sock = await stalled_stream(_port(url))
        started = time.monotonic()
        try:
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}) as api:

                async def slot_freed() -> bool:
                    return (
                        await api.get("/v1/events", params={"wait": "0.05", "run_id": "run_none"})
                    ).status_code == 200

                await eventually(slot_freed, timeout=6, what="the stalled stream closed and its slot freed")
            assert time.monotonic() - started < 6

            def reset_or_eof() -> bool:
                sock.settimeout(5)
                try:
                    while sock.recv(65536):
                        pass
                except ConnectionResetError:
                    pass
                return True

            assert await asyncio.to_thread(reset_or_eof)  # the server dropped the connection
        finally:
            sock.close()
    redis = store_client(redis_url)
    try:
        await redis.delete(keys.client_feed("alice"), keys.client_streams("alice"))
    finally:
        await redis.aclose()


async def test_tenants_at_their_quota_leave_another_tenants_long_poll_answered(redis_url: str) -> None:
    clients = [f"t{i}" for i in range(3)]
    api_keys = ",".join(f"{c}:{c}-key" for c in (*clients, "victim"))
    async with guarded_api(
        redis_url,
        HOOKBRIDGE_API_KEYS=api_keys,
        HOOKBRIDGE_MAX_STREAMS_PER_CLIENT="4",
        HOOKBRIDGE_FEED_BLOCKING_CONNECTIONS="8",
    ) as url:
        opened: list[httpx.Response] = []
        async with httpx.AsyncClient(base_url=url, timeout=10) as api:
            statuses: dict[str, list[int]] = {}
            for client in clients:
                for _ in range(4):  # each hostile tenant opens its whole quota
                    request = api.build_request(
                        "GET", "/v1/events/stream", headers={"Authorization": f"Bearer {client}-key"}
                    )
                    response = await api.send(request, stream=True)
                    statuses.setdefault(client, []).append(response.status_code)
                    if response.status_code == 200:
                        opened.append(response)
                    else:
                        await response.aread()
                        assert response.status_code == 429, response.text
                        assert response.json()["code"] == "too_many_streams"
                        assert response.headers["content-type"] == "application/problem+json"
                        assert "retry-after" in response.headers
            assert all(503 not in codes for codes in statuses.values())
            # 4 + 2 + 1: the first takes its share, the next ones stop where the free lanes reach the
            # reserve (8 // 4) but still get a first one each, and the victim's first is kept free.
            assert len(opened) == 7 and statuses["t1"].count(200) == 2, statuses
            victim = await api.get(
                "/v1/events", params={"wait": "0.2"}, headers={"Authorization": "Bearer victim-key"}
            )
            assert victim.status_code == 200, victim.text
            for response in opened:
                await response.aclose()


async def test_a_filter_that_matches_nothing_costs_one_budget_per_request(redis_url: str) -> None:
    await fill_feed(redis_url, "alice", 5000, 40)
    redis = store_client(redis_url)
    try:
        # The client's scan rate refills at once here: this test is about the budget of one request, and a
        # resume sent within a millisecond of a spent burst would otherwise meet the rate (a 429 by design,
        # held by test_what_a_read_may_scan_of_the_clients_rate), depending on the machine's speed.
        fast_refill = {"HOOKBRIDGE_FEED_SCAN_RATE_PER_S": "10000000"}
        async with guarded_api(redis_url, HOOKBRIDGE_FEED_SCAN_BUDGET="2000", **fast_refill) as url:
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}) as api:
                before = await _xrange_calls(redis)
                started = time.monotonic()
                response = await api.get("/v1/events", params={"run_id": "run_nomatch", "wait": "5"})
                elapsed = time.monotonic() - started
                calls = await _xrange_calls(redis) - before
                page = response.json()
                assert response.status_code == 200 and page["data"] == [] and page["done"] is False
                # 2,000 entries scanned in two reads, then an answer with the iterator to resume from (it
                # does not wait: there is more to scan), instead of scanning the whole feed and waiting.
                assert calls <= 2, calls
                assert elapsed < 2.5
                resumed = await api.get(
                    "/v1/events", params={"run_id": "run_nomatch", "iterator": page["iterator"]}
                )
                assert resumed.status_code == 200, resumed.text
                assert resumed.json()["data"] == []
    finally:
        await redis.delete(keys.client_feed("alice"))
        await redis.aclose()


@pytest.mark.parametrize(
    ("burst", "asks", "expected"),
    [
        (5000, [1000, 1000, 1000], [1000, 1000, 1000]),  # within the burst: what each read asks
        (500, [1000, 1000], [500, None]),  # what is left, then nothing until it refills
        (1050, [1000, 1000], [1000, None]),  # 50 left: less than MIN_SCAN, so no read of 50
        (1050, [1000, 50], [1000, 50]),  # ... unless the read asks for no more than that
        (150, [40, 1000, 1000], [40, 110, None]),
        (None, [1000, 1000, 1000], [1000, 1000, 1000]),  # no rate: the per-read bound only
    ],
)
async def test_what_a_read_may_scan_of_the_clients_rate(
    redis_url: str, burst: int | None, asks: list[int], expected: list[int | None]
) -> None:
    """The scan rate's decisions (``read_feed.lua`` with ``_gcra.lua``), as a table: a rate so slow that
    nothing refills while the test runs (one entry per 100 s), so each row is exact."""
    client = f"scan{burst}-{len(asks)}-{asks[-1]}"
    await fill_feed(redis_url, client, 3500, 10)
    settings = load_settings(base_env(redis_url))
    redis = store_client(redis_url)
    feed = Feed(redis, connect(settings), 3600)
    rate = None if burst is None else ScanRate(0.01, burst)
    try:
        after, got = "", []
        for ask in asks:
            page = await feed.read(
                client,
                after,
                limit=100,
                now_ms=domain.now_ms(),
                only=FeedFilter(run_id="x"),
                scan=ask,
                rate=rate,
            )
            got.append(None if page.throttled_s else page.scanned)
            if page.throttled_s:
                assert page.iterator == after and not page.done and page.throttled_s > 50
            after = page.iterator
        assert got == expected
    finally:
        await feed.close()
        await redis.delete(keys.client_feed(client), keys.client_rate("feed_scan", client))
        await redis.aclose()


async def _entries_before(redis: Redis, client: str, iterator: str) -> int:
    """How many of the client's feed entries are at or before ``iterator``: what a reader that followed
    it from the start has scanned."""
    return len(await redis.xrange(keys.client_feed(client), "-", iterator)) if iterator else 0


async def test_a_looping_client_scans_at_most_its_rate_and_another_client_is_answered(
    redis_url: str,
) -> None:
    """A client looping long-polls, page reads and a stream, all with a filter that matches nothing, scans
    at most FEED_SCAN_RATE_PER_S entries a second in all (plus one burst), not a budget per request; a
    page read over it is 429 with Retry-After, a long-poll is held; another client is answered meanwhile."""
    await fill_feed(redis_url, "alice", 40_000, 40)
    await fill_feed(redis_url, "bob", 50, 40, run_id="run_bob")
    redis = store_client(redis_url)
    rate, burst, attack_s = 2000, 1000, 2.0
    try:
        async with guarded_api(
            redis_url,
            HOOKBRIDGE_FEED_SCAN_BUDGET=str(burst),
            HOOKBRIDGE_FEED_SCAN_RATE_PER_S=str(rate),
        ) as url:
            alice = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=10)
            bob = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {BOB}"}, timeout=10)
            iterators: list[str] = []
            statuses: dict[int, int] = {}
            limited: list[httpx.Response] = []
            started = time.monotonic()

            async def follow(wait: str) -> None:
                # Each loop follows its own iterator, so how far it got is what it scanned.
                iterator = ""
                while time.monotonic() - started < attack_s:
                    params = {"run_id": "run_nomatch", "wait": wait}
                    if iterator:
                        params["iterator"] = iterator
                    response = await alice.get("/v1/events", params=params)
                    statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                    if response.status_code == 200:
                        iterator = response.json()["iterator"]
                    else:
                        limited.append(response)
                        await asyncio.sleep(0.05)
                iterators.append(iterator)

            async def stream() -> None:
                request = alice.build_request("GET", "/v1/events/stream", params={"run_id": "run_nomatch"})
                response = await alice.send(request, stream=True)
                assert response.status_code == 200
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(attack_s):
                        async for _ in response.aiter_bytes():
                            pass
                await response.aclose()

            victim: list[int] = []

            async def other_client() -> None:
                while time.monotonic() - started < attack_s:
                    page = await bob.get("/v1/events", params={"run_id": "run_bob", "limit": "100"})
                    runs = await bob.get("/v1/runs", params={"limit": "1"})
                    victim.extend([page.status_code, runs.status_code])
                    assert len(page.json()["data"]) == 50
                    await asyncio.sleep(0.05)

            before = await _xrange_calls(redis)
            await asyncio.gather(follow("1"), follow("1"), follow("0"), follow("0"), stream(), other_client())
            elapsed = time.monotonic() - started
            calls = await _xrange_calls(redis) - before
            scanned = sum([await _entries_before(redis, "alice", i) for i in iterators])
            # Every read of alice's (each loop's, and the stream's) is charged to one rate: what the four
            # loops got through is at most the rate over the attack plus one burst, with slack for the
            # second the last held long-poll may run past it. On a budget per request, ~40,000 each.
            assert scanned <= rate * (elapsed + 1) + burst, (scanned, elapsed, statuses)
            assert scanned >= burst, scanned  # and it did scan: the bound is a rate, not a wall
            # Each read is a worthwhile slice (no read of a few entries at a time while throttled).
            assert calls <= 2 * (rate * (elapsed + 1) + burst) // 100 + 20, calls
            # Page reads over the rate are told when to come back; long-polls are held, never refused.
            assert statuses.get(429, 0) >= 1, statuses
            for response in limited:
                assert response.status_code == 429 and response.json()["code"] == "rate_limited"
                assert int(response.headers["retry-after"]) >= 1
            # The other client is answered throughout, its reads charged to a rate of its own.
            assert len(victim) >= 10 and set(victim) == {200}, victim
            await alice.aclose()
            await bob.aclose()
    finally:
        await redis.delete(keys.client_feed("alice"), keys.client_feed("bob"))
        await redis.aclose()


async def test_redis_dying_under_open_streams_ends_them_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    with EmbeddedRedis(appendonly=False) as own:
        async with guarded_api(own.url, HOOKBRIDGE_SSE_HEARTBEAT_S="1s") as url:
            async with httpx.AsyncClient(
                base_url=url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30
            ) as api:
                requests = [api.build_request("GET", "/v1/events/stream") for _ in range(3)]
                streams = [await api.send(r, stream=True) for r in requests]
                assert all(s.status_code == 200 for s in streams)
                own.kill()

                async def body(response: httpx.Response) -> bytes:
                    return await response.aread()  # raises on a chunked body cut short

                bodies_read = await asyncio.wait_for(asyncio.gather(*(body(s) for s in streams)), 30)
                assert all(b.startswith(b": connected") for b in bodies_read)
    assert "Exception in ASGI application" not in caplog.text
    assert "Traceback" not in caplog.text


async def _hgetalls(redis: Redis) -> int:
    return await command_calls(redis, "hgetall")


async def test_recover_reads_a_long_log_a_page_per_request(redis_url: str) -> None:
    async with guarded_api(redis_url, HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS="127.0.0.0/8") as url:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}) as api:
            created = await api.post("/v1/subscriptions", json={"url": "http://127.0.0.1:9/hook"})
            assert created.status_code == 201, created.text
            sub_id = created.json()["id"]
            # A cluster client on a cluster: the log is in the subscription's shard, the records it names in
            # theirs; the HGETALLs are counted over every primary.
            redis = store_client(redis_url)
            try:
                # 1,200 entries in the log (records long gone, as after retention): what one call reads.
                await redis.zadd(
                    keys.sub_deliveries(sub_id), {f"dlv_{i:032x}": 1_000 + i for i in range(1200)}
                )
                before = await _hgetalls(redis)
                pages, cursor, per_call = 0, None, []
                while True:
                    body: dict[str, Any] = {
                        "since": "1970-01-01T00:00:00Z",
                        **({"cursor": cursor} if cursor else {}),
                    }
                    response = await api.post(f"/v1/subscriptions/{sub_id}/recover", json=body)
                    assert response.status_code == 202, response.text
                    now = await _hgetalls(redis)
                    per_call.append(now - before)
                    before = now
                    pages += 1
                    cursor = response.json()["next_cursor"]
                    if cursor is None:
                        break
                assert pages == 3 and max(per_call) <= 500 + 1, per_call  # + the subscription itself
                bad = await api.post(
                    f"/v1/subscriptions/{sub_id}/recover",
                    json={"since": "1970-01-01T00:00:00Z", "cursor": "%%"},
                )
                assert bad.status_code == 422
                backwards = await api.post(
                    f"/v1/subscriptions/{sub_id}/recover",
                    json={"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
                )
                assert backwards.status_code == 422
            finally:
                await redis.aclose()
