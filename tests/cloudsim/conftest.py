"""A simulator on a real port in a thread of its own, with its lifespan (so its S3 and GCS emulators run):
the official AWS and Google clients are synchronous, and calling them from the event loop that serves the
simulator would block it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette

from service.dev.embedded_redis import free_port
from service.simulator import SimulatorConfig, create_app


@dataclass
class Sim:
    url: str
    app: Starlette
    s3_url: str
    gcs_url: str

    def patch(self, **changes: Any) -> None:
        response = httpx.patch(f"{self.url}/_sim/config", json=changes)
        assert response.status_code == 200, response.text


@pytest.fixture
def make_sim() -> Iterator[Callable[..., Sim]]:
    started: list[tuple[uvicorn.Server, threading.Thread]] = []

    def make(**knobs: Any) -> Sim:
        config = SimulatorConfig(**{"duration_s": (0.05, 0.1), "seed": 3, **knobs})
        app = create_app(config)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on")
        )
        thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
        thread.start()
        started.append((server, thread))
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "simulator did not start"
            time.sleep(0.01)
        url = f"http://127.0.0.1:{port}"
        storage = httpx.get(f"{url}/_sim/storage").json()
        return Sim(url=url, app=app, s3_url=storage["s3"], gcs_url=storage["gcs"])

    yield make
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def sim(make_sim: Callable[..., Sim]) -> Sim:
    return make_sim()
