"""``GET /v1/events``: the client's event feed, for apps that cannot take callbacks.

A page of events after an opaque ``iterator`` (a position in the client's Redis Stream), filtered by
``type``, ``run_id`` and ``vendor``; with ``wait`` (up to 30 s) the request is held until a matching
event arrives. The parameter parsing here is shared with the server-sent event streams (streams.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from redis.exceptions import RedisError
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.api.body import query
from service.api.context import Context
from service.api.models import EventQuery, FeedQuery
from service.api.problems import (
    InvalidIterator,
    IteratorExpired,
    RateLimited,
    TooManyStreams,
    ValidationFailed,
)
from service.api.views import JSONResponse
from service.core import domain
from service.observability import logs
from service.store import feed as feeds
from service.store.feed import Feed, FeedFilter, FeedRead, ScanRate, valid_iterator

log = logs.get("hookbridge.api")
# A waiting reader blocks in slices this long: the blocking client's socket timeout (10 s) stays far.
WAIT_SLICE_S = 5.0
# A slot's lease, renewed after every slice: a pod that dies frees its slots this long after.
SLOT_LEASE_S = 4 * WAIT_SLICE_S
# A held reader over its client's scan rate sleeps at least this long before it reads again: a few reads a
# second per reader, however many readers share the rate (they would otherwise all wake each time the
# rate has room for one more read, and race for it).
THROTTLED_MIN_S = 0.1
_TYPE_CHOICES = (*domain.EVENT_TYPES, "run.*")


def feed_of(ctx: Context) -> Feed:
    assert ctx.feed is not None, "the app's lifespan makes the feed"
    return ctx.feed


def _invalid(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}.", [{"field": name, "message": message}])


def filters(q: FeedQuery, ctx: Context) -> FeedFilter:
    """``type`` (exact types or ``run.*``), ``run_id``, ``vendor``, as the feed filters them."""
    types = [t for t in (q.type or "").split(",") if t]
    bad = [t for t in types if t not in _TYPE_CHOICES]
    if bad:
        raise _invalid("type", f"{bad[0]!r} is none of {', '.join(_TYPE_CHOICES)}")
    if q.vendor is not None and q.vendor not in ctx.settings.vendors:
        raise _invalid("vendor", f"{q.vendor!r} is none of {', '.join(ctx.settings.vendors)}")
    return FeedFilter(tuple(dict.fromkeys(types)), q.run_id or "", q.vendor or "")


def position(value: str | None, name: str) -> str:
    """An iterator or a Last-Event-ID: "" when absent."""
    if value is None or value == "":
        return ""
    if not valid_iterator(value):
        raise InvalidIterator(f"{name}: not an iterator this API gave out.")
    return value


def scan_rate(ctx: Context) -> ScanRate:
    """The client's feed entries scanned per second over all its reads (``FEED_SCAN_RATE_PER_S``), and
    one request's budget (``FEED_SCAN_BUDGET``) at once."""
    return ScanRate(ctx.settings.feed_scan_rate_per_s, ctx.settings.feed_scan_budget)


async def read(
    ctx: Context,
    client: str,
    after: str,
    *,
    limit: int,
    only: FeedFilter,
    scan: int = feeds.SCAN,
    hold: bool = False,
) -> FeedRead:
    """One page (``scan`` entries read at most, charged to the client's scan rate), with the feed's
    refusals as problems. A read over the client's scan rate is ``429 rate_limited`` with ``Retry-After``,
    unless the caller ``hold``s its reader (a long-poll, a stream): it then gets the empty page with
    ``throttled_s`` and waits that long itself."""
    try:
        page = await feed_of(ctx).read(
            client, after, limit=limit, now_ms=domain.now_ms(), only=only, scan=scan, rate=scan_rate(ctx)
        )
    except feeds.IteratorTrimmed:
        raise IteratorExpired(
            "The iterator is older than the retention window (HOOKBRIDGE_RETENTION_S): events after it may "
            "be gone. Start again without an iterator, from the oldest event kept."
        ) from None
    except feeds.IteratorInvalid:
        raise InvalidIterator("iterator: not an iterator this API gave out.") from None
    if page.throttled_s and not hold:
        rate = ctx.settings.feed_scan_rate_per_s
        raise RateLimited(
            f"This client scanned more than {rate:g} feed entries per second over its reads "
            "(HOOKBRIDGE_FEED_SCAN_RATE_PER_S): a filter that matches little in a long feed; retry after the "
            "time in Retry-After, or wait with ?wait=.",
            retry_after=max(1, math.ceil(page.throttled_s)),
        )
    return page


async def take_slot(ctx: Context, client: str) -> str:
    """One of the client's ``MAX_STREAMS_PER_CLIENT`` slots (streams and waiting long-polls, across every
    API pod) and one of this pod's blocking lanes (``FEED_BLOCKING_CONNECTIONS``, shared fairly between
    clients: ``feed.admit``), as a token to renew and drop; 429 ``too_many_streams`` when either is full,
    never a 503 for a pool that ran out while Redis is healthy."""
    feed = feed_of(ctx)
    token, cap = domain.new_id("slot"), ctx.settings.max_streams_per_client
    if not feed.lanes.take(client):
        raise TooManyStreams(
            "This API pod's blocking readers are all in use, or this client has its share of them "
            "(HOOKBRIDGE_FEED_BLOCKING_CONNECTIONS); retry after the time in Retry-After.",
            retry_after=math.ceil(WAIT_SLICE_S),
        )
    try:
        taken = await feed.take_slot(client, token, now_ms=domain.now_ms(), lease_s=SLOT_LEASE_S, cap=cap)
    except BaseException:
        feed.lanes.give_back(client)
        raise
    if not taken:
        feed.lanes.give_back(client)
        raise TooManyStreams(
            f"This client already has {cap} open event streams or waiting long-polls "
            "(HOOKBRIDGE_MAX_STREAMS_PER_CLIENT); close one, or retry after the time in Retry-After.",
            retry_after=math.ceil(WAIT_SLICE_S),
        )
    return token


async def renew_slot(ctx: Context, client: str, token: str) -> bool:
    """False when the slot is lost (its lease ran out and it may be another stream's) or Redis cannot be
    reached: the stream or long-poll then ends, so that the cap holds for its whole life."""
    try:
        return await feed_of(ctx).renew_slot(client, token, now_ms=domain.now_ms(), lease_s=SLOT_LEASE_S)
    except (RedisError, OSError) as exc:
        log.warning("stream slot not renewed", error=type(exc).__name__)
        return False


async def drop_slot(ctx: Context, client: str, token: str) -> None:
    """Frees the slot and the lane; when Redis cannot be reached, the slot's lease frees it
    (``SLOT_LEASE_S``): a stream that ends because Redis died ends cleanly, without a traceback."""
    feed = feed_of(ctx)
    feed.lanes.give_back(client)
    with anyio.CancelScope(shield=True):  # a stream ends by cancellation when its client hangs up
        try:
            await feed.drop_slot(client, token)
        except (RedisError, OSError) as exc:
            log.warning("stream slot left to its lease", error=type(exc).__name__)


@asynccontextmanager
async def stream_slot(ctx: Context, client: str) -> AsyncIterator[str]:
    token = await take_slot(ctx, client)
    try:
        yield token
    finally:
        await drop_slot(ctx, client, token)


async def _long_poll(
    request: Request, client: str, page: FeedRead, *, limit: int, only: FeedFilter, wait: float
) -> FeedRead:
    ctx = Context.of(request)
    feed = feed_of(ctx)
    deadline = time.monotonic() + wait
    budget = ctx.settings.feed_scan_budget
    scanned = page.scanned
    async with stream_slot(ctx, client) as token:
        renewed_at = time.monotonic()  # the slot's lease is SLOT_LEASE_S: four slices
        while not page.events:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or await request.is_disconnected():  # nobody left to answer
                break
            if page.throttled_s:
                # The client's scan rate is spent (its other reads count too): held until it refills,
                # within the wait it asked for, rather than answered at once to loop again.
                await anyio.sleep(min(remaining, max(page.throttled_s, THROTTLED_MIN_S), WAIT_SLICE_S))
            elif page.done:
                await feed.wait(client, page.iterator, min(remaining, WAIT_SLICE_S))
                renewed_at = 0.0  # after every slice, as before the scan rate
            if time.monotonic() - renewed_at >= WAIT_SLICE_S:  # not after every sleep of a held reader
                renewed_at = time.monotonic()
                if not await renew_slot(ctx, client, token):
                    break
            if scanned >= budget:
                # The request's scan budget is spent (a filter that matches nothing in a long feed): it
                # answers what it has and the iterator to resume from, rather than rescanning.
                break
            page = await read(
                ctx, client, page.iterator, limit=limit, only=only, scan=budget - scanned, hold=True
            )
            scanned += page.scanned
    return page


class Events(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, client = Context.authenticated(request)
        q = query(request, EventQuery, lists=("type",))
        only = filters(q, ctx)
        after = position(q.iterator, "iterator")
        page = await read(ctx, client, after, limit=q.limit, only=only, hold=q.wait > 0)
        if not page.events and q.wait > 0:
            page = await _long_poll(request, client, page, limit=q.limit, only=only, wait=q.wait)
        return JSONResponse(
            {"data": [e.envelope() for e in page.events], "iterator": page.iterator, "done": page.done}
        )


routes = [Route("/v1/events", Events)]
