"""Upgrading from an earlier layout (docs/deploy.md): hookbridge 2's keys had no hash tag (``hb:<name>``);
an earlier hookbridge 3 put every key under the store's one tag (``hb:{hb}:<name>``); today a run's keys
are in its shard and the indexes of runs are one per shard. A store written in an old layout is invisible
to this version until `hookbridge migrate-keys` moves it; then a pending run goes on and is called back,
and its subscription, its history and their expiries are as they were.

The old layout is made here from a fresh stack's keys: the names after the prefix are the same in every
version (tests/store/test_layout.py holds the rule as a table), and the per-shard indexes of runs are
merged back into one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import redis

from service.store import keys
from service.store.layout import split, tagged
from service.worker.runtime import WorkerRuntime
from tests.conftest import ON_CLUSTER, Receiver, StackFactory, base_env, eventually

pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="migrate-keys runs on one Redis only (a cluster drains)")

HOOKBRIDGE_2, EARLIER_3 = keys.ROOT, keys.PREFIX


def _to_old_layout(client: redis.Redis, old: str) -> int:
    """Every key of today's layout but a vendor's renamed to ``old`` + its name after the prefix, the
    indexes of runs of the 16 shards merged into one; returns how many old keys there are."""
    made = 0
    merged: dict[str, list[str]] = {}
    for raw in list(client.scan_iter(match=keys.ROOT + "{*")):
        name = raw.decode()
        if name.startswith(keys.ROOT + "{v:"):
            continue  # a vendor's budget and pause keep their own tag (their own rows of the rule)
        rest = name[name.index("}:") + 2 :]
        if rest.startswith("due:runs:") or rest in ("active:runs", "outbox"):
            merged.setdefault(old + rest, []).append(name)
        elif name != old + rest:
            client.rename(name, old + rest)
            made += 1
        else:
            made += 1
    for target, parts in merged.items():
        if client.type(parts[0]) == b"zset":
            client.zunionstore(target, parts)
        else:
            client.sunionstore(target, parts)
        client.delete(*parts)
        made += 1
    return made


def _migrate(redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    env.update(base_env(redis_url))
    return subprocess.run(
        [sys.executable, "-m", "service", "migrate-keys"], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("old", [HOOKBRIDGE_2, EARLIER_3], ids=["hookbridge-2", "earlier-hookbridge-3"])
async def test_a_store_of_an_earlier_layout_is_moved_and_its_pending_run_is_called_back(
    make_stack: StackFactory, receiver: Receiver, old: str
) -> None:
    stack = await make_stack(worker=False)
    sub = await stack.subscribe(receiver.url, event_types=["run.succeeded"])
    runs = [await stack.submit("nutrient") for _ in range(6)]  # over several shards
    client = redis.Redis.from_url(stack.redis_url)
    try:
        made = _to_old_layout(client, old)
        assert made >= 4  # the runs, their documents, the listing, the due set, the subscription, ...
        due = client.zrange(old + "due:runs:nutrient", 0, -1, withscores=True)
        assert sorted(m.decode() for m, _ in due) == sorted(r["id"] for r in runs)
        assert (await stack.api.get(f"/v1/runs/{runs[0]['id']}")).status_code == 404  # not seen

        moved = _migrate(stack.redis_url)
        assert moved.returncode == 0, moved.stderr
        counts = dict(item.split("=") for item in moved.stdout.split())
        assert counts["kept"] == "0" and int(counts["split"]) == 2, moved.stdout  # the due set, active runs
        assert int(counts["moved"]) >= 2 * len(runs), moved.stdout  # each run's record and document at least
        left = [k.decode() for k in client.scan_iter(match=keys.ROOT + "*")]
        assert not [k for k in left if tagged(k) or split(k)]
        # Each due entry is in its run's shard's set, with its score.
        for member, score in due:
            run_id = member.decode()
            assert client.zscore(keys.due_runs("nutrient", keys.shard_of(run_id)), run_id) == score
            assert client.sismember(keys.active_runs(keys.shard_of(run_id)), run_id)
        again = _migrate(stack.redis_url)  # run twice: nothing left to move
        assert again.stdout.split() == ["moved=0", "kept=0", "expired=0", "split=0"]
    finally:
        client.close()

    assert (await stack.api.get(f"/v1/subscriptions/{sub['id']}")).json()["url"] == receiver.url
    worker = WorkerRuntime(stack.settings)
    task = asyncio.create_task(worker.run(serve_health=False))
    try:

        async def called_back() -> bool:
            done = {r.json()["data"]["run"]["id"] for r in receiver.received}
            return all(run["id"] in done for run in runs)

        await eventually(called_back, what="the moved runs polled to their end and called back")
        assert (await stack.api.get(f"/v1/runs/{runs[0]['id']}")).json()["status"] == "succeeded"
    finally:
        worker.request_stop()
        await task


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
