"""Where the API's CPU goes per request, without uvicorn or a client in the way: the app called as ASGI
directly (in this process, on a private ``redis-server``), 16 requests in flight, then CPU per request.

    python -m bench.api_profile                   # POST /v1/runs (URL document) and GET /v1/runs/{id}
    python -m bench.api_profile post --top 30     # and cProfile's 30 costliest functions (own time)
    python -m bench.api_profile log               # one JSON log line: ours, and through stdlib logging

The figures include the Redis client's side of each command; ``bench.api`` gives the rates over HTTP.
``log`` compares ``logs.configure("json")`` (structlog alone) with the same processors behind the stdlib
``logging`` machinery, which the API used before: 20,000 lines to ``/dev/null``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import logging
import os
import pstats
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import uvloop

from bench._common import AUTH, environment, url_run
from service.api.app import create_app
from service.dev.embedded_redis import EmbeddedRedis
from service.observability import logs
from service.vendors.registry import load_settings

REQUESTS = 3000
IN_FLIGHT = 16


async def _call(app: Any, state: dict[str, Any], method: str, path: str, body: bytes = b"") -> bytes:
    headers = [(b"host", b"bench"), (b"authorization", AUTH["Authorization"].encode())]
    if body:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": state,
    }
    sent = False
    out = io.BytesIO()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never hangs up
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.write(message.get("body", b""))

    await app(scope, receive, send)
    return out.getvalue()


async def _requests(which: str, top: int) -> None:
    server = EmbeddedRedis(appendonly=False).start()
    sink = open(os.devnull, "w")  # the log lines, written as in production, to nowhere
    sys.stderr = sink
    logs.configure("json", "INFO")
    try:
        # The benches' settings (the vendors' keys among them: a vendor without its key is refused at
        # submit); the simulator is never called, the app only queues the runs.
        settings = load_settings(environment(server.url, "http://127.0.0.1:9"))
        app = create_app(settings)
        async with app.router.lifespan_context(app) as state:
            bodies = [json.dumps(url_run(i)).encode() for i in range(REQUESTS)]
            ids = [json.loads(await _call(app, state, "POST", "/v1/runs", b))["id"] for b in bodies[:200]]
            phases: dict[str, Callable[[int], Awaitable[bytes]]] = {
                "post": lambda i: _call(app, state, "POST", "/v1/runs", bodies[i]),
                "get": lambda i: _call(app, state, "GET", f"/v1/runs/{ids[i % len(ids)]}"),
            }
            for name in [which] if which in phases else list(phases):
                await _phase(name, phases[name], top)
    finally:
        sys.stderr = sys.__stderr__
        sink.close()
        server.stop()


async def _phase(name: str, request: Callable[[int], Awaitable[bytes]], top: int) -> None:
    async def worker(first: int) -> None:
        for i in range(first, REQUESTS, IN_FLIGHT):
            await request(i)

    profile = cProfile.Profile() if top else None
    started = time.process_time()
    if profile:
        profile.enable()
    await asyncio.gather(*(worker(k) for k in range(IN_FLIGHT)))
    if profile:
        profile.disable()
    cpu_ms = (time.process_time() - started) / REQUESTS * 1000
    print(f"{name}: {cpu_ms:.3f} ms of CPU per request{' (under cProfile)' if profile else ''}")
    if profile:
        # HB_PROFILE_SORT=cumulative ranks by time below each function instead of its own.
        order = os.environ.get("HB_PROFILE_SORT", "tottime")
        pstats.Stats(profile, stream=sys.stdout).sort_stats(order).print_stats(top)


def _stdlib_logging() -> None:
    """The configuration before: structlog's processors, rendered by a stdlib handler's formatter."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel("INFO")


def _log_lines() -> None:
    n = 20_000
    for label, setup in (
        ("ours (structlog alone)", lambda: logs.configure("json", "INFO")),
        (
            "through stdlib logging",
            _stdlib_logging,
        ),
    ):
        with open(os.devnull, "w") as sink:
            sys.stderr = sink
            try:
                setup()
                log = structlog.get_logger("hookbridge.api")
                started = time.process_time()
                for _ in range(n):
                    log.info("request", method="POST", path="/v1/runs", status=202, ms=1.2)
                us = (time.process_time() - started) / n * 1e6
            finally:
                sys.stderr = sys.__stderr__
        print(f"a JSON log line, {label}: {us:.1f} us of CPU")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("which", nargs="?", default="both", choices=["both", "post", "get", "log"])
    parser.add_argument("--top", type=int, default=0, help="print cProfile's N costliest functions")
    args = parser.parse_args()
    if args.which == "log":
        _log_lines()
        return
    uvloop.install()
    asyncio.run(_requests(args.which, args.top))


if __name__ == "__main__":
    main()
