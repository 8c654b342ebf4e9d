"""Helpers for the store-hardening attacks: a worker whose vendor is a scripted HTTP peer, metrics reads."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx

from service.config.settings import Settings
from service.worker.runtime import WorkerRuntime


@asynccontextmanager
async def scripted_worker(
    settings: Settings, handler: Callable[[httpx.Request], httpx.Response]
) -> AsyncIterator[WorkerRuntime]:
    """A real worker (Redis, pumps, leases) whose vendor HTTP answers come from ``handler``: for answers
    the simulator never gives (a refused cancel, a non-JSON poll). Mocked at the HTTP boundary only."""
    runtime = WorkerRuntime(settings, vendor_transport=httpx.MockTransport(handler))
    task = asyncio.create_task(runtime.run(serve_health=False))
    try:
        yield runtime
    finally:
        runtime.request_stop()
        await asyncio.gather(task, return_exceptions=True)


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total
