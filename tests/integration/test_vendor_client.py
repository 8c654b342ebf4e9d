"""The vendor client's fast GET and POST (service/vendors/http.py ``VendorClient``) against a real server: the
same request on the wire, the same answer, the same faults and the same budget and metrics as httpx's own
path, which it must be unable to be told apart from."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import tracemalloc
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.vendors.base import Call, Kind, VendorResultTooLarge
from service.vendors.http import VendorClient, make_client

BODY = {"id": "run-1", "status": "running"}
# Bodies the fast answer's orjson refuses, where it must read as httpx's own json() does (or fail as it does).
ODD_BODIES = {
    "bom": b'\xef\xbb\xbf{"a": 1}',
    "nan": b'{"a": NaN, "big": 123456789012345678901234567890}',
    "not-json": b"<html>busy</html>",
}


async def _runs(request: Request) -> Response:
    body = json.dumps({**BODY, "auth": request.headers.get("authorization"), "path": request.url.path})
    if request.query_params.get("broken") or request.path_params["rid"] == "broken-gzip":
        return Response(b"not gzip at all", headers={"content-encoding": "gzip"})
    if request.path_params["rid"] == "gzipped":
        return Response(gzip.compress(body.encode()), headers={"content-encoding": "gzip"})
    if request.path_params["rid"] in ODD_BODIES:
        return Response(ODD_BODIES[request.path_params["rid"]], media_type="application/json")
    if request.path_params["rid"] == "limited":
        return Response(b'{"error":"slow down"}', status_code=429, headers={"retry-after": "3"})
    return Response(body, media_type="application/json", headers={"x-run": request.path_params["rid"]})


async def _echo(request: Request) -> Response:
    """What arrived, as the vendor sees it: the method, every header and the body's bytes."""
    seen = {
        "method": request.method,
        "headers": sorted([k.decode("latin-1"), v.decode("latin-1")] for k, v in request.headers.raw),
        "body": (await request.body()).decode("latin-1"),
    }
    return Response(
        json.dumps(seen), media_type="application/json", headers={"set-cookie": "sticky=1; Path=/"}
    )


# A small cap for the answers below, and what each of them sends.
CAP = 4096
# A gzip stream of 8 MiB of zeros: some 8 KiB on the wire, 2,000 times the cap once inflated.
BOMB = gzip.compress(bytes(8 * 1024 * 1024))


@functools.cache
def deep_bomb() -> bytes:
    """128 MiB of zeros gzipped (~130 KB on the wire): any 64 KiB of it inflates to some 64 MiB at once."""
    return gzip.compress(bytes(128 * 1024 * 1024), compresslevel=6)


async def _big(request: Request) -> Response:
    shape = request.path_params["shape"]
    if shape == "at-cap":
        return Response(b"x" * CAP, media_type="application/octet-stream")
    if shape == "declared":  # one byte past the cap, its length said up front
        return Response(b"x" * (CAP + 1), media_type="application/octet-stream")
    if shape == "bomb":
        return Response(BOMB, headers={"content-encoding": "gzip", "content-type": "application/json"})
    if shape == "deep-bomb":
        return Response(deep_bomb(), headers={"content-encoding": "gzip", "content-type": "application/json"})

    async def endless() -> AsyncIterator[bytes]:  # chunked, never ending
        while True:
            yield b"x" * 1024
            await asyncio.sleep(0)  # the client shares this event loop: let it read

    return StreamingResponse(endless(), media_type="application/json")


@pytest.fixture
async def vendor(servers: Servers) -> str:
    app = Starlette(
        routes=[
            Route("/v/runs/{rid:path}", _runs),
            Route("/v/echo", _echo, methods=["GET", "POST"]),
            Route("/v/big/{shape}", _big, methods=["GET", "POST"]),
        ]
    )
    port = free_port()
    await servers.start(app, port)
    return f"http://127.0.0.1:{port}/v"


class Recorder:
    def __init__(self) -> None:
        self.acquired = 0
        self.tickets: list[object | None] = []
        self.settled: list[tuple[int | None, float | None]] = []
        self.observed: list[tuple[str, str, str]] = []

    async def acquire(self, ticket: object | None = None) -> None:
        self.acquired += 1
        self.tickets.append(ticket)

    async def settle(
        self, ticket: object | None = None, status: int | None = None, retry_after: float | None = None
    ) -> None:
        self.settled.append((status, retry_after))

    def observe(self, vendor: str, kind: str, code: str, seconds: float) -> None:
        self.observed.append((vendor, kind, code))


def _client(url: str, recorder: Recorder, *, cap: int = 50 * 1024 * 1024) -> httpx.AsyncClient:
    return make_client(
        url,
        {"Authorization": "Bearer k"},
        timeout_s=5,
        vendor="v",
        budget=recorder,
        observe=recorder.observe,
        max_answer_bytes=cap,
    )


async def test_a_plain_get_answers_as_httpx_does_and_is_budgeted_and_observed(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_paths: list[str] = []
    original = VendorClient._fast

    async def spy(self: VendorClient, method: str, path: str, *args: object) -> httpx.Response:
        fast_paths.append(f"{method} {path}")
        return await original(self, method, path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(VendorClient, "_fast", spy)
    recorder = Recorder()
    async with _client(vendor, recorder) as client:
        assert isinstance(client, VendorClient)
        # The step's ticket travels in the extensions to the budget, on either path (no context variable).
        call = Call(run_id="r", ticket=object())
        fast = await client.get("/runs/abc-1", extensions=call.extensions(Kind.POLL))
        # Query parameters take httpx's own path: the two must agree.
        slow = await client.get("/runs/abc-1", params={"x": "1"}, extensions=call.extensions(Kind.POLL))
    for response in (fast, slow):
        assert response.status_code == 200
        assert response.json() == {**BODY, "auth": "Bearer k", "path": "/v/runs/abc-1"}
        assert response.headers["x-run"] == "abc-1"
        assert response.is_success
    assert fast_paths == ["GET /runs/abc-1"]  # the first one only
    assert recorder.acquired == 2
    assert recorder.tickets == [call.ticket, call.ticket]
    assert recorder.settled == [(200, None), (200, None)]
    assert recorder.observed == [("v", "poll", "200"), ("v", "poll", "200")]


async def test_a_gzipped_answer_is_decoded_and_a_broken_one_raises_httpx_decoding_error(vendor: str) -> None:
    async with _client(vendor, Recorder()) as client:
        response = await client.get("/runs/gzipped")
        assert response.json()["path"] == "/v/runs/gzipped"
        with pytest.raises(httpx.DecodingError):
            await client.get("/runs/broken-gzip")


async def test_a_429_pauses_through_the_budget_with_its_retry_after(vendor: str) -> None:
    recorder = Recorder()
    async with _client(vendor, recorder) as client:
        response = await client.get("/runs/limited", extensions={"kind": "poll"})
    assert response.status_code == 429
    assert recorder.settled == [(429, 3.0)]
    # What a plugin adapter may still do with the fast path's answer, as with httpx's own.
    assert response.url == httpx.URL(f"{vendor}/runs/limited")
    with pytest.raises(httpx.HTTPStatusError):
        response.raise_for_status()


async def test_a_path_that_needs_quoting_takes_httpx_path_and_reaches_the_same_place(vendor: str) -> None:
    async with _client(vendor, Recorder()) as client:
        response = await client.get("/runs/a b%2Fc")
    async with httpx.AsyncClient(base_url=vendor) as plain:
        expected = (await plain.get("/runs/a b%2Fc")).json()["path"]
    assert response.json()["path"] == expected


async def test_a_refused_connection_is_an_httpx_transport_error_and_observed() -> None:
    recorder = Recorder()
    async with _client(f"http://127.0.0.1:{free_port()}", recorder) as client:
        with pytest.raises(httpx.TransportError):
            await client.get("/runs/x", extensions={"kind": "poll"})
    assert recorder.settled == [(None, None)]
    assert recorder.observed == [("v", "poll", "error")]


async def test_the_fast_answer_reads_like_httpx_own_read_closed_and_parsed_alike(vendor: str) -> None:
    async with _client(vendor, Recorder()) as client:
        for rid in ["abc-2", "gzipped", *ODD_BODIES]:
            fast = await client.get(f"/runs/{rid}")
            slow = await client.get(f"/runs/{rid}", params={"x": "1"})
            assert (fast.content, fast.text) == (slow.content, slow.text), rid
            assert fast.is_closed and fast.is_stream_consumed, rid
            if rid == "not-json":
                for response in (fast, slow):
                    with pytest.raises(ValueError):
                        response.json()
            elif rid == "nan":
                assert fast.json()["big"] == slow.json()["big"] == 123456789012345678901234567890
            else:
                assert {k: v for k, v in fast.json().items() if k != "path"} == {
                    k: v for k, v in slow.json().items() if k != "path"
                }, rid


# JSON bodies whose encoding httpx decides: non-ASCII text (kept, not escaped), floats, integers past 64 bits,
# nesting, and keys in the order given.
ODD_JSON: list[dict[str, object]] = [
    {"url": "https://docs.example/é文😀.pdf", "mode": "text"},
    {"z": 1.5, "a": 1e-7, "big": 2**70, "neg": -0.0, "nested": {"l": [1, None, True, "\u2028"]}},
    {},
]


async def _both(
    url: str, path: str, **kwargs: object
) -> tuple[dict[str, object], dict[str, object], list[str]]:
    """What the vendor saw of one POST from hookbridge's vendor client and of the same from a plain httpx
    client, and the paths the first took."""
    fast_paths: list[str] = []
    original = VendorClient._fast

    async def spy(self: VendorClient, method: str, path: str, *args: object) -> httpx.Response:
        fast_paths.append(f"{method} {path}")
        return await original(self, method, path, *args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VendorClient, "_fast", spy)
        async with _client(url, Recorder()) as client:
            ours = (await client.post(path, **kwargs)).json()  # type: ignore[arg-type]
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer k"}) as plain:
        theirs = (await plain.post(path, **kwargs)).json()  # type: ignore[arg-type]
    return ours, theirs, fast_paths


@pytest.mark.parametrize("body", ODD_JSON, ids=["unicode", "numbers", "empty"])
async def test_a_json_post_reaches_the_vendor_byte_for_byte_as_httpx_sends_it(
    vendor: str, body: dict[str, object]
) -> None:
    headers = {"Idempotency-Key": "run_01J9Z"}
    ours, theirs, fast = await _both(
        vendor, "/echo", json=body, headers=headers, extensions={"kind": "submit"}
    )
    assert fast == ["POST /echo"]
    assert ours == theirs  # method, every header (Host, Content-Length, Content-Type, auth...) and the body
    assert ours["method"] == "POST"
    assert ["idempotency-key", "run_01J9Z"] in ours["headers"]  # type: ignore[operator]
    assert ["content-type", "application/json"] in ours["headers"]  # type: ignore[operator]
    assert json.loads(str(ours["body"]).encode("latin-1")) == body


async def test_a_post_with_its_own_content_type_keeps_it_on_both_paths(vendor: str) -> None:
    headers = {"content-type": "application/vnd.api+json"}
    ours, theirs, fast = await _both(vendor, "/echo", json={"a": 1}, headers=headers)
    assert fast == ["POST /echo"]
    assert ours == theirs
    assert ["content-type", "application/vnd.api+json"] in ours["headers"]  # type: ignore[operator]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"json": {"a": 1}, "headers": {"X-Note": "café"}},  # not ASCII: httpx refuses it, so must we
        {"json": {"a": 1}, "headers": {"Content-Length": "7"}},  # framing is httpx's own
        {"json": {"a": 1}, "params": {"q": "1"}},
        {"json": [1, 2]},
        {"content": b"raw"},
        {"data": {"instructions": "{}"}, "files": {"file": ("a.pdf", b"%PDF", "application/pdf")}},
    ],
    ids=["non-ascii-header", "content-length", "params", "json-list", "content", "multipart"],
)
async def test_what_the_fast_post_does_not_take_goes_httpx_way(
    vendor: str, kwargs: dict[str, object]
) -> None:
    """Each of these is httpx's to build (on the same aiohttp transport, whose own ways are not ours to test):
    the fast path is not taken, and what httpx refuses is refused."""
    try:
        _, _, fast = await _both(vendor, "/echo", **kwargs)
    except UnicodeEncodeError:
        assert kwargs.get("headers") == {"X-Note": "café"}
        async with _client(vendor, Recorder()) as client:
            with pytest.raises(UnicodeEncodeError):  # the fast path would have sent it as UTF-8
                await client.post("/echo", **kwargs)  # type: ignore[arg-type]
        return
    assert fast == []


@pytest.mark.parametrize("bad", [{"n": float("nan")}, {"s": {1, 2}}], ids=["nan", "set"])
async def test_a_body_json_cannot_hold_raises_as_httpx_raises_it_and_sends_nothing(
    vendor: str, bad: dict[str, object]
) -> None:
    recorder = Recorder()
    async with httpx.AsyncClient(base_url=vendor) as plain:
        with pytest.raises((ValueError, TypeError)) as theirs:
            await plain.post("/echo", json=bad)
    async with _client(vendor, recorder) as client:
        with pytest.raises(theirs.type):
            await client.post("/echo", json=bad, extensions={"kind": "submit"})
    assert recorder.acquired == 0  # raised before the budget was taken: nothing reached the vendor


async def test_a_post_is_budgeted_and_observed_and_a_cookie_the_vendor_sets_is_never_sent_back(
    vendor: str,
) -> None:
    recorder = Recorder()
    async with _client(vendor, recorder) as client:
        first = await client.post("/echo", json={"a": 1}, extensions={"kind": "submit"})
        assert first.headers["set-cookie"].startswith("sticky=")
        again = [
            await client.post("/echo", json={"a": 2}, extensions={"kind": "submit"}),  # fast
            await client.post("/echo", json={"a": 2}, params={"q": "1"}),  # httpx's own
            await client.get("/echo"),  # fast
            await client.get("/echo", params={"q": "1"}),  # httpx's own
        ]
    for response in again:
        names = [name for name, _ in response.json()["headers"]]
        assert "cookie" not in names
    assert recorder.acquired == 5
    assert recorder.settled == [(200, None)] * 5
    assert recorder.observed[:2] == [("v", "submit", "200")] * 2
    assert recorder.observed[2:] == [("v", "post", "200"), ("v", "get", "200"), ("v", "get", "200")]
    assert first.request.method == "POST" and first.url == httpx.URL(f"{vendor}/echo")


# Each way an answer reaches the adapter: the fast GET, httpx's own GET (a query parameter), the fast POST.
WAYS = {
    "fast-get": lambda c, path: c.get(path, extensions={"kind": "poll"}),
    "httpx-get": lambda c, path: c.get(path, params={"q": "1"}, extensions={"kind": "poll"}),
    "fast-post": lambda c, path: c.post(path, json={"a": 1}, extensions={"kind": "submit"}),
}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("shape", ["declared", "endless", "bomb"])
async def test_no_answer_is_read_past_the_cap_on_any_path(vendor: str, way: str, shape: str) -> None:
    """A vendor (or a proxy before it) cannot push the worker's memory past the cap: not by a long body
    said up front, not by one that never ends (the call would never return), not by a gzip bomb."""
    recorder = Recorder()
    async with _client(vendor, recorder, cap=CAP) as client:
        with pytest.raises(VendorResultTooLarge, match=f"more than the {CAP} bytes"):
            await WAYS[way](client, f"/big/{shape}")
        at_cap = await WAYS[way](
            client, "/big/at-cap"
        )  # the cap itself is read whole, and the client goes on
    assert at_cap.status_code == 200 and at_cap.content == b"x" * CAP
    kind = "submit" if way == "fast-post" else "poll"
    # Each request observed and its budget settled once. (Its code: "error" where the cap cut the read
    # inside the request, the fast paths; "200" on httpx's, whose transport is done once the head arrives.)
    assert [(v, k) for v, k, _ in recorder.observed] == [("v", kind)] * 2
    assert len(recorder.settled) == 2 and recorder.settled[1] == (200, None)


@pytest.mark.parametrize("way", WAYS)
async def test_a_deep_gzip_bomb_is_cut_before_it_holds_more_than_one_small_slice_inflated(
    vendor: str, way: str
) -> None:
    """The cap is checked between the decoder's steps, so what one step inflates is what the worker holds
    past the cap: a slice of 64 KiB of this bomb is 64 MiB at once, and 500 polls in flight are 500 of them.
    Every path decodes at most 16 KiB of the wire at a time (some 16.5 MiB inflated). Measured with
    tracemalloc (what the process allocated at its peak during the call), not with a clock."""
    cap = 1024 * 1024  # more than the bomb on the wire, so that it is decoded, not refused by its length
    assert len(deep_bomb()) < cap  # and built before the measure
    recorder = Recorder()
    async with _client(vendor, recorder, cap=cap) as client:
        tracemalloc.start()
        try:
            with pytest.raises(VendorResultTooLarge, match=f"more than the {cap} bytes"):
                await WAYS[way](client, "/big/deep-bomb")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # One 16 KiB step is ~16.5 MiB inflated, and zlib's growing output buffer holds up to ~2.8 times that
    # as it finishes (46 MiB measured on each way); 64 KiB steps held 142 MiB.
    assert peak < 64 * 1024 * 1024, f"{peak / 2**20:.1f} MiB held at the peak"
