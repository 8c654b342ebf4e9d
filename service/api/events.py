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
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service import domain
from service.api.context import Context
from service.api.validation import choice_param, is_id, limit_param
from service.domain import Gone, InvalidInput, RateLimited
from service.store.feed import (
    Feed,
    FeedFilter,
    FeedPage,
    IteratorExpired,
    IteratorInvalid,
    valid_iterator,
)

MAX_WAIT_S = 30.0
# A waiting reader blocks in slices this long: the blocking client's socket timeout (10 s) stays far.
WAIT_SLICE_S = 5.0
# A slot's lease, renewed after every slice: a pod that dies frees its slots this long after.
SLOT_LEASE_S = 4 * WAIT_SLICE_S
_TYPE_CHOICES = (*domain.EVENT_TYPES, "run.*")


def feed_of(ctx: Context) -> Feed:
    assert ctx.feed is not None, "the app's lifespan makes the feed"
    return ctx.feed


def _invalid(name: str, message: str, *, code: str = "validation_error") -> InvalidInput:
    return InvalidInput(f"{name}: {message}.", code=code, errors=[{"field": name, "message": message}])


def filters(request: Request, ctx: Context) -> FeedFilter:
    """``type`` (repeated or comma-separated: exact types or ``run.*``), ``run_id``, ``vendor``."""
    types = [t for raw in request.query_params.getlist("type") for t in raw.split(",") if t]
    bad = [t for t in types if t not in _TYPE_CHOICES]
    if bad or len(types) > len(_TYPE_CHOICES):
        raise _invalid("type", f"each one of {', '.join(_TYPE_CHOICES)}")
    run_id = request.query_params.get("run_id", "")
    if run_id and not is_id("run", run_id):
        raise _invalid("run_id", "a run id (run_...)")
    vendor = choice_param(request, "vendor", tuple(ctx.settings.vendors)) or ""
    return FeedFilter(tuple(dict.fromkeys(types)), run_id, vendor)


def position(value: str | None, name: str) -> str:
    """An iterator or a Last-Event-ID: "" when absent."""
    if value is None or value == "":
        return ""
    if not valid_iterator(value):
        raise _invalid(name, "an iterator this API gave out", code="invalid_iterator")
    return value


def wait_param(request: Request) -> float:
    raw = request.query_params.get("wait", "0")
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not math.isfinite(wait) or not 0 <= wait <= MAX_WAIT_S:
        raise _invalid("wait", f"seconds from 0 to {MAX_WAIT_S:g}")
    return wait


async def read(feed: Feed, client: str, after: str, *, limit: int, only: FeedFilter) -> FeedPage:
    """One page, with the feed's refusals as problems."""
    try:
        return await feed.read(client, after, limit=limit, now_ms=domain.now_ms(), only=only)
    except IteratorExpired:
        raise Gone(
            "The iterator is older than the retention window (HOOKBRIDGE_RETENTION_S): events after it may "
            "be gone. Start again without an iterator, from the oldest event kept.",
            code="iterator_expired",
        ) from None
    except IteratorInvalid:
        raise _invalid("iterator", "an iterator this API gave out", code="invalid_iterator") from None


async def take_slot(ctx: Context, client: str) -> str:
    """One of the client's ``MAX_STREAMS_PER_CLIENT`` slots (streams and waiting long-polls, across every
    API pod), as a token to renew and drop; 429 ``too_many_streams`` when none is free."""
    token, cap = domain.new_id("slot"), ctx.settings.max_streams_per_client
    if not await feed_of(ctx).take_slot(client, token, now_ms=domain.now_ms(), lease_s=SLOT_LEASE_S, cap=cap):
        raise RateLimited(
            f"This client already has {cap} open event streams or waiting long-polls "
            "(HOOKBRIDGE_MAX_STREAMS_PER_CLIENT); close one, or retry after the time in Retry-After.",
            code="too_many_streams",
            retry_after=math.ceil(WAIT_SLICE_S),
        )
    return token


async def drop_slot(ctx: Context, client: str, token: str) -> None:
    with anyio.CancelScope(shield=True):  # a stream ends by cancellation when its client hangs up
        await feed_of(ctx).drop_slot(client, token)


@asynccontextmanager
async def stream_slot(ctx: Context, client: str) -> AsyncIterator[str]:
    token = await take_slot(ctx, client)
    try:
        yield token
    finally:
        await drop_slot(ctx, client, token)


async def _long_poll(
    request: Request, client: str, page: FeedPage, *, limit: int, only: FeedFilter, wait: float
) -> FeedPage:
    ctx = Context.of(request)
    feed = feed_of(ctx)
    deadline = time.monotonic() + wait
    async with stream_slot(ctx, client) as token:
        while not page.events:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or await request.is_disconnected():  # nobody left to answer
                break
            if page.done:
                await feed.wait(client, page.iterator, min(remaining, WAIT_SLICE_S))
                await feed.renew_slot(client, token, now_ms=domain.now_ms(), lease_s=SLOT_LEASE_S)
            page = await read(feed, client, page.iterator, limit=limit, only=only)
    return page


async def list_events(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    limit = limit_param(request)
    only = filters(request, ctx)
    after = position(request.query_params.get("iterator"), "iterator")
    wait = wait_param(request)
    page = await read(feed_of(ctx), client, after, limit=limit, only=only)
    if not page.events and wait > 0:
        page = await _long_poll(request, client, page, limit=limit, only=only, wait=wait)
    return JSONResponse(
        {"data": [e.envelope() for e in page.events], "iterator": page.iterator, "done": page.done}
    )


routes = [Route("/v1/events", list_events, methods=["GET"])]
