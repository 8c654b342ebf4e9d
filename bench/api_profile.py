"""Where the API's CPU goes per request, without uvicorn or a client in the way: the app called as ASGI
directly (in this process, on a private ``redis-server``), 16 requests in flight, then CPU per request.

    python -m bench.api_profile                   # POST /v1/runs (URL document) and GET /v1/runs/{id}
    python -m bench.api_profile post --top 30     # and cProfile's 30 costliest functions (own time)
    python -m bench.api_profile --parts           # each request's CPU by part (docs/performance.md)
    python -m bench.api_profile log               # one JSON log line: ours, and through stdlib logging

The figures include the Redis client's side of each command; ``bench.api`` gives the rates over HTTP.
``log`` compares ``logs.configure("json")`` (structlog alone) with the same processors behind the stdlib
``logging`` machinery, which the API used before: 20,000 lines to ``/dev/null``.

``--parts`` adds up cProfile's own time of every function by the part of a request it belongs to (its
file: :data:`PARTS`, the first pattern that matches) and gives each part's share of the request, in
microseconds at the CPU per request measured without the profiler. cProfile charges every Python call a
little, so a part made of many small calls reads larger than it is; compare the same part across trees,
not two parts.
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

# The parts of a request, by the file a function is in; the first match wins, the rest is "other".
PARTS: list[tuple[str, tuple[str, ...]]] = [
    (
        "the request layer (app.py: its id, headers, count, time; auth.py, context.py)",
        ("service/api/app.py", "service/api/auth.py", "service/api/context.py"),
    ),
    (
        "the body: read, JSON, validated (body.py, models, pydantic)",
        ("service/api/body.py", "service/api/models.py", "pydantic", "/json/"),
    ),
    (
        "the handler and the answer's JSON (runs.py, views.py)",
        ("service/api/runs.py", "service/api/views.py"),
    ),
    ("the run: built, its record's JSON, ids (service/core)", ("service/core/",)),
    ("the store: keys and the scripts' arguments (service/store)", ("service/store/",)),
    (
        "Redis: redis-py, the socket, the reply",
        (
            "redis/",
            "hiredis",
            "asyncio/streams.py",
            "asyncio/locks.py",
            "asyncio/timeouts.py",
            "asyncio/tasks.py",
        ),
    ),
    ("the log line (structlog, logs.py)", ("structlog", "service/observability/logs.py")),
    ("metrics (prometheus_client, metrics.py)", ("prometheus_client", "service/observability/metrics.py")),
    ("Starlette: routing, endpoint, response, exception layers", ("starlette/",)),
]


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


async def _requests(which: str, top: int, parts: bool = False) -> None:
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
                if parts:
                    await _parts(name, phases[name])
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


async def _parts(name: str, request: Callable[[int], Awaitable[bytes]]) -> None:
    """The request's CPU by part (:data:`PARTS`): cProfile's own times, scaled to the CPU per request
    of a run without the profiler just before."""

    async def worker(first: int) -> None:
        for i in range(first, REQUESTS, IN_FLIGHT):
            await request(i)

    started = time.process_time()
    await asyncio.gather(*(worker(k) for k in range(IN_FLIGHT)))
    plain_us = (time.process_time() - started) / REQUESTS * 1e6
    profile = cProfile.Profile()
    profile.enable()
    await asyncio.gather(*(worker(k) for k in range(IN_FLIGHT)))
    profile.disable()
    other = "other (the event loop, asyncio, the bench's own calls)"
    own: dict[str, float] = {label: 0.0 for label, _ in PARTS} | {other: 0.0}

    def part(filename: str) -> str:
        return next((lb for lb, pats in PARTS if any(p in filename for p in pats)), other)

    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _line, _func), (_cc, _nc, tottime, _ct, callers) in stats.items():
        if filename != "~" or not callers:
            own[part(filename)] += tottime
            continue
        # A built-in (a C function: a socket write, a pydantic validation) is charged to its callers'
        # parts, each by the time spent in it from there.
        spent = sum(row[2] for row in callers.values()) or 1.0
        for (caller_file, _, _), row in callers.items():
            own[part(caller_file)] += tottime * row[2] / spent
    total = sum(own.values()) or 1.0
    print(f"\n{name}: {plain_us:.0f} us of CPU per request (without the profiler), by part")
    print("| part | share | us |\n|---|---|---|")
    for label, seconds in sorted(own.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {100 * seconds / total:.1f} % | {plain_us * seconds / total:.0f} |")


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
    parser.add_argument("--parts", action="store_true", help="each request's CPU by part (PARTS)")
    args = parser.parse_args()
    if args.which == "log":
        _log_lines()
        return
    uvloop.install()
    asyncio.run(_requests(args.which, args.top, args.parts))


if __name__ == "__main__":
    main()
