"""A fault-injecting reverse proxy of the test's own, in front of a vendor's simulator.

Everything it does not fault is forwarded, over real sockets, to the simulator, which stays the vendor.
It exists because the faults the conformance suite and the 429 storm need must be the same for every
adapter and every simulator, including a plugin's own tiny one that has no fault knobs: a window of time
in which every request is answered 429 (with or without ``Retry-After``), and the next N requests answered
5xx, dropped before they reach the vendor (``"drop"``), or forwarded and their answer lost (``"lost"``: the
vendor acted on the request, the client saw its connection close). It also keeps its own log of every
request with its arrival time, so that a test counts what reached "the vendor" without depending on a
simulator's request log.

It forwards the request's ``Host`` (its own address), so that a simulator that builds absolute URLs from
it (Azure's ``Operation-Location``) names the proxy, and the requests to those URLs meet its faults too.
On the vendor's own 2xx answers to a GET it can also add headers (``Retry-After`` on a poll), pad the JSON
body with whitespace (an answer past the cap), and rewrite a status field (a status nobody documented).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.types import Receive, Scope, Send

from service.core.clock import SYSTEM, Clock

_HOP = {"host", "content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}
# What is not forwarded of a request: its Host is (the proxy's own address).
_REQUEST_HOP = _HOP - {"host"}


@dataclass
class Entry:
    t: float
    method: str
    path: str
    status: int | None = None  # None: dropped
    fault: str | None = None


@dataclass
class FaultProxy:
    target: str
    log: list[Entry] = field(default_factory=list)
    storm_until: float = 0.0  # every request before this instant is answered 429
    storm_retry_after: str | None = None  # the Retry-After of those 429s; None sends none
    faults: list[int | str] = field(default_factory=list)  # next requests: a status, "drop" or "lost"
    # Where set, a "drop" waits for a request of one of these methods (the others pass it by): a vendor
    # without idempotency must not meet a dropped submit in a test of transient faults, since that one is
    # ambiguous by design (service/worker/decide.py), not transient.
    drop_methods: frozenset[str] | None = None
    clock: Clock = SYSTEM  # the storm's window and the log's times (a test's ManualClock)
    # On the vendor's 2xx answers to a GET: headers added, whitespace appended to a JSON body, and a
    # status field (a path into the JSON object) rewritten to a value, the next ``status_count`` times.
    get_headers: dict[str, str] = field(default_factory=dict)
    get_padding: int = 0
    status_path: tuple[str, ...] = ()
    status_value: str = ""
    status_count: int = 0
    _client: httpx.AsyncClient | None = None

    def storm(self, seconds: float, retry_after: str | None) -> float:
        """Answers 429 to everything for ``seconds`` from now; returns when the storm started."""
        start = self.clock.time()
        self.storm_retry_after = retry_after
        self.storm_until = start + seconds
        return start

    def between(self, start: float, end: float) -> list[Entry]:
        return [e for e in self.log if start <= e.t < end]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if self._client is not None:
                        await self._client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http"
        entry = Entry(self.clock.time(), scope["method"], scope["path"])
        self.log.append(entry)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if entry.t < self.storm_until:
            storm = {"retry-after": self.storm_retry_after} if self.storm_retry_after is not None else {}
            entry.fault = "429"
            await _answer(send, 429, {"errorMessage": "rate limit exceeded (test storm)"}, storm, entry)
            return
        if self.faults and not (
            self.faults[0] == "drop"
            and self.drop_methods is not None
            and entry.method not in self.drop_methods
        ):
            fault = self.faults.pop(0)
            entry.fault = str(fault)
            if fault == "drop":
                await _drop(receive)
                return
            if fault == "lost":
                entry.status = (await self._forward(scope, body)).status_code  # what the vendor answered
                await _drop(receive)
                return
            assert isinstance(fault, int)
            await _answer(send, fault, {"errorMessage": f"injected {fault}"}, {}, entry)
            return
        response = await self._forward(scope, body)
        entry.status = response.status_code
        out = [(k.encode(), v.encode()) for k, v in response.headers.items() if k.lower() not in _HOP]
        content = response.content
        if scope["method"] == "GET" and response.is_success:
            content = self._altered(content, out, entry)
        out.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        await send({"type": "http.response.body", "body": content})

    async def _forward(self, scope: Scope, body: bytes) -> httpx.Response:
        """The request sent on to the vendor, Host included, and its whole answer."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=30)
        query = scope.get("query_string", b"").decode()
        url = self.target + scope["path"] + (f"?{query}" if query else "")
        headers = [
            (k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in _REQUEST_HOP
        ]
        return await self._client.request(scope["method"], url, headers=headers, content=body)

    def _altered(self, content: bytes, out: list[tuple[bytes, bytes]], entry: Entry) -> bytes:
        """The vendor's answer to a GET, with what the test asked for."""
        if self.status_count > 0 and self.status_path:
            try:
                body = json.loads(content)
            except ValueError:
                body = None
            where = body
            for key in self.status_path[:-1]:
                where = where.get(key) if isinstance(where, dict) else None
            if isinstance(where, dict) and self.status_path[-1] in where:
                where[self.status_path[-1]] = self.status_value
                self.status_count -= 1
                entry.fault = f"status {self.status_value}"
                content = json.dumps(body).encode()
        for name, value in self.get_headers.items():
            out.append((name.lower().encode(), value.encode()))
        if self.get_padding:
            content += b" " * self.get_padding  # still the same JSON
        return content


async def _answer(send: Send, status: int, body: Any, headers: dict[str, str], entry: Entry) -> None:
    entry.status = status
    raw = json.dumps(body).encode()
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    out += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": raw})


async def _drop(receive: Receive) -> None:
    """Closes the connection without a byte of answer (through uvicorn's transport, as the simulator
    does for its own dropped connections)."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    assert transport is not None, "a dropped connection needs uvicorn's transport"
    transport.close()
    async with asyncio.timeout(5):
        while (await receive())["type"] != "http.disconnect":
            pass
