"""Time passing, with short settings instead of long waits. At 9efe3c0 the purge trimmed every sorted set
matching ``hb:client:*``, subscriptions' index included: a subscription older than RETENTION_S vanished
from the listing and from fan-out. Here: a subscription, its secrets and its pending deliveries outlive
any retention window; runs, results and logs expire on time; idempotency keys expire on theirs.

The purge is the worker's periodic job; the tests call it directly (``runtime._purge``) instead of
waiting for its minute, once the records' own TTLs have run out in Redis.
"""

from __future__ import annotations

import fnmatch
import time

import redis.asyncio as aioredis

from service.store import Store, connect, keys
from tests.conftest import Receiver, StackFactory, eventually, store_client

SHORT = {"HOOKBRIDGE_RETENTION_S": "1", "HOOKBRIDGE_IDEMPOTENCY_TTL_S": "1"}


async def test_a_subscription_outlives_retention_and_still_gets_run_events(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack(**SHORT)
    assert stack.worker is not None
    sub = await stack.subscribe(receiver.url)
    first = await stack.submit("cloudsquid")
    await stack.wait_status(first["id"], "succeeded", "failed")
    client = store_client(stack.redis_url)
    try:
        # The first run's records expire (RETENTION_S=1), then the purge runs.
        await eventually(lambda: _gone(client, keys.run(first["id"])), what="the run expired")
        assert await stack.worker._purge({}) >= 1
        listed = (await stack.api.get("/v1/subscriptions")).json()["data"]
        assert [s["id"] for s in listed] == [sub["id"]]
        assert (await stack.api.get(f"/v1/subscriptions/{sub['id']}/secret")).json()["secret"] == sub[
            "secret"
        ]
        # And fan-out still reaches it.
        second = await stack.submit("cloudsquid")
        await eventually(
            lambda: _called_back(receiver, second["id"]), what="the terminal callback of the second run"
        )
        # The expired run left the listing; the new one is there.
        ids = [r["id"] for r in (await stack.api.get("/v1/runs")).json()["data"]]
        assert first["id"] not in ids and second["id"] in ids
    finally:
        await client.aclose()


async def test_pending_deliveries_stay_listed_past_retention(make_stack: StackFactory, make_receiver) -> None:
    failing = await make_receiver()
    failing.answers = [500] * 100
    stack = await make_stack(**SHORT, HOOKBRIDGE_RETRY_SCHEDULE="1h")
    assert stack.worker is not None
    sub = await stack.subscribe(failing.url)
    assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    await eventually(lambda: _has_attempt(stack, sub["id"]), what="a first failed attempt")
    client = store_client(stack.redis_url)
    try:
        # Past the retention window (the listing's score is older than RETENTION_S).
        await eventually(lambda: _older_than(client, keys.sub_deliveries(sub["id"]), 1100), what="aged")
        await stack.worker._purge({})
        deliveries = (await stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
        assert [d["status"] for d in deliveries] == ["pending"]
        assert await client.pttl(keys.delivery(deliveries[0]["id"])) == -1  # pending: no expiry yet
    finally:
        await client.aclose()


async def test_a_run_in_flight_stays_listed_past_retention(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, **SHORT)  # no worker: the run stays queued
    run = await stack.submit("nutrient")
    store = Store(connect(stack.settings), stack.settings)
    try:
        await eventually(lambda: _older_than(store.redis, keys.client_runs("alice"), 1100), what="aged")
        await store.upkeep.purge_indexes(_now_ms())
        assert [r["id"] for r in (await stack.api.get("/v1/runs")).json()["data"]] == [run["id"]]
    finally:
        await store.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


async def test_after_retention_only_subscriptions_and_live_keys_remain(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack(**SHORT)
    assert stack.worker is not None
    sub = await stack.subscribe(receiver.url, event_types=["run.*"])
    runs = [await stack.submit(v) for v in ("nutrient", "cloudsquid", "uptiq")]
    headers = {"Idempotency-Key": "k-1"}
    replayed = await stack.api.post(
        "/v1/runs",
        json={"vendor": "cloudsquid", "document": {"url": "https://example.com/a.pdf"}},
        headers=headers,
    )
    runs.append(replayed.json())
    for run in runs:
        # The terminal callback, not GET /v1/runs/{id}: with RETENTION_S=1 an ended run's record may
        # expire between two reads of it, and the callback stays with the receiver.
        await eventually(lambda run=run: _called_back(receiver, run["id"]), what="callback")
    client = store_client(stack.redis_url)
    try:

        async def only_lasting_keys() -> list[str] | None:
            await stack.worker._purge({})  # type: ignore[union-attr]
            left = sorted(k.decode() for k in await client.keys(keys.ROOT + "*"))
            lasting = {
                keys.subscription(sub["id"]),
                keys.client_subs("alice"),
                keys.client_sub_types("alice"),
            }
            # A budget keeps its next slot for an hour whatever the retention (a vendor's, under its tag).
            budgets = (
                keys.PREFIX + "budget:",
                *(keys.vendor_budget(v) for v in ("nutrient", "cloudsquid", "uptiq")),
            )
            odd = [k for k in left if k not in lasting and not k.startswith((keys.WORKERS, *budgets))]
            return None if odd else left

        await eventually(only_lasting_keys, timeout=15, what="every run, result, event and log expired")
        # The idempotency key expired too: the same key makes a new run.
        again = await stack.api.post(
            "/v1/runs",
            json={"vendor": "cloudsquid", "document": {"url": "https://example.com/a.pdf"}},
            headers=headers,
        )
        assert again.status_code == 202 and again.json()["id"] != replayed.json()["id"]
        assert "Idempotency-Replayed" not in again.headers
    finally:
        await client.aclose()


def test_purge_patterns_come_from_the_key_builders() -> None:
    runs_pattern, deliveries_pattern = keys.client_runs("*"), keys.DELIVERY_LOGS
    assert fnmatch.fnmatchcase(keys.sub_deliveries("sub_1"), deliveries_pattern)
    for lasting in (keys.client_subs("c"), keys.client_subs("a:runs"), keys.subscription("sub_1")):
        assert not fnmatch.fnmatchcase(lasting, runs_pattern)
        assert not fnmatch.fnmatchcase(lasting, deliveries_pattern)


async def _gone(client: aioredis.Redis, key: str) -> bool:
    return not await client.exists(key)


async def _older_than(client: aioredis.Redis, index: str, ms: int) -> bool:
    rows = await client.zrange(index, 0, 0, withscores=True)
    return bool(rows) and time.time() * 1000 - rows[0][1] > ms


async def _has_attempt(stack, sub_id: str) -> bool:  # type: ignore[no-untyped-def]
    data = (await stack.api.get(f"/v1/subscriptions/{sub_id}/deliveries")).json()["data"]
    return bool(data) and data[0]["attempts"] >= 1


async def _called_back(receiver: Receiver, run_id: str) -> bool:
    return any(
        e["type"] in ("run.succeeded", "run.failed") and e["data"]["run"]["id"] == run_id
        for e in receiver.events()
    )
