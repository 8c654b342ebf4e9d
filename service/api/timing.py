"""The API's request-duration histogram, as its own ASGI middleware: labelled by the route's template
(``/v1/runs/{run_id}``, or ``unmatched``), the method and the status class, never by a raw path."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.observability import metrics


class RequestTiming:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # a response that never started counts as a server error
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            # The router wrote the matched route into this same scope on its way in.
            route = getattr(scope.get("route"), "path", "unmatched")
            metrics.observe_api_request(route, scope["method"], status, time.perf_counter() - started)
