"""Our seam over arq: the rest of the code never imports arq.

arq runs the periodic jobs (the sweeper, retention) with its ``unique`` cron semantics, so that one
worker of many runs each tick. Polls and deliveries are not arq jobs: at one job per poll arq caps a
process at about 1,000 jobs/s and re-runs a killed job only after its whole timeout (MEASURED.md), so
they are leased batches in ``pumps``. arq's own loop stops on a Redis error; here it is restarted with
a back-off, so a Redis restart does not end the worker.

On a Redis Cluster (contract section 10: the periodic jobs with nothing but the cluster). arq has no
cluster client and moves a job with WATCH and MULTI/EXEC over several keys, which a cluster allows only
within one slot. Every key arq touches is made to hash to one slot without changing arq: its one fixed
key is ``arq:abort`` (in the MULTI that ends every job), so the hash tag of everything else is that
key's own name, ``{arq:abort}``: the queue ``hookbridge:{arq:abort}``, its health check, and through the
cron jobs' names (their ids are ``name:time``) ``arq:job:{arq:abort}sweep:...``, ``arq:in-progress:...``,
``arq:retry:...``, ``arq:result:...``. arq then runs on a plain connection to the primary that owns that
slot, found through the cluster's map each time the loop starts; a failover breaks the connection (or
answers MOVED), the loop restarts and finds the new owner. A single Redis and Sentinel run the same
names: one code path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from arq import cron
from arq.connections import ArqRedis
from arq.worker import Worker
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from service.config.settings import Settings
from service.observability import logs
from service.store.connection import connect

log = logs.get("hookbridge.worker")

# arq's one key whose name we cannot choose (arq.constants.abort_jobs_ss), used as every other key's tag.
ARQ_FIXED_KEY = "arq:abort"
ARQ_TAG = "{" + ARQ_FIXED_KEY + "}"
QUEUE_NAME = f"hookbridge:{ARQ_TAG}"

Job = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Periodic:
    """A job run every ``every_s`` seconds (whole seconds, 1..60) by exactly one worker."""

    name: str
    job: Job
    every_s: int


async def create_pool(settings: Settings, url: str | None = None) -> ArqRedis:
    """arq's connection, built by the same code as the store's (store.connection.connect), so that the
    Redis and Sentinel passwords, usernames and TLS reach arq too. arq's own RedisSettings cannot carry
    a Sentinel password (it passes no ``sentinel_kwargs``)."""
    if url is None and settings.redis_cluster_nodes:
        url = await slot_owner_url(settings)
    pool = connect(settings, url=url, redis_class=ArqRedis, for_arq=True)
    pool.default_queue_name = QUEUE_NAME
    try:
        await pool.ping()
    except BaseException:
        await pool.aclose()
        raise
    return pool


async def slot_owner_url(settings: Settings) -> str:
    """The URL of the primary that owns arq's slot now, read from the cluster's map (a client of its own,
    closed at once: the map is read again at each restart of arq's loop, after a failover too)."""
    cluster: Redis = connect(settings)
    try:
        assert isinstance(cluster, RedisCluster)
        await cluster.initialize()
        node = cluster.get_node_from_key(ARQ_FIXED_KEY)
    finally:
        await cluster.aclose()
    scheme = "rediss" if settings.redis.tls else "redis"
    return f"{scheme}://{node.host}:{node.port}/0"


class Queue:
    def __init__(self, settings: Settings, periodic: list[Periodic], *, url: str | None = None) -> None:
        self._settings = settings
        self._url = url
        self._periodic = periodic

    def _worker(self, pool: ArqRedis) -> Worker:
        jobs = []
        for p in self._periodic:
            every = max(1, min(60, p.every_s))
            jobs.append(
                cron(
                    p.job,  # type: ignore[arg-type]
                    name=ARQ_TAG + p.name,  # the job's keys: arq:job:{arq:abort}sweep:<time>, ...
                    second=set(range(0, 60, every)),
                    unique=True,
                    run_at_startup=True,
                    timeout=300,
                    keep_result=0,
                )
            )
        return Worker(
            queue_name=QUEUE_NAME,
            cron_jobs=jobs,
            redis_pool=pool,
            handle_signals=False,
            max_jobs=4,
            keep_result=0,
            poll_delay=0.5,
        )

    async def run(self, stop: asyncio.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            # The pool is ours, not arq's, so that it is closed however arq's loop ends.
            try:
                pool = await create_pool(self._settings, self._url)
            except (RedisError, RedisClusterException, OSError) as exc:
                log.warning("arq worker cannot reach redis", error=str(exc), retry_in_s=backoff)
                await _sleep_unless(stop, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            worker = self._worker(pool)
            task = asyncio.ensure_future(worker.async_run())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
                backoff = 0.5
            except (RedisError, OSError) as exc:
                log.warning("arq worker lost redis; restarting", error=str(exc), retry_in_s=backoff)
                await _sleep_unless(stop, backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                stopper.cancel()
                task.cancel()
                # arq's job tasks outlive its main loop; end them here, not at interpreter exit.
                jobs = [*worker.tasks.values(), task]
                for job in jobs:
                    job.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                await pool.aclose()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass
