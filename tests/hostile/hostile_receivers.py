"""Receivers that attack the worker, on real sockets (aiohttp's server, or raw asyncio for what no HTTP
server would send): a 1 GiB chunked body, a gzip bomb, a hang, a garbage answer. Shared by the hostile
delivery tests and ``bench/hostile.py``."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache

from aiohttp import web

from service.dev.embedded_redis import free_port

GIB = 1 << 30


@cache
def gzip_bomb(inflated: int = GIB) -> bytes:
    """A valid gzip stream of ``inflated`` zero bytes in about 1/1000 of that: one fully flushed deflate
    block of 1 MiB of zeros, repeated (a full flush makes each copy independent of the ones before)."""
    zeros = b"\0" * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    copies = inflated // len(zeros)
    crc = 0
    for _ in range(copies):
        crc = zlib.crc32(zeros, crc)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + block * copies + final + struct.pack("<II", crc, (copies * len(zeros)) & 0xFFFFFFFF)


@dataclass
class Seen:
    """What a hostile receiver saw and did."""

    requests: int = 0
    accept_encoding: list[str] = field(default_factory=list)
    bytes_sent: int = 0  # body bytes the receiver managed to hand to its socket
    dropped: int = 0  # responses the client hung up on before the end
    in_flight: int = 0
    most_in_flight: int = 0
    finished: int = 0


def _enter(seen: Seen, request: web.Request) -> None:
    seen.requests += 1
    seen.accept_encoding.append(request.headers.get("Accept-Encoding", ""))
    seen.in_flight += 1
    seen.most_in_flight = max(seen.most_in_flight, seen.in_flight)


def huge_chunked(seen: Seen, total: int = GIB) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """200, then ``total`` bytes in chunked encoding, as fast as the peer takes them."""

    async def handler(request: web.Request) -> web.StreamResponse:
        _enter(seen, request)
        await request.read()
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        chunk = b"A" * (64 * 1024)
        try:
            await response.prepare(request)
            while seen.bytes_sent < total:
                await response.write(chunk)
                seen.bytes_sent += len(chunk)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            seen.dropped += 1
        finally:
            seen.in_flight -= 1
        return response

    return handler


def gzip_bombing(seen: Seen) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """200 with ``Content-Encoding: gzip`` (whatever was asked) and a 1 MiB body that inflates to 1 GiB."""

    async def handler(request: web.Request) -> web.StreamResponse:
        _enter(seen, request)
        await request.read()
        body = gzip_bomb()
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                "Content-Length": str(len(body)),
            },
        )
        try:
            await response.prepare(request)
            for i in range(0, len(body), 64 * 1024):
                await response.write(body[i : i + 64 * 1024])
                seen.bytes_sent += min(64 * 1024, len(body) - i)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            seen.dropped += 1
        finally:
            seen.in_flight -= 1
        return response

    return handler


def hanging(seen: Seen, release: asyncio.Event) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Reads the request, then answers nothing until ``release`` is set."""

    async def handler(request: web.Request) -> web.StreamResponse:
        _enter(seen, request)
        try:
            await request.read()
            await release.wait()
            seen.finished += 1
            return web.Response(status=204)
        finally:
            seen.in_flight -= 1

    return handler


@contextlib.asynccontextmanager
async def serve(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], path: str = "/hooks"
) -> AsyncIterator[str]:
    """Serves ``handler`` for POST on ``path`` (and any path below it) on a free port; yields the URL."""
    app = web.Application()
    app.router.add_post(path, handler)
    app.router.add_post(path + "/{tail:.*}", handler)
    # handler_cancellation: a handler ends when its client hangs up, so in_flight counts open connections.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=2048)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve_raw(answer: bytes) -> AsyncIterator[str]:
    """A TCP server that reads a request head and writes ``answer`` verbatim (not HTTP, or broken HTTP)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(Exception):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(answer)
                await writer.drain()
        finally:
            writer.close()

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}/hooks"
    finally:
        server.close()
        await server.wait_closed()
