"""The API application: routes, error mapping, health, metrics, the OpenAPI document."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import structlog
from redis import exceptions as redis_errors
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import domain, logs, metrics
from service.api import events, runs, streams, subscriptions
from service.api.auth import KeyRing
from service.api.context import Context
from service.api.openapi import document as openapi_document
from service.api.openapi import vendors_of
from service.api.problems import from_error, problem
from service.delivery.urlsafety import Policy
from service.settings import Settings
from service.store import Store, connect
from service.store.feed import Feed

log = logs.get("hookbridge.api")
MAX_HEADER_BYTES = 16 * 1024
CLIENT_CLOSED = 499  # nginx's code for "the client closed the request"; counted, never sent


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    ctx = Context.of(request)
    try:
        await ctx.store.ping()
    except (RedisError, OSError):
        metrics.REDIS_UP.set(0)
        return JSONResponse({"status": "redis unavailable"}, status_code=503, headers={"Retry-After": "1"})
    metrics.REDIS_UP.set(1)
    return JSONResponse({"status": "ok"})


async def metrics_endpoint(request: Request) -> Response:
    return Response(metrics.render(), media_type="text/plain; version=0.0.4")


async def openapi(request: Request) -> Response:
    settings = Context.of(request).settings
    return JSONResponse(openapi_document(vendors_of(settings)))


async def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, domain.HookbridgeError)
    return from_error(request, exc)


# Only a Redis that cannot answer is a 503; any other Redis error (WRONGTYPE, a script error) is a fault of
# ours and must never be reachable from input: ids are checked before they become keys.
_REDIS_DOWN = (
    redis_errors.ConnectionError,  # BusyLoadingError too
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,  # a replica after a failover, until the client reconnects
    redis_errors.MasterDownError,
    redis_errors.TryAgainError,
    OSError,
)


async def _redis_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, _REDIS_DOWN):
        return await _redis_down(request, exc)
    return await _unexpected(request, exc)


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The client hung up before its request was read: nothing to answer, nothing went wrong here.
    log.info("client disconnected", path=request.url.path)
    return Response(status_code=CLIENT_CLOSED)


async def _redis_down(request: Request, exc: Exception) -> Response:
    log.warning("redis unavailable", error=type(exc).__name__)
    return problem(
        503,
        "unavailable",
        "Service unavailable",
        "The store is unreachable; try again shortly.",
        headers={"Retry-After": "1"},
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return problem(exc.status_code, code, str(exc.detail), str(exc.detail), headers=dict(exc.headers or {}))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error", path=request.url.path)
    return problem(500, "internal_error", "Internal error", "Something went wrong on our side.")


class RequestContext:
    """Binds a request id to the logs, refuses oversized headers, and counts requests by route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADER_BYTES:
            response = problem(
                431,
                "headers_too_large",
                "Request header fields too large",
                f"The request's headers exceed {MAX_HEADER_BYTES} bytes.",
            )
            await response(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=domain.new_id("req")):
            try:
                await self.app(scope, receive, send_wrapper)
            finally:
                route = scope.get("route")
                path = getattr(route, "path", "unmatched")
                metrics.API_REQUESTS.labels(scope["method"], path, str(status)).inc()
                if path.startswith("/v1/"):
                    log.info(
                        "request",
                        method=scope["method"],
                        path=path,
                        status=status,
                        ms=round((time.perf_counter() - started) * 1000, 1),
                    )


def one_route_per_path(routes: list[Route]) -> list[Route]:
    """Starlette answers 405 from the first route whose path matches, naming only its methods in
    ``Allow``; merging the routes of one path into one route makes ``Allow`` list them all."""
    by_path: dict[str, dict[str, Any]] = {}
    for route in routes:
        for method in route.methods or ():
            by_path.setdefault(route.path, {})[method] = route.endpoint
    merged = []
    for path, endpoints in by_path.items():
        if len(endpoints) == 1 or set(endpoints) == {"GET", "HEAD"}:
            merged += [r for r in routes if r.path == path]
            continue

        async def dispatch(request: Request, endpoints: dict[str, Any] = endpoints) -> Response:
            response: Response = await endpoints[request.method](request)
            return response

        merged.append(Route(path, dispatch, methods=sorted(endpoints)))
    return merged


def create_app(settings: Settings, *, store: Store | None = None, redis_url: str | None = None) -> Starlette:
    """The app; it connects to Redis in its lifespan unless a ``store`` is given."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        metrics.set_clients(client for client, _ in settings.api_keys)
        own = store is None
        s = store or Store(connect(settings, url=redis_url), settings)
        app.state.ctx = Context(
            settings=settings,
            store=s,
            keys=KeyRing(settings.api_keys),
            url_policy=Policy(settings.callback_allowed_networks, settings.callback_blocked_networks),
            log=log,
            # Waiting feed readers block on a Redis client of their own, never on the shared pool.
            feed=Feed(s.redis, connect(settings, url=redis_url), settings.retention_s),
        )
        try:
            yield {}
        finally:
            await app.state.ctx.feed.close()
            if own:
                await s.close()

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics_endpoint),
        Route("/openapi.json", openapi),
        *one_route_per_path([*runs.routes, *subscriptions.routes, *events.routes, *streams.routes]),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(RequestContext)],
        exception_handlers={
            domain.HookbridgeError: _domain_error,
            ClientDisconnect: _client_gone,
            RedisError: _redis_error,
            ConnectionError: _redis_down,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
    )
