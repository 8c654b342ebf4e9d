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

from redis.exceptions import RedisError
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from service import domain, logs
from service.api.body import query
from service.api.context import Context
from service.api.events import (
    SLOT_LEASE_S,
    WAIT_SLICE_S,
    drop_slot,
    feed_of,
    filters,
    position,
    read,
    take_slot,
)
from service.api.models import RunStreamQuery, StreamQuery
from service.domain import TERMINAL
from service.records import Run
from service.store.feed import FeedFilter, FeedRead, IteratorTrimmed

log = logs.get("hookbridge.api")
PAGE = 100
# A run's events are looked for from this long before it was accepted: API pods' and Redis's clocks
# (the feed's ids are Redis's milliseconds) may disagree by that much.
CLOCK_SKEW_MS = 60_000
_TERMINAL_EVENTS = frozenset(domain.TERMINAL_EVENT.values())
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # nginx: do not buffer the stream


def _last_event_id(request: Request, q: StreamQuery | RunStreamQuery) -> str:
    header = request.headers.get("last-event-id")
    if header:
        return position(header, "Last-Event-ID")
    return position(q.last_event_id, "last_event_id")


def _frame(event_id: str, event_type: str, data: str) -> bytes:
    return f"id: {event_id}\nevent: {event_type}\ndata: {data}\n\n".encode()


async def _events(
    ctx: Context, client: str, token: str, page: FeedRead, only: FeedFilter, *, run_ended: bool | None
) -> AsyncIterator[bytes]:
    """The stream's body; it holds the slot ``token`` until it ends. ``run_ended`` is None for the
    client's stream; for a run's stream, whether the run had ended when the stream opened (its terminal
    event is then in the feed already, or gone with retention: the stream closes at the feed's end)."""
    feed = feed_of(ctx)
    heartbeat_s = ctx.settings.sse_heartbeat_s
    idle_since = time.monotonic()
    try:
        yield b": connected\n\n"
        while True:
            for event in page.events:
                envelope = event.envelope()
                yield _frame(event.id, envelope["type"], json.dumps(envelope, separators=(",", ":")))
                if run_ended is not None and envelope["type"] in _TERMINAL_EVENTS:
                    return
                idle_since = time.monotonic()
            if page.done:
                if run_ended:
                    return
                arrived = await feed.wait(client, page.iterator, min(WAIT_SLICE_S, heartbeat_s))
                if not arrived and time.monotonic() - idle_since >= heartbeat_s:
                    idle_since = time.monotonic()
                    yield b": keep-alive\n\n"
                await feed.renew_slot(client, token, now_ms=domain.now_ms(), lease_s=SLOT_LEASE_S)
            page = await feed.read(client, page.iterator, limit=PAGE, now_ms=domain.now_ms(), only=only)
    except (RedisError, OSError, IteratorTrimmed) as exc:
        # The client reconnects with Last-Event-ID and loses nothing (or learns of a gap: 410).
        log.warning("event stream ended", error=type(exc).__name__)
    finally:
        await drop_slot(ctx, client, token)


async def _open(
    request: Request, client: str, after: str, only: FeedFilter, *, run_ended: bool | None = None
) -> Response:
    ctx = Context.of(request)
    if request.method == "HEAD":  # the headers a GET would have, and no stream that nobody reads
        return Response(media_type="text/event-stream", headers=_HEADERS)
    # The slot and the first page come before the answer starts, so that too many streams, or a bad or
    # expired position, is a problem answer rather than a broken stream.
    token = await take_slot(ctx, client)
    try:
        page = await read(feed_of(ctx), client, after, limit=PAGE, only=only)
    except BaseException:
        await drop_slot(ctx, client, token)
        raise
    body = _events(ctx, client, token, page, only, run_ended=run_ended)
    return StreamingResponse(body, media_type="text/event-stream", headers=_HEADERS)


class EventsStream(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, client = Context.authenticated(request)
        q = query(request, StreamQuery, lists=("type",))
        return await _open(request, client, _last_event_id(request, q), filters(q, ctx))


class RunStream(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, client, run = await Context.owned(request, Run)
        after = _last_event_id(request, query(request, RunStreamQuery))
        if not after:
            start = run.created_at - CLOCK_SKEW_MS
            if start > domain.now_ms() - int(ctx.settings.retention_s * 1000):
                after = f"{start}-0"  # a position before the run's first event; else from the oldest kept
        ended = run.status in TERMINAL
        return await _open(request, client, after, FeedFilter(run_id=run.id), run_ended=ended)


routes = [Route("/v1/events/stream", EventsStream), Route("/v1/runs/{run_id}/stream", RunStream)]
