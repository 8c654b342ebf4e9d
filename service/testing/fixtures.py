"""The fixtures of the conformance kit, over real parts: a redis-server of its own, the built-in simulator
and a receiver on real ports, the API on uvicorn, and the worker runtime in the test's event loop.

hookbridge's own tests and a vendor plugin's tests use these same fixtures: the pytest plugin
(:mod:`service.testing.plugin`, registered under ``pytest11``) puts them in every pytest session of an
environment where hookbridge is installed, so a plugin's test module needs no conftest of its own.

Nothing here sleeps to let work happen: :func:`eventually` polls a condition until a deadline. The async
fixtures are ``pytest_asyncio`` fixtures, so that they work in a project whose ``asyncio_mode`` is
``strict`` as well as in one where it is ``auto``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.api.app import create_app
from service.config import settings as settings_mod
from service.dev.embedded_redis import EmbeddedRedis, free_port
from service.dev.stack import Servers
from service.simulator import SimulatorConfig, defaults
from service.simulator import create_app as create_simulator
from service.simulator.app import PREFIXES
from service.vendors import registry
from service.worker.runtime import WorkerRuntime

ALICE, BOB = "alice-key", "bob-key"

# Every vendor of the built-in simulator that is installed gets these (fast polls, no request budget):
# tests run many runs fast. A vendor's own settings (keys, regions, buckets) are its tests' to give.
FAST_VENDOR = {"POLL_INITIAL_S": "50ms", "POLL_MAX_S": "200ms", "MAX_RPS": "0"}


async def eventually(
    check: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 20.0,
    interval: float = 0.02,
    what: str = "condition",
) -> Any:
    """Polls ``check`` until it returns something truthy, or fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


def simulator_api_key(vendor: str) -> str | None:
    """The API key the built-in simulator expects from ``vendor`` (``SimulatorConfig.{vendor}_api_key``),
    or None where it takes none or does not serve the vendor."""
    key = getattr(SimulatorConfig(), f"{vendor}_api_key", None)
    return key if isinstance(key, str) else None


def required_options(vendor: str) -> dict[str, Any]:
    """A run's ``options`` for ``vendor`` where its options model requires a field: the model's first
    example (``json_schema_extra={"examples": [...]}``); else none."""
    spec = registry.vendors().get(vendor)
    schema = spec.options.model_json_schema() if spec is not None else {}
    if schema.get("required") and schema.get("examples"):
        return dict(schema["examples"][0])
    return {}


def simulated_vendors() -> list[str]:
    """The installed vendors that the built-in simulator serves, in the registry's order."""
    return [name for name in registry.vendors() if name in PREFIXES and name in defaults.SIMULATED]


@functools.cache
def _workdir() -> Path:
    """One directory per test process for files that vendor settings name (a key file)."""
    return Path(tempfile.mkdtemp(prefix="hookbridge-tests-"))


# ``host:port,...`` of a Redis Cluster: when set, base_env points the stack at it instead of redis_url.
CLUSTER_NODES = "HB_TEST_CLUSTER_NODES"


def base_env(redis_url: str, simulator_url: str = "http://127.0.0.1:9", **overrides: str) -> dict[str, str]:
    """Short timings everywhere, so tests that need time to pass take little of it; every installed vendor
    that the built-in simulator serves points at it, with the key it expects."""
    env = {
        "HOOKBRIDGE_REDIS_URL": redis_url,
        "HOOKBRIDGE_API_KEYS": f"alice:{ALICE},bob:{BOB}",
        "HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
        "HOOKBRIDGE_RETRY_SCHEDULE": "100ms,200ms,300ms",
        "HOOKBRIDGE_CALLBACK_TIMEOUT_S": "2",
        "HOOKBRIDGE_VENDOR_TIMEOUT_S": "3",
        "HOOKBRIDGE_LEASE_S": "10",
        "HOOKBRIDGE_WORKER_IDLE_S": "20ms",
        "HOOKBRIDGE_WORKER_METRICS_PORT": "0",
        "HOOKBRIDGE_SWEEP_INTERVAL_S": "1",
        "HOOKBRIDGE_PROGRESS_MIN_INTERVAL_S": "0",
        "HOOKBRIDGE_CLOUDSQUID_PROJECT": "test-project",
        "HOOKBRIDGE_CLOUDSQUID_TABLE_ID": "3fa85f64-5717-4562-b3fc-2c963f66afa6",
        # Quotas out of the way of tests that submit or subscribe in bulk; tests/hostile/test_quotas.py
        # sets its own.
        "HOOKBRIDGE_SUBMIT_RATE_PER_S": "100000",
        "HOOKBRIDGE_SUBMIT_BURST": "100000",
        "HOOKBRIDGE_MAX_SUBSCRIPTIONS_PER_CLIENT": "100000",
    }
    installed = simulated_vendors()
    if "cloudsquid" not in installed:
        del env["HOOKBRIDGE_CLOUDSQUID_PROJECT"], env["HOOKBRIDGE_CLOUDSQUID_TABLE_ID"]
    # Every installed vendor that the simulator plays, pointed at it as `hookbridge dev` points it.
    reach = defaults.Reach(SimulatorConfig(), simulator_url, _workdir())
    env.update(defaults.environment(installed, reach))
    for vendor in installed:
        prefix = f"HOOKBRIDGE_{vendor.upper()}_"
        env.update({prefix + name: value for name, value in FAST_VENDOR.items()})
    # Tests submit placeholder document URLs (example.com) that nothing serves: Nutrient gets the URL
    # unless a test asks for the default, upload (tests/integration/test_vendors_e2e.py does).
    if "nutrient" in installed:
        env["HOOKBRIDGE_NUTRIENT_URL_INPUT"] = "send"
    named = {"HOOKBRIDGE_REDIS_URL", "HOOKBRIDGE_REDIS_SENTINELS"} & set(overrides)
    if (nodes := os.environ.get(CLUSTER_NODES)) and not named:
        # The same tests on a Redis Cluster (hookbridge's tests/conftest.py sets this with HB_TEST_CLUSTER=1).
        del env["HOOKBRIDGE_REDIS_URL"]
        env["HOOKBRIDGE_REDIS_CLUSTER_NODES"] = nodes
    env.update(overrides)
    return env


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A callback endpoint on a real port. ``answers`` is consumed one status per request (then 204);
    ``handler`` may replace the whole behaviour."""

    url: str
    received: list[Received] = field(default_factory=list)
    answers: list[int | tuple[int, dict[str, str]]] = field(default_factory=list)
    handler: Callable[[Request], Awaitable[Response]] | None = None

    def events(self, event_type: str | None = None) -> list[dict[str, Any]]:
        out = [r.json() for r in self.received]
        return [e for e in out if event_type is None or e["type"] == event_type]


ReceiverFactory = Callable[..., Awaitable[Receiver]]


@dataclass
class Stack:
    settings: settings_mod.Settings
    api: httpx.AsyncClient  # as alice
    bob: httpx.AsyncClient
    api_url: str
    simulator_url: str
    redis_url: str
    worker: WorkerRuntime | None
    servers: Servers
    worker_task: asyncio.Task[None] | None = None

    async def stop_worker(self) -> None:
        """Stops this stack's worker and waits until it has finished, so a test can edit state alone."""
        if self.worker is not None and self.worker_task is not None:
            self.worker.request_stop()
            await self.worker_task

    async def subscribe(self, url: str, **fields: Any) -> dict[str, Any]:
        response = await self.api.post("/v1/subscriptions", json={"url": url, **fields})
        assert response.status_code == 201, response.text
        return dict(response.json())

    async def submit(
        self, vendor: str = "nutrient", filename: str = "invoice.pdf", **fields: Any
    ) -> dict[str, Any]:
        body = {
            "vendor": vendor,
            "document": {
                "content_base64": base64.b64encode(b"%PDF-1.4 test " + filename.encode()).decode(),
                "filename": filename,
                "media_type": "application/pdf",
            },
            **fields,
        }
        for name, value in defaults.demo_run(vendor).items():
            body.setdefault(name, value)  # a vendor's operation and required options (Uptiq's documentType)
        body.setdefault("options", required_options(vendor))
        response = await self.api.post("/v1/runs", json=body)
        assert response.status_code == 202, response.text
        return dict(response.json())

    async def wait_status(self, run_id: str, *statuses: str, timeout: float = 20.0) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            run = (await self.api.get(f"/v1/runs/{run_id}")).json()
            return run if run["status"] in statuses else None

        result: dict[str, Any] = await eventually(check, timeout=timeout, what=f"{run_id} in {statuses}")
        return result


StackFactory = Callable[..., Awaitable[Stack]]


# The fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest_asyncio.fixture
async def servers() -> AsyncIterator[Servers]:
    s = Servers()
    try:
        yield s
    finally:
        await s.stop()


@pytest_asyncio.fixture
async def make_receiver(servers: Servers) -> ReceiverFactory:
    """Starts a receiver on ``port`` (a free one by default)."""

    async def make(port: int | None = None) -> Receiver:
        port = port or free_port()
        rec = Receiver(url=f"http://127.0.0.1:{port}/hooks")

        async def hook(request: Request) -> Response:
            rec.received.append(
                Received(
                    {k.lower(): v for k, v in request.headers.items()}, await request.body(), time.time()
                )
            )
            if rec.handler is not None:
                return await rec.handler(request)
            if rec.answers:
                answer = rec.answers.pop(0)
                status, headers = answer if isinstance(answer, tuple) else (answer, {})
                return Response(status_code=status, headers=headers)
            return Response(status_code=204)

        await servers.start(Starlette(routes=[Route("/hooks", hook, methods=["POST"])]), port)
        return rec

    return make


@pytest_asyncio.fixture
async def receiver(make_receiver: ReceiverFactory) -> Receiver:
    return await make_receiver()


@pytest.fixture
def sim_config() -> SimulatorConfig:
    return SimulatorConfig(duration_s=(0.1, 0.3), seed=7)


@pytest_asyncio.fixture
async def simulator(servers: Servers, sim_config: SimulatorConfig) -> str:
    port = free_port()
    return await servers.start(create_simulator(sim_config), port)


@pytest_asyncio.fixture
async def make_stack(redis_url: str, simulator: str, servers: Servers) -> AsyncIterator[StackFactory]:
    """Builds the API (on uvicorn) and, unless ``worker=False``, a worker, with env overrides."""
    made: list[Stack] = []
    tasks: list[asyncio.Task[None]] = []

    async def make(*, worker: bool = True, resolver: Any = None, **overrides: str) -> Stack:
        settings = registry.load_settings(base_env(redis_url, simulator, **overrides))
        port = free_port()
        api_url = await servers.start(create_app(settings), port)
        runtime = None
        task = None
        if worker:
            runtime = WorkerRuntime(settings, resolver=resolver)
            task = asyncio.create_task(runtime.run(serve_health=False))
            tasks.append(task)
        stack = Stack(
            settings,
            httpx.AsyncClient(base_url=api_url, headers={"Authorization": f"Bearer {ALICE}"}),
            httpx.AsyncClient(base_url=api_url, headers={"Authorization": f"Bearer {BOB}"}),
            api_url,
            simulator,
            redis_url,
            runtime,
            servers,
            task,
        )
        made.append(stack)
        return stack

    try:
        yield make
    finally:
        for stack in made:
            if stack.worker is not None:
                stack.worker.request_stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        for stack in made:
            await stack.api.aclose()
            await stack.bob.aclose()


@pytest_asyncio.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack()
