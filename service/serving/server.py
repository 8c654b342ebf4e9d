"""uvicorn as hookbridge runs it: servers embedded in a larger program, and the API's connection guard.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but nothing closes a connection
that never finishes its request headers (slowloris: one header line every few seconds, for ever), nor one
that stops sending its body. Each holds a file descriptor until the process runs out of them. The guard
below, a thin layer over uvicorn's own protocol classes, adds:

- a deadline for a request's headers (``API_HEADER_TIMEOUT_S``, from the connection or from the end of
  the previous response; not pushed back by a trickle of bytes);
- an idle timeout while a body is read (``API_BODY_IDLE_TIMEOUT_S``, reset by each chunk);
- at most 64 KiB of header bytes before the headers end (h11 bounds them, httptools does not);
- a cap on open connections (``API_MAX_CONNECTIONS``; by default from the file-descriptor limit). At the
  cap a new connection evicts the connection that has waited longest for its next request's headers
  (an idle keep-alive or a slow client), so that a prober's new connection is served; when every
  connection is busy with a request, the new one is answered ``503`` and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from service.config.settings import ApiLimits

_SHED_BODY = (
    b'{"title":"Service unavailable","status":503,"code":"unavailable","detail":"Too many connections."}'
)
_SHED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_SHED_BODY), _SHED_BODY)
)
_SHED_LINGER_S = 1.0
# The scope extension under which the app finds its connection's abort (None when served otherwise).
ABORT = "hookbridge.abort"
# uvicorn's own answer to a request it cannot parse is text/plain; the API answers problems (RFC 9457).
_BAD_REQUEST_BODY = (
    b'{"type":"https://hookbridge.dev/errors/invalid_request","title":"Invalid request","status":400,'
    b'"code":"invalid_request",'
    b'"detail":"The request is not valid HTTP/1.1."}'
)
_BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\n"
    b"x-content-type-options: nosniff\r\ncache-control: no-store\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BAD_REQUEST_BODY), _BAD_REQUEST_BODY)
)
# Header bytes read without the headers ending; the app refuses more than 16 KiB with 431 once they do.
MAX_HEADER_READ_BYTES = 64 * 1024
# Descriptors kept free for what is not a client connection: the Redis pool (200), logs, the listener.
_FD_RESERVE = 256


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The program that embeds this server handles SIGTERM/SIGINT and sets ``should_exit``.
        yield


@dataclass(frozen=True)
class GuardLimits:
    header_timeout_s: float
    body_idle_timeout_s: float
    max_connections: int


def max_connections(settings: ApiLimits) -> int:
    """``API_MAX_CONNECTIONS``, or what the process's file-descriptor limit leaves for clients."""
    if settings.api_max_connections:
        return settings.api_max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 10_000
    return max(64, soft - _FD_RESERVE)


class _Guard:
    """Mixed in before one of uvicorn's HTTP protocol classes (h11 or httptools); both keep the request
    in progress as ``self.cycle`` (``more_body``, ``response_complete``)."""

    _limits: GuardLimits
    _waiting: OrderedDict[Any, None]  # connections waiting for a request's headers, oldest first
    cycle: Any
    transport: asyncio.Transport
    connections: set[Any]
    _guard_timer: asyncio.TimerHandle | None = None
    _shed = False
    _header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        if len(self.connections) > self._limits.max_connections:
            victim = next(iter(self._waiting), None)
            if victim is None:
                # Every connection is busy with a request: shed this one while descriptors remain. A
                # half-close, then a close a moment later, so that the client reads the 503 instead of a
                # reset for the request bytes it already sent (which are ignored).
                self._shed = True
                transport.write(_SHED)
                if transport.can_write_eof():
                    transport.write_eof()
                asyncio.get_running_loop().call_later(_SHED_LINGER_S, transport.close)
                return
            self._waiting.pop(victim, None)
            victim.transport.close()
        self._waiting[self] = None
        self._arm(self._limits.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._shed:
            return
        super().data_received(data)  # type: ignore[misc]
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A streaming answer whose reader takes nothing drops its connection with this, discarding what
            # is buffered for it (service/api/streams.py); ``close`` would wait to flush it first.
            cycle.scope.setdefault("extensions", {}).setdefault(ABORT, self.transport.abort)
            self._header_bytes = 0
            self._waiting.pop(self, None)
            if cycle.more_body:
                self._arm(self._limits.body_idle_timeout_s)  # reset by every chunk of the body
            else:
                self._disarm()  # read in full: the app has it
        else:
            # Still no complete headers. httptools keeps whatever header bytes come: bound them too.
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_READ_BYTES:
                self._waiting.pop(self, None)
                self.transport.close()
            elif self._guard_timer is None:
                # The first bytes of a next request on a kept-alive connection: its headers now have a
                # deadline.
                self._arm(self._limits.header_timeout_s)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._disarm()  # uvicorn's keep-alive timeout now watches the idle connection
        if not self.transport.is_closing():
            self._waiting[self] = None
            self._waiting.move_to_end(self)

    def send_400_response(self, msg: str) -> None:
        # uvicorn's text (the parser's message) is replaced by a problem body; the status is the same.
        self.transport.write(_BAD_REQUEST)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._waiting.pop(self, None)
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._guard_timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._guard_timer is not None:
            self._guard_timer.cancel()
            self._guard_timer = None

    def _expired(self) -> None:
        self._guard_timer = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            return  # the request arrived in full meanwhile
        # Headers not complete in time, or a body that stopped: close. A body read by the app then
        # ends in http.disconnect (a 499 in the metrics), never a 500.
        self._waiting.pop(self, None)
        if not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(limits: GuardLimits) -> type:
    """uvicorn's fastest HTTP protocol class available (httptools, else h11) with the guard mixed in.

    Made per server, so that the list of waiting connections belongs to that server alone."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # pragma: no cover - httptools comes with uvicorn[standard]
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]
    return type("GuardedHTTPProtocol", (_Guard, base), {"_limits": limits, "_waiting": OrderedDict()})


def api_config(app: Any, settings: ApiLimits, *, host: str, port: int, **options: Any) -> uvicorn.Config:
    """The API's uvicorn configuration, the same for ``hookbridge api`` and for the tests."""
    limits = GuardLimits(
        header_timeout_s=settings.api_header_timeout_s,
        body_idle_timeout_s=settings.api_body_idle_timeout_s,
        max_connections=max_connections(settings),
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(limits),
        timeout_keep_alive=max(1, round(settings.api_keepalive_timeout_s)),
        h11_max_incomplete_event_size=16 * 1024,
        log_config=None,
        access_log=False,
        server_header=False,  # no "server: uvicorn" banner
        **options,
    )
