"""Server-sent events: ``GET /v1/events/stream`` (all of the client's events) and
``GET /v1/runs/{id}/stream`` (one run's, from its first, closing after its terminal event).

Each event is ``id: <feed id>``, ``event: <type>``, ``data: <the feed's event JSON>``; ``Last-Event-ID``
(or ``?last_event_id=``, for clients that cannot set headers) resumes after that event. A comment line
(``: keep-alive``) goes out after every ``SSE_HEARTBEAT_S`` without events, so that proxies keep the
connection open. Each open stream holds one of the client's ``MAX_STREAMS_PER_CLIENT`` slots.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import anyio
from redis.exceptions import RedisError
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from service.api import events
from service.api.body import query
from service.api.context import Context
from service.api.events import (
    THROTTLED_MIN_S,
    WAIT_SLICE_S,
    drop_slot,
    feed_of,
    filters,
    position,
    read,
    renew_slot,
    scan_rate,
    take_slot,
)
from service.api.models import RunStreamQuery, StreamQuery
from service.core import domain
from service.core.domain import TERMINAL
from service.core.records import Run
from service.observability import logs
from service.serving.server import ABORT
from service.store.feed import FeedFilter, FeedRead, IteratorTrimmed

log = logs.get("hookbridge.api")
PAGE = 100
# A run's events are looked for from this long before it was accepted: API pods' and Redis's clocks
# (the feed's ids are Redis's milliseconds) may disagree by that much.
CLOCK_SKEW_MS = 60_000
_TERMINAL_EVENTS = frozenset(domain.TERMINAL_EVENT.values())
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}  # nginx: do not buffer the stream
_RAW_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    *((k.lower().encode(), v.encode()) for k, v in _HEADERS.items()),
]


def _last_event_id(request: Request, q: StreamQuery | RunStreamQuery) -> str:
    header = request.headers.get("last-event-id")
    if header:
        return position(header, "Last-Event-ID")
    return position(q.last_event_id, "last_event_id")


def _frame(event_id: str, event_type: str, data: str) -> bytes:
    return f"id: {event_id}\nevent: {event_type}\ndata: {data}\n\n".encode()


async def _events(
    ctx: Context, client: str, page: FeedRead, only: FeedFilter, *, run_ended: bool | None
) -> AsyncIterator[bytes]:
    """The stream's frames. ``run_ended`` is None for the client's stream; for a run's stream, whether the
    run had ended when the stream opened (its terminal event is then in the feed already, or gone with
    retention: the stream closes at the feed's end). Every read is charged to the client's scan rate
    (``FEED_SCAN_RATE_PER_S``, shared with its long-polls and page reads): a filter that matches nothing in
    a long feed waits for it to refill rather than rescanning."""
    heartbeat_s = ctx.settings.sse_heartbeat_s
    idle_since = time.monotonic()
    yield b": connected\n\n"
    while True:
        for event in page.events:
            envelope = event.envelope()
            yield _frame(event.id, envelope["type"], json.dumps(envelope, separators=(",", ":")))
            if run_ended is not None and envelope["type"] in _TERMINAL_EVENTS:
                return
            idle_since = time.monotonic()
        if page.throttled_s:
            await anyio.sleep(min(max(page.throttled_s, THROTTLED_MIN_S), WAIT_SLICE_S, heartbeat_s))
        elif page.done:
            if run_ended:
                return
            await feed_of(ctx).wait(client, page.iterator, min(WAIT_SLICE_S, heartbeat_s))
        if time.monotonic() - idle_since >= heartbeat_s:  # waiting for events, or for its scan rate
            idle_since = time.monotonic()
            yield b": keep-alive\n\n"
        # The feed's own read: an iterator that expired mid-stream ends the stream (IteratorTrimmed), not
        # a problem answer, which can no longer be sent.
        page = await feed_of(ctx).read(
            client, page.iterator, limit=PAGE, now_ms=domain.now_ms(), only=only, rate=scan_rate(ctx)
        )


class EventStream:
    """The ASGI answer of a stream. It holds the slot ``token`` (and this pod's lane) until it ends, and
    keeps the cap true for its whole life, whatever its reader does:

    - the slot is renewed on a timer of its own (every quarter lease), not only when the stream reaches
      the feed's end; a renewal that fails (the slot is lost, Redis cannot be reached) ends the stream;
    - a send that takes longer than ``SSE_SEND_TIMEOUT_S`` (a reader that takes nothing: the socket's
      buffers are full) drops the connection, with what is buffered for it; what one stream holds is then
      one page (``feed.PAGE_BYTES``) and the socket's buffers;
    - after ``SSE_MAX_S`` it ends, so that no stream holds a pod and a slot for ever;
    - an end for any other reason (Redis gone, the iterator expired, the run's terminal event) ends the
      chunked body cleanly: the client reconnects with Last-Event-ID and loses nothing (or learns of a gap:
      410)."""

    def __init__(self, ctx: Context, client: str, token: str, body: AsyncIterator[bytes]) -> None:
        self.ctx, self.client, self.token, self.body = ctx, client, token, body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        timeout_s = self.ctx.settings.sse_send_timeout_s
        stalled = False
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._keep_slot, tasks.cancel_scope)
                tasks.start_soon(self._hang_up, receive, tasks.cancel_scope)
                try:
                    with anyio.fail_after(timeout_s):
                        await send({"type": "http.response.start", "status": 200, "headers": _RAW_HEADERS})
                    with anyio.move_on_after(self.ctx.settings.sse_max_s):
                        async for chunk in self.body:
                            with anyio.fail_after(timeout_s):
                                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except TimeoutError:
                    stalled = True
                except (RedisError, OSError, IteratorTrimmed) as exc:
                    log.warning("event stream ended", error=type(exc).__name__)
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.body.aclose()  # type: ignore[attr-defined]
                await drop_slot(self.ctx, self.client, self.token)
        if stalled:
            log.info("event stream closed: its reader took nothing", seconds=timeout_s)
            _abort(scope)
            return
        try:
            with anyio.fail_after(timeout_s):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            _abort(scope)

    async def _keep_slot(self, stop: anyio.CancelScope) -> None:
        while True:
            await anyio.sleep(events.SLOT_LEASE_S / 4)
            if not await renew_slot(self.ctx, self.client, self.token):
                log.info("event stream ended: its slot was lost")
                stop.cancel()
                return

    async def _hang_up(self, receive: Receive, stop: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        stop.cancel()


def _abort(scope: Scope) -> None:
    abort = scope.get("extensions", {}).get(ABORT)
    if abort is not None:
        abort()
    else:  # another server: an error it logs, and a closed connection
        raise StreamStalled("the reader took nothing within HOOKBRIDGE_SSE_SEND_TIMEOUT_S")


class StreamStalled(Exception):
    pass


async def _open(
    request: Request, client: str, after: str, only: FeedFilter, *, run_ended: bool | None = None
) -> Response | EventStream:
    ctx = Context.of(request)
    if request.method == "HEAD":  # the headers a GET would have, and no stream that nobody reads
        return Response(media_type="text/event-stream", headers=_HEADERS)
    # The slot and the first page come before the answer starts, so that too many streams, or a bad or
    # expired position, is a problem answer rather than a broken stream.
    token = await take_slot(ctx, client)
    try:
        page = await read(ctx, client, after, limit=PAGE, only=only, hold=True)
    except BaseException:
        await drop_slot(ctx, client, token)
        raise
    return EventStream(ctx, client, token, _events(ctx, client, page, only, run_ended=run_ended))


class EventsStream(HTTPEndpoint):
    async def get(self, request: Request) -> Response | EventStream:
        ctx, client = Context.authenticated(request)
        q = query(request, StreamQuery, lists=("type",))
        return await _open(request, client, _last_event_id(request, q), filters(q, ctx))


class RunStream(HTTPEndpoint):
    async def get(self, request: Request) -> Response | EventStream:
        ctx, client, run = await Context.owned(request, Run)
        after = _last_event_id(request, query(request, RunStreamQuery))
        if not after:
            start = run.created_at - CLOCK_SKEW_MS
            if start > domain.now_ms() - int(ctx.settings.retention_s * 1000):
                after = f"{start}-0"  # a position before the run's first event; else from the oldest kept
        ended = run.status in TERMINAL
        return await _open(request, client, after, FeedFilter(run_id=run.id), run_ended=ended)


routes = [Route("/v1/events/stream", EventsStream), Route("/v1/runs/{run_id}/stream", RunStream)]
