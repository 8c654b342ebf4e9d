"""Upgrading from an earlier layout (docs/deploy.md): hookbridge 2's keys had no hash tag (``hb:<name>``);
an earlier hookbridge 3 put every key under the store's one tag (``hb:{hb}:<name>``); today a run's keys
are in its shard and the indexes of runs are one per shard. A store written in an old layout is invisible
to this version until `hookbridge migrate-keys` moves it; then a pending run goes on and is called back,
an event a lost relay left in its run's outbox is relayed by the sweeper, an idempotency key replays its
run, and the subscription, the history and their expiries are as they were.

The old layout is made here from a fresh stack's keys: the names after the prefix are the same in every
version (tests/store/test_layout.py holds the rule as a table), and the per-shard indexes of runs are
merged back into one."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from typing import Any, cast

import pytest
import redis
from redis.cluster import ClusterNode
from redis.exceptions import ConnectionError as RedisConnectionError

from service.core import domain, lifecycle
from service.store import Applied, Store, connect, fanout, keys
from service.store.layout import split, tagged
from service.store.runs import RELAY_GRACE_MS
from service.testing.fixtures import CLUSTER_NODES
from service.worker.runtime import WorkerRuntime
from tests.conftest import ON_CLUSTER, Receiver, Stack, StackFactory, eventually, hookbridge_command

on_one_redis = pytest.mark.skipif(ON_CLUSTER, reason="one Redis: the cluster's test is below")

HOOKBRIDGE_2, EARLIER_3 = keys.ROOT, keys.PREFIX
# The names (after the prefix) of what lives in a shard today: a run's, an event's, an idempotency
# record's, a subscription's, a delivery's and a client's keys, and the per-shard indexes.
OF_SHARDS = re.compile(
    r"(run|doc|result|idem|sub|dlv|chain|evt|dlvclient|client|rate):|budget:sub:|due:(runs|deliveries)"
    r"|active:|outbox$"
)
# The indexes that are one per shard today, merged back into one in an old layout.
PER_SHARD = re.compile(r"due:runs:|due:deliveries$|active:(runs|deliveries)$|outbox$|dlvclient:")


def _client(url: str) -> redis.Redis:
    """The test's own client: on a cluster, over the session's seeds (the keys are on every primary)."""
    if not ON_CLUSTER:
        return redis.Redis.from_url(url)
    seeds = [seed.rsplit(":", 1) for seed in os.environ[CLUSTER_NODES].split(",")]
    nodes = [ClusterNode(host, int(port)) for host, port in seeds]
    return cast(redis.Redis, redis.RedisCluster(startup_nodes=nodes))


def _to_old_layout(client: redis.Redis, old: str) -> int:
    """Every key of today's layout but a vendor's moved to ``old`` + its name after the prefix (copied
    with its expiry, then dropped: a cluster renames within a slot only), the indexes of the 16 shards
    merged into one; returns how many old keys there are."""
    made = 0
    merged: dict[str, list[str]] = {}
    for raw in list(client.scan_iter(match=keys.ROOT + "{*")):
        name = raw.decode()
        if name.startswith(keys.ROOT + "{v:"):
            continue  # a vendor's budget and pause keep their own tag (their own rows of the rule)
        rest = name[name.index("}:") + 2 :]
        if PER_SHARD.match(rest):
            merged.setdefault(old + rest, []).append(name)
        elif name != old + rest:
            value, ttl = client.dump(name), int(client.pttl(name))
            client.restore(old + rest, max(ttl, 0), value)
            client.delete(name)
            made += 1
        else:
            made += 1
    for target, parts in merged.items():
        for part in parts:
            if client.type(part) == b"zset":
                client.zadd(target, dict(client.zrange(part, 0, -1, withscores=True)))
            else:
                client.sadd(target, *client.smembers(part))
            client.delete(part)
        made += 1
    return made


async def _submit_with_key(stack: Stack, key: str) -> dict[str, Any]:
    """A run submitted with an ``Idempotency-Key`` (its record in the run's shard: Runs.new_run_id)."""
    stack.api.headers["Idempotency-Key"] = key
    try:
        return await stack.submit("nutrient")
    finally:
        del stack.api.headers["Idempotency-Key"]


async def _cancel_stranded(stack: Stack, run_id: str) -> tuple[str, int, list[bytes]]:
    """Cancels the run as the API does, but the relay right after the transition is lost (a process that
    died between the two): its run.canceled event stays in the run's outbox, its body stored, the run in
    its shard's outbox index. Returns the event's id, the run's score in the outbox index and the
    outbox's items."""
    store = Store(connect(stack.settings), stack.settings)
    try:
        run = await store.runs.get_run(run_id)
        assert run is not None
        change = lifecycle.canceled(run, domain.now_ms(), settings=stack.settings, vendor_can_cancel=False)

        async def lost(*args: object, **kwargs: object) -> object:
            raise RedisConnectionError("connection lost")

        store.runs.scripts.fanout_deliveries = lost  # type: ignore[method-assign]
        outcome = await store.runs.transition(change)
        assert isinstance(outcome, Applied) and outcome.deliveries == 0
        [event] = change.events
        score = await store.redis.zscore(keys.outbox(keys.shard_of(run_id)), run_id)
        items = await store.redis.lrange(keys.run_outbox(run_id), 0, -1)  # type: ignore[misc]
        assert score is not None and items  # stranded
        return event.id, int(score), items
    finally:
        await store.close()


def _migrate(redis_url: str) -> subprocess.CompletedProcess[str]:
    return hookbridge_command(redis_url, "migrate-keys")


@on_one_redis
@pytest.mark.parametrize("old", [HOOKBRIDGE_2, EARLIER_3], ids=["hookbridge-2", "earlier-hookbridge-3"])
async def test_a_store_of_an_earlier_layout_is_moved_and_its_pending_run_is_called_back(
    make_stack: StackFactory, receiver: Receiver, old: str
) -> None:
    stack = await make_stack(worker=False)
    sub = await stack.subscribe(receiver.url, event_types=["run.succeeded", "run.canceled"])
    runs = [await stack.submit("nutrient") for _ in range(6)]  # over several shards
    runs.append(await _submit_with_key(stack, "order-7"))
    idem = keys.idempotency("alice", "order-7")
    # A run ended while its event waited in its outbox: the relay was lost, the sweeper's to do.
    stranded = (await stack.submit("nutrient"))["id"]
    event_id, outbox_score, outbox_items = await _cancel_stranded(stack, stranded)
    # A delivery still pending (no worker yet): its hash, chain, due and active entries move too.
    assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    ids = [r["id"] for r in runs]
    client = _client(stack.redis_url)
    try:
        made = _to_old_layout(client, old)
        assert made >= 4  # the runs, their documents, the listing, the due set, the subscription, ...
        # The earlier layout as it was written: one index of each kind, every run's key under ``old``.
        due = client.zrange(old + "due:runs:nutrient", 0, -1, withscores=True)
        assert sorted(m.decode() for m, _ in due) == sorted(ids)  # the runs in flight, not the canceled
        assert sorted(m.decode() for m in client.smembers(old + "active:runs")) == sorted(ids)
        assert client.zrange(old + "outbox", 0, -1, withscores=True) == [(stranded.encode(), outbox_score)]
        idem_rest = idem[idem.index("}:") + 2 :]
        assert client.exists(old + f"run:{stranded}:outbox", old + f"evt:{event_id}", old + idem_rest) == 3
        assert client.exists(keys.run(ids[0]), keys.event(event_id), idem) == 0
        assert (await stack.api.get(f"/v1/runs/{ids[0]}")).status_code == 404  # not seen

        moved = _migrate(stack.redis_url)
        assert moved.returncode == 0, moved.stderr
        counts = dict(item.split("=") for item in moved.stdout.split())
        # The due set, the unfinished runs, the outbox index, the due and the pending deliveries, each split
        # by member.
        assert counts["kept"] == "0" and int(counts["split"]) == 5, moved.stdout
        assert int(counts["moved"]) >= 2 * len(runs), moved.stdout  # each run's record and document at least
        assert client.exists(old + "due:runs:nutrient", old + "active:runs", old + "outbox") == 0
        left = [k.decode() for k in client.scan_iter(match=keys.ROOT + "*")]
        assert not [k for k in left if tagged(k) or split(k)]
        # Every key has a hash tag, and nothing of a run's (its keys, its events' bodies, its idempotency
        # record, an index of runs), of a subscription's nor of the client's is left under the old prefix.
        assert not [k for k in left if not k.startswith(keys.ROOT + "{")]
        assert not [k for k in left if k.startswith(old) and OF_SHARDS.match(k.removeprefix(old))]
        # The client's listing, directory and feed in the client's shard.
        assert (
            client.exists(keys.client_runs("alice"), keys.client_subs("alice"), keys.client_feed("alice"))
            == 3
        )
        # The subscription's hash and delivery log in its shard.
        assert client.exists(keys.subscription(sub["id"])) == 1
        # Each run's keys where today's code looks (in its shard), each index entry in its run's shard's
        # set, with its score.
        for member, score in due:
            run_id = member.decode()
            assert client.exists(keys.run(run_id), keys.document(run_id)) == 2, run_id
            assert client.zscore(keys.due_runs("nutrient", keys.shard_of(run_id)), run_id) == score
            assert client.sismember(keys.active_runs(keys.shard_of(run_id)), run_id)
        assert client.zscore(keys.outbox(keys.shard_of(stranded)), stranded) == outbox_score
        assert client.lrange(keys.run_outbox(stranded), 0, -1) == outbox_items
        assert client.exists(keys.run(stranded), keys.event(event_id)) == 2
        assert 0 < client.pttl(idem)  # the idempotency record, with its expiry
        again = _migrate(stack.redis_url)  # run twice: nothing left to move
        assert again.stdout.split() == ["moved=0", "kept=0", "expired=0", "split=0"]
    finally:
        client.close()

    assert (await stack.api.get(f"/v1/subscriptions/{sub['id']}")).json()["url"] == receiver.url
    # The idempotency record is found: the same key replays the same run.
    assert (await _submit_with_key(stack, "order-7"))["id"] == ids[-1]
    # The sweeper finds the stranded outbox in its shard's index and relays its event (once its grace is
    # over: the relay right after a transition may still be under way before).
    store = Store(connect(stack.settings), stack.settings)
    try:
        assert await store.runs.stranded_count(outbox_score + RELAY_GRACE_MS) == 1
        assert await store.runs.relay_stranded(outbox_score + RELAY_GRACE_MS) == 1
    finally:
        await store.close()
    worker = WorkerRuntime(stack.settings)
    task = asyncio.create_task(worker.run(serve_health=False))
    try:

        async def called_back() -> bool:
            done = {(r.json()["type"], r.json()["data"].get("run", {}).get("id")) for r in receiver.received}
            wanted = {("run.succeeded", i) for i in ids} | {("run.canceled", stranded)}
            return wanted | {("subscription.test", None)} <= done

        await eventually(called_back, what="the moved runs polled to their end and called back")
        assert (await stack.api.get(f"/v1/runs/{ids[0]}")).json()["status"] == "succeeded"
        assert (await stack.api.get(f"/v1/runs/{stranded}")).json()["status"] == "canceled"
    finally:
        worker.request_stop()
        await task


def _as_made_before(client: redis.Redis, dlv_id: str, sub_id: str) -> str:
    """The pending delivery ``dlv_id`` of the earlier layout (``EARLIER_3``) under the id an earlier
    hookbridge 3 gave it, before ids were minted in their subscription's shard: a candidate of another
    shard. Returns that id."""
    old = EARLIER_3
    evt = client.hget(old + f"dlv:{dlv_id}", "event").decode()
    earlier = next(
        d
        for n in range(64)
        if keys.shard_of(d := fanout.delivery_id(evt, sub_id, n)) != keys.shard_of(sub_id)
    )
    client.rename(old + f"dlv:{dlv_id}", old + f"dlv:{earlier}")  # one slot: the old layout's one tag
    client.hset(old + f"dlv:{earlier}", "id", earlier)
    for index in (old + f"sub:{sub_id}:deliveries", old + "due:deliveries"):
        score = client.zscore(index, dlv_id)
        client.zrem(index, dlv_id)
        client.zadd(index, {earlier: score})
    client.srem(old + "active:deliveries", dlv_id)
    client.sadd(old + "active:deliveries", earlier)
    client.lrem(old + f"chain:{sub_id}:", 0, dlv_id)
    client.rpush(old + f"chain:{sub_id}:", earlier)
    return earlier


@pytest.mark.skipif(not ON_CLUSTER, reason="about a cluster: HB_TEST_CLUSTER=1 (.ci/run step 3)")
async def test_on_a_cluster_the_move_waits_for_the_old_deliveries_then_copies_every_key(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    """An earlier hookbridge 3 on a cluster: its keys are copied into their slots (a key cannot be renamed
    into another), but a delivery of the old layout could not be claimed by today's scripts (its id is
    not in its subscription's shard), so while one is pending the move refuses and moves nothing; once
    the earlier workers delivered them (played here: the one mock of this test, since the earlier code
    is not here to run), every key moves, an ended delivery gets today's id (so it can be resent), and
    the runs go on and are called back."""
    stack = await make_stack(worker=False)
    sub = await stack.subscribe(receiver.url, event_types=["run.succeeded"])
    ids = [(await stack.submit("nutrient"))["id"] for _ in range(4)]
    assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    client = _client(stack.redis_url)
    try:
        _to_old_layout(client, EARLIER_3)
        [made] = [m.decode() for m in client.smembers(EARLIER_3 + "active:deliveries")]
        pending = _as_made_before(client, made, sub["id"])
        refused = _migrate(stack.redis_url)
        assert refused.returncode == 2 and "1 deliveries of the earlier layout are pending" in refused.stderr
        assert client.exists(EARLIER_3 + f"sub:{sub['id']}", EARLIER_3 + f"run:{ids[0]}") == 2  # untouched
        # The earlier workers deliver it: the delivery ends, and leaves the due and the pending sets.
        client.hset(EARLIER_3 + f"dlv:{pending}", "status", "succeeded")
        client.srem(EARLIER_3 + "active:deliveries", pending)
        client.zrem(EARLIER_3 + "due:deliveries", pending)
        moved = _migrate(stack.redis_url)
        assert moved.returncode == 0, moved.stderr
        counts = dict(item.split("=") for item in moved.stdout.split())
        assert int(counts["moved"]) >= 2 * len(ids) and counts["kept"] == "0", moved.stdout
        left = [k.decode() for k in client.scan_iter(match=keys.ROOT + "*")]
        assert not [k for k in left if tagged(k) or split(k)]
        for run_id in ids:
            assert client.exists(keys.run(run_id)) == 1
            assert client.zscore(keys.due_runs("nutrient", keys.shard_of(run_id)), run_id) is not None
        # The ended delivery has today's id, in its subscription's shard: a resend is one slot.
        assert counts["rehomed"] == "1", moved.stdout
        [now_id] = [m.decode() for m in client.zrange(keys.sub_deliveries(sub["id"]), 0, -1)]
        assert keys.shard_of(now_id) == keys.shard_of(sub["id"]) and now_id != pending
        assert client.exists(keys.subscription(sub["id"]), keys.delivery(now_id), keys.delivery(pending)) == 2
        again = _migrate(stack.redis_url)
        assert again.stdout.split() == ["moved=0", "kept=0", "expired=0", "split=0", "rehomed=0"]
    finally:
        client.close()
    assert (await stack.api.get(f"/v1/subscriptions/{sub['id']}")).json()["url"] == receiver.url
    worker = WorkerRuntime(stack.settings)
    task = asyncio.create_task(worker.run(serve_health=False))
    try:

        async def called_back() -> bool:
            done = {
                r.json()["data"]["run"]["id"]
                for r in receiver.received
                if r.json()["type"] == "run.succeeded"
            }
            return set(ids) <= done

        await eventually(called_back, what="the moved runs polled to their end and called back")
    finally:
        worker.request_stop()
        await task


@on_one_redis
async def test_a_tagged_key_that_exists_is_never_overwritten(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    client = redis.Redis.from_url(stack.redis_url)
    try:
        client.set(keys.ROOT + "worker:w1", "old")
        client.set(keys.PREFIX + "worker:w1", "new")
        client.set(keys.ROOT + "worker:w2", "old", px=600_000)
        done = _migrate(stack.redis_url)
        assert done.returncode == 1 and done.stdout.split() == ["moved=1", "kept=1", "expired=0", "split=0"]
        assert "both layouts" in done.stderr
        assert (
            client.get(keys.PREFIX + "worker:w1") == b"new" and client.get(keys.ROOT + "worker:w1") == b"old"
        )
        assert 0 < client.pttl(keys.PREFIX + "worker:w2") <= 600_000  # the expiry came along
    finally:
        client.close()
