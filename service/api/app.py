"""The API application: routes, error mapping, health, metrics, the OpenAPI document."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import traceback
from collections.abc import AsyncIterator
from typing import Any

import structlog
from redis import exceptions as redis_errors
from redis.exceptions import RedisClusterException, RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import console
from service.api import events, models, problems, runs, streams, subscriptions
from service.api.auth import KeyRing
from service.api.context import LOG_FIELDS, Context
from service.api.openapi import document as openapi_document
from service.api.problems import (
    HeadersTooLarge,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    Problem,
    Unavailable,
)
from service.api.views import JSONResponse
from service.config.settings import Settings
from service.core import domain
from service.delivery.urlsafety import Policy
from service.observability import logs, metrics, tracing
from service.store import Store, connect
from service.store.connection import ReplicasBehind, replicas_short
from service.store.feed import Feed, Lanes

LOGGER = "hookbridge.api"
log = logs.get(LOGGER)
MAX_HEADER_BYTES = 16 * 1024
CLIENT_CLOSED = 499  # nginx's code for "the client closed the request"; counted, never sent


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready while Redis answers and, with ``REDIS_WAIT_REPLICAS``, while every primary has that many
    replicas online: without them every acknowledged write would wait its timeout and fail."""
    ctx = Context.of(request)
    try:
        await ctx.store.ping()
        short = await replicas_short(ctx.store.redis, ctx.settings.redis_wait_replicas)
    except (*_REDIS_DOWN, RedisClusterException):
        metrics.REDIS_UP.set(0)
        return JSONResponse({"status": "redis unavailable"}, status_code=503, headers={"Retry-After": "1"})
    metrics.REDIS_UP.set(1)
    if short:
        body = {"status": "too few replicas", "primaries": short}
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})
    return JSONResponse({"status": "ok"})


async def metrics_endpoint(request: Request) -> Response:
    return Response(metrics.render(), media_type="text/plain; version=0.0.4")


async def openapi(request: Request) -> Response:
    ctx = Context.of(request)
    return Response(ctx.openapi, media_type="application/json")


# Only a Redis that cannot answer is a 503; any other Redis error (WRONGTYPE, a script error) is a fault of
# ours and must never be reachable from input: ids are checked before they become keys.
_REDIS_DOWN = (
    redis_errors.ConnectionError,  # BusyLoadingError, MaxConnectionsError too
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,  # a replica after a failover, until the client reconnects
    redis_errors.TryAgainError,  # a slot migrating, past the cluster client's retries
    # A cluster mid-failover: CLUSTERDOWN and MASTERDOWN (ClusterDownError), MOVED and ASK past the
    # client's redirections ("TTL exhausted", a ClusterError), MOVED or ASK left in a pipeline's reply.
    redis_errors.ClusterError,
    redis_errors.AskError,
    redis_errors.SlotNotCoveredError,  # the map the client holds has a hole until it is re-read
    ReplicasBehind,  # WAIT: the write is on the primary, not yet on REDIS_WAIT_REPLICAS replicas
    OSError,
)


# redis-py's asyncio connection, where a write on a connection torn down under it (a failover: the cluster
# client drops a node's connections while another request is sending on one) raises AttributeError or
# TypeError from the transport, not a ConnectionError (redis/redis-py#4287: past every retry, as here).
_REDIS_CONNECTION = os.path.join("redis", "asyncio", "connection.py")


def _redis_down(exc: BaseException) -> bool:
    """A fault of the store's availability: one of ``_REDIS_DOWN``, redis-py's cluster client failing to
    reach any node (a ``RedisClusterException`` raised from a connection error: it is no RedisError), or
    a write on a connection torn down under it (an AttributeError or TypeError raised in redis-py's
    asyncio connection; from anywhere else it stays a fault of ours)."""
    if isinstance(exc, _REDIS_DOWN):
        return True
    if isinstance(exc, (AttributeError, TypeError)):
        return any(
            frame.f_code.co_filename.endswith(_REDIS_CONNECTION)
            for frame, _ in traceback.walk_tb(exc.__traceback__)
        )
    return isinstance(exc, RedisClusterException) and isinstance(exc.__cause__, (*_REDIS_DOWN, RedisError))


async def _error(request: Request, exc: Exception) -> Response:
    """The answer to every exception: a problem as it is, the others by what they mean. The request id
    is set here as well as by :class:`RequestContext`: a 500 is answered outside that middleware."""
    rid = request.scope.get(REQUEST_ID_SCOPE)
    headers = {REQUEST_ID_HEADER: rid} if rid else None
    if isinstance(exc, ClientDisconnect):  # hung up before its request was read: nothing to answer
        log.info("client disconnected", path=request.url.path)
        return Response(status_code=CLIENT_CLOSED)
    if isinstance(exc, HTTPException):  # routing: no such path, or not this method (with Allow)
        cls = {404: NotFound, 405: MethodNotAllowed}.get(exc.status_code, InvalidRequest)
        return problems.response(
            cls(str(exc.detail)), request.url.path, headers={**(exc.headers or {}), **(headers or {})}
        )
    if isinstance(exc, ReplicasBehind):
        log.warning("write not replicated in time", error=str(exc))
        exc = Unavailable(
            "The write reached the store but not its replicas in time; it may exist. Retry with the "
            "same Idempotency-Key to get it."
        )
    elif _redis_down(exc):
        log.warning("redis unavailable", error=type(exc).__name__)
        exc = Unavailable("The store is unreachable; try again shortly.")
    elif not isinstance(exc, Problem):
        log.exception("unexpected error", path=request.url.path)
        exc = InternalError("Something went wrong on our side.")
    return problems.response(exc, request.url.path, headers=headers)


_NOSNIFF = (b"x-content-type-options", b"nosniff")
_NO_STORE = (b"cache-control", b"no-store")


_ANY_ANSWER_DROPS = frozenset({b"x-content-type-options", b"x-request-id"})
_V1_ANSWER_DROPS = _ANY_ANSWER_DROPS | {b"cache-control"}


def security_headers(
    path: str, headers: list[tuple[bytes, bytes]], request_id: tuple[bytes, bytes] | None = None
) -> list[tuple[bytes, bytes]]:
    """Every answer: ``nosniff``; every /v1 answer (tenant data, secrets) also ``Cache-Control: no-store``,
    in place of any other Cache-Control; and the request's ``X-Request-Id`` when given, in place of any
    other. One pass over the handler's headers."""
    v1 = path.startswith("/v1/") or path == "/v1"
    drops = _V1_ANSWER_DROPS if v1 else _ANY_ANSWER_DROPS
    out = [h for h in headers if h[0].lower() not in drops]
    out.append(_NOSNIFF)
    if v1:
        out.append(_NO_STORE)
    if request_id is not None:
        out.append(request_id)
    return out


REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID_SCOPE = "hookbridge.request_id"  # where the handlers (and _error) find the request's id
_REQUEST_ID_NAME = REQUEST_ID_HEADER.lower().encode()
# ASCII only: str.isalnum() would take "é" or "٣", which a log pipeline or a proxy may mangle.
_REQUEST_ID = re.compile(rb"[A-Za-z0-9._-]{1,128}")


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The caller's ``X-Request-Id`` when it is 1 to 128 of ``[A-Za-z0-9._-]``; else a fresh one. Only the
    first such header counts; any other value (too long, a space, non-ASCII) is replaced, never echoed."""
    for name, value in headers:
        if name == _REQUEST_ID_NAME:
            if _REQUEST_ID.fullmatch(value):
                return value.decode("ascii")
            break
    return domain.new_id("req")


class RequestContext:
    """Gives the request its id (``X-Request-Id``, echoed or made: on every answer, in every problem
    body and log line), refuses oversized headers, adds the security headers, counts and times requests
    by route (``hookbridge_api_requests_total``, ``hookbridge_api_request_duration_seconds``) and logs
    each /v1 one. Pure ASGI and one layer: the API's hot path goes through it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        outer_send = send
        path = scope["path"]
        rid = request_id(scope["headers"])
        scope[REQUEST_ID_SCOPE] = rid
        rid_header = (_REQUEST_ID_NAME, rid.encode("ascii"))
        status = 500  # a response that never started counts as a server error

        async def send_secure(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = security_headers(path, message.get("headers", []), rid_header)
                message = {**message, "headers": headers}
            await outer_send(message)

        if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADER_BYTES:
            too_large = HeadersTooLarge(f"The request's headers exceed {MAX_HEADER_BYTES} bytes.")
            response = problems.response(too_large, path, headers={REQUEST_ID_HEADER: rid})
            await response(scope, receive, send_secure)
            return
        started = time.perf_counter()
        # Tokens, not bound_contextvars(): that one reads the whole logging context first, on every request.
        tokens = structlog.contextvars.bind_contextvars(request_id=rid)
        try:
            await self.app(scope, receive, send_secure)
        finally:
            try:
                _account(scope, status, time.perf_counter() - started)
            finally:
                structlog.contextvars.reset_contextvars(**tokens)


def _account(scope: Scope, status: int, took: float) -> None:
    """A request's count and time by route, and its log line (a /v1 request's)."""
    # The router wrote the matched route into this same scope on its way in.
    route = getattr(scope.get("route"), "path", "unmatched")
    metrics.observe_api_request(route, scope["method"], status, took)
    if route.startswith("/v1/"):
        line = {"method": scope["method"], "path": route, "status": status, "ms": round(took * 1000, 1)}
        # What the handler named (a submit: its run and vendor), never in place of the above.
        logs.info(LOGGER, "request", {**scope.get(LOG_FIELDS, {}), **line})


def create_app(settings: Settings, *, store: Store | None = None, redis_url: str | None = None) -> Starlette:
    """The app; it connects to Redis in its lifespan unless a ``store`` is given. The request models and
    the OpenAPI document are built here, from these settings."""
    api_models = models.build(settings)
    openapi_body = json.dumps(openapi_document(api_models)).encode()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        metrics.set_clients(client for client, _ in settings.api_keys)
        own = store is None
        s = store or Store(connect(settings, url=redis_url), settings)
        # The writes an answer shows wait for REDIS_WAIT_REPLICAS on connections of their own (WAIT).
        durable = (
            Store(connect(settings, url=redis_url, durable=True), settings)
            if settings.redis_wait_replicas
            else None
        )
        # Waiting feed readers block on a Redis client of their own, never on the shared pool.
        lanes = Lanes(settings.feed_blocking_connections, share=settings.max_streams_per_client)
        feed = Feed(s.redis, connect(settings, url=redis_url), settings.retention_s, lanes=lanes)
        ctx = Context(
            settings=settings,
            store=s,
            keys=KeyRing(settings.api_keys),
            url_policy=Policy(settings.callback_allowed_networks, settings.callback_blocked_networks),
            models=api_models,
            openapi=openapi_body,
            log=log,
            feed=feed,
            durable_store=durable,
        )
        try:
            yield {"ctx": ctx}
        finally:
            await feed.close()
            if durable is not None:
                await durable.close()
            if own:
                await s.close()

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics_endpoint),
        Route("/openapi.json", openapi),
        *runs.routes,
        *subscriptions.routes,
        *events.routes,
        *streams.routes,
        *console.routes,  # the browser console over this API; not part of the OpenAPI document
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[*tracing.asgi_middleware(routes), Middleware(RequestContext)],
        exception_handlers=dict.fromkeys(
            (Problem, ClientDisconnect, RedisError, ConnectionError, HTTPException, Exception), _error
        ),
    )
