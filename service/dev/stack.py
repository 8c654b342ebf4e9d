"""Everything on one machine, in one process: an embedded Redis (unless ``HOOKBRIDGE_REDIS_URL`` is
set), the simulator, the API and a worker. ``hookbridge dev`` runs it until Ctrl-C; the demo and the
end-to-end tests build on it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from service.api.app import create_app
from service.config import settings as settings_mod
from service.dev.embedded_redis import EmbeddedRedis, free_port
from service.serving.server import EmbeddedServer
from service.simulator import SimulatorConfig, defaults
from service.simulator import create_app as create_simulator
from service.vendors import registry
from service.worker.runtime import WorkerRuntime

DEV_API_KEY = "dev:dev-key"


def dev_environment(
    environ: Mapping[str, str], simulator_url: str, redis_url: str, workdir: Path
) -> dict[str, str]:
    """Embedded defaults: the simulator as every installed vendor it plays (``service.simulator.defaults``),
    a dev API key, loopback callbacks allowed. A variable already set wins."""
    env = dict(environ)
    env.setdefault("HOOKBRIDGE_REDIS_URL", redis_url)
    env.setdefault("HOOKBRIDGE_API_KEYS", DEV_API_KEY)
    env.setdefault("HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
    env.setdefault("HOOKBRIDGE_WORKER_METRICS_PORT", "0")
    reach = defaults.Reach(SimulatorConfig.from_env(environ), simulator_url, workdir)
    for name, value in defaults.environment(registry.vendors(), reach).items():
        env.setdefault(name, value)
    return env


class Servers:
    """uvicorn servers started as tasks in this event loop, stopped together."""

    def __init__(self) -> None:
        self._servers: list[tuple[EmbeddedServer, asyncio.Task[Any]]] = []

    async def start(self, app: Any, port: int, host: str = "127.0.0.1") -> str:
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="auto")
        server = EmbeddedServer(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError(f"the server on port {port} did not start")
            await asyncio.sleep(0.01)
        self._servers.append((server, task))
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        for server, _ in self._servers:
            server.should_exit = True
        await asyncio.gather(*(t for _, t in self._servers), return_exceptions=True)


@dataclass
class DevStack:
    settings: settings_mod.Settings
    api_url: str
    simulator_url: str
    redis_url: str
    worker: WorkerRuntime
    servers: Servers


@contextlib.asynccontextmanager
async def run_stack(
    environ: Mapping[str, str] | None = None,
    *,
    api_port: int | None = None,
    simulator_port: int | None = None,
) -> AsyncIterator[DevStack]:
    environ = dict(os.environ if environ is None else environ)
    redis: EmbeddedRedis | None = None
    workdir = tempfile.TemporaryDirectory(prefix="hookbridge-dev-")
    redis_url = environ.get("HOOKBRIDGE_REDIS_URL", "")
    if not redis_url:
        redis = EmbeddedRedis().start()
        redis_url = redis.url
    servers = Servers()
    try:
        sim_port = simulator_port or free_port()
        simulator_url = f"http://127.0.0.1:{sim_port}"
        env = dev_environment(environ, simulator_url, redis_url, Path(workdir.name))
        # A vendor client that reads the process environment (AWS's chain) gets the simulator's dummy keys.
        os.environ.update(defaults.process_variables(registry.vendors(), environ, env))
        settings = registry.load_settings(env)
        await servers.start(create_simulator(SimulatorConfig.from_env(env)), sim_port)
        api_url = await servers.start(create_app(settings), api_port or free_port())
        worker = WorkerRuntime(settings)
        worker_task = asyncio.create_task(worker.run(serve_health=False))
        try:
            yield DevStack(settings, api_url, simulator_url, redis_url, worker, servers)
        finally:
            worker.request_stop()
            await worker_task
    finally:
        await servers.stop()
        if redis is not None:
            redis.cleanup()
        workdir.cleanup()
