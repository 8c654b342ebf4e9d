"""What the worker's heartbeat pays for the per-client gauges (``Store.observe``), against a large state.

    python -m bench.observe_cost                 # 20 clients x 100 subscriptions, 20,000 pending deliveries
    python -m bench.observe_cost --clients 50

Fills a fresh Redis with CLIENTS clients, each with MAX_SUBSCRIPTIONS_PER_CLIENT subscriptions (a fifth
disabled), DELIVERIES pending deliveries in the due set and 1,000 parked per client, then times
``observe`` (median and max of 50 calls) and counts the Redis commands one call sends (INFO commandstats).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import redis.asyncio as aredis

from service.dev.embedded_redis import EmbeddedRedis
from service.store import Store, keys
from service.vendors.registry import load_settings


async def main(clients: int, deliveries: int) -> None:
    server = EmbeddedRedis(appendonly=False).start()
    try:
        settings = load_settings({"HOOKBRIDGE_REDIS_URL": server.url, "HOOKBRIDGE_API_KEYS": "a:b"})
        r = aredis.Redis.from_url(server.url)
        names = [f"client{n}" for n in range(clients)]
        now = int(time.time() * 1000)
        pipe = r.pipeline(transaction=False)
        for c in names:
            for s in range(settings.max_subscriptions_per_client):
                sid = f"sub_{c}_{s}"
                pipe.zadd(keys.client_subs(c), {sid: now})
                pipe.hset(keys.subscription(sid), mapping={"id": sid, "disabled": "1" if s % 5 == 0 else "0"})
            for d in range(1000):
                did = f"dlv_{c}_p{d}"
                pipe.zadd(keys.client_parked(c, keys.shard_of(did)), {did: now + d})
                pipe.hset(keys.delivery(did), mapping={"client": c, "created": now - d, "status": "pending"})
        for d in range(deliveries):
            did = f"dlv_due{d}"
            c = names[d % clients]
            pipe.zadd(keys.due_deliveries(keys.shard_of(did)), {did: now + d})
            pipe.hset(keys.delivery(did), mapping={"client": c, "created": now - d, "status": "pending"})
        await pipe.execute()
        store = Store(r, settings)
        await r.config_resetstat()
        await store.upkeep.observe(["nutrient", "cloudsquid", "uptiq"], names, now)
        stats = await r.info("commandstats")
        commands = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_config")
        times = []
        for _ in range(50):
            start = time.perf_counter()
            obs = await store.upkeep.observe(["nutrient", "cloudsquid", "uptiq"], names, now)
            times.append((time.perf_counter() - start) * 1000)
        print(
            f"clients={clients} subscriptions/client={settings.max_subscriptions_per_client} due={deliveries}"
        )
        print(
            f"observe(): median {statistics.median(times):.1f} ms, max {max(times):.1f} ms,",
            f"{commands} Redis commands",
        )
        print(
            f"disabled seen: {sum(obs.disabled_subs.values())},",
            f"clients with pending: {len(obs.oldest_pending_s)}",
        )
        await r.aclose()
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--deliveries", type=int, default=20000)
    args = parser.parse_args()
    asyncio.run(main(args.clients, args.deliveries))
