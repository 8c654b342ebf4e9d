"""What ``REDIS_WAIT_REPLICAS=1`` costs a submit: ``POST /v1/runs`` latency with and without WAIT.

    python -m bench.wait_cost                 # 600 submits per mode, one at a time, then 8 at a time
    python -m bench.wait_cost --requests 200  # shorter

A primary and one replica (two redis-servers on loopback, AOF everysec on the primary) and one
``hookbridge api`` process per mode against that primary, one after the other; no worker. The client
sends one submit at a time (the latency a caller sees) and then 8 at a time (a busy pod). Each mode has a
warm-up of 50 submits first. The modes alternate in two rounds so that a noisy neighbour on this shared
machine weighs on both. Loopback is the best case for WAIT: across availability zones add the zone's
round trip to every shown write.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import redis

from bench._common import AUTH, environment, percentile, url_run
from service.dev.embedded_redis import EmbeddedRedis, free_port


def _replica_of(primary: EmbeddedRedis, replica: EmbeddedRedis) -> None:
    with redis.Redis(port=replica.port) as client:
        client.replicaof("127.0.0.1", primary.port)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with redis.Redis(port=primary.port) as client:
            if client.info("replication").get("slave0", {}).get("state") == "online":
                return
        time.sleep(0.05)
    raise RuntimeError("the replica did not come online")


async def _mode(primary: EmbeddedRedis, wait: int, requests: int, concurrency: int) -> list[float]:
    port = free_port()
    env = environment(primary.url, "http://127.0.0.1:9", REDIS_WAIT_REPLICAS=str(wait))
    log = open(Path("/tmp") / f"hb-wait-cost-api-{wait}.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "api", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"api (WAIT {wait}) not ready")
                await asyncio.sleep(0.1)
            for i in range(50):
                assert (await client.post("/v1/runs", json=url_run(i, tag="warm"))).status_code == 202
            latencies: list[float] = []
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with sem:
                    t0 = time.perf_counter()
                    answer = await client.post("/v1/runs", json=url_run(i, tag=f"w{wait}"))
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert answer.status_code == 202, answer.text

            await asyncio.gather(*(one(i) for i in range(requests)))
            return latencies
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()


async def main(requests: int) -> None:
    with EmbeddedRedis() as primary, EmbeddedRedis(appendonly=False) as replica:
        _replica_of(primary, replica)
        results: dict[tuple[int, int], list[float]] = {}
        for _round in range(2):
            for concurrency in (1, 8):
                for wait in (0, 1):
                    got = await _mode(primary, wait, requests // 2, concurrency)
                    results.setdefault((wait, concurrency), []).extend(got)
        print(f"POST /v1/runs, {requests} submits per row, primary + 1 replica on loopback")
        print("| WAIT_REPLICAS | in flight | p50 ms | p99 ms |")
        print("|---|---|---|---|")
        for (wait, concurrency), values in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
            print(f"| {wait} | {concurrency} | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    asyncio.run(main(parser.parse_args().requests))
