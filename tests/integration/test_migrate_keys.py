"""Upgrading from hookbridge 2 (docs/deploy.md): its keys had no hash tag (``hb:<name>``); today's carry
the store's (``hb:{hb}:<name>``). A store written in the old layout is invisible to this version until
`hookbridge migrate-keys` renames it; then a pending run goes on and is called back, and its
subscription, its history and their expiries are as they were.

The old layout is made here by renaming a fresh stack's keys back to hookbridge 2's names: the names after
the prefix are the same in both versions (tests/store/test_layout.py holds the rename rule as a table)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import redis

from service.store import keys
from service.store.layout import tagged
from service.worker.runtime import WorkerRuntime
from tests.conftest import ON_CLUSTER, Receiver, StackFactory, base_env, eventually

pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="hookbridge 2 never ran on a cluster: one Redis only")


def _to_old_layout(client: redis.Redis) -> int:
    moved = 0
    for raw in client.scan_iter(match=keys.PREFIX + "*"):
        name = raw.decode()
        client.rename(name, keys.ROOT + name.removeprefix(keys.PREFIX))
        moved += 1
    return moved


def _migrate(redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    env.update(base_env(redis_url))
    return subprocess.run(
        [sys.executable, "-m", "service", "migrate-keys"], env=env, capture_output=True, text=True, timeout=60
    )


async def test_a_store_of_hookbridge_2_is_moved_and_its_pending_run_is_called_back(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack(worker=False)
    sub = await stack.subscribe(receiver.url, event_types=["run.succeeded"])
    run = await stack.submit("nutrient")
    client = redis.Redis.from_url(stack.redis_url)
    try:
        old = _to_old_layout(client)
        # Keys without an expiry; the others (a rate limiter's) may expire before the move.
        lasting = sum(client.pttl(k) == -1 for k in client.scan_iter(match=keys.ROOT + "*"))
        assert old >= 4  # the run, its document, the listing, the due set, the subscription, ...
        assert (await stack.api.get(f"/v1/runs/{run['id']}")).status_code == 404  # not seen untagged

        moved = _migrate(stack.redis_url)
        assert moved.returncode == 0, moved.stderr
        counts = dict(item.split("=") for item in moved.stdout.split())
        assert lasting <= int(counts["moved"]) <= old and counts["kept"] == "0", moved.stdout
        assert not [k for k in client.scan_iter(match=keys.ROOT + "*") if tagged(k.decode())]
        again = _migrate(stack.redis_url)  # run twice: nothing left to move
        assert again.stdout.split() == ["moved=0", "kept=0", "expired=0"]
    finally:
        client.close()

    assert (await stack.api.get(f"/v1/subscriptions/{sub['id']}")).json()["url"] == receiver.url
    worker = WorkerRuntime(stack.settings)
    task = asyncio.create_task(worker.run(serve_health=False))
    try:

        async def called_back() -> bool:
            return any(r.json()["data"]["run"]["id"] == run["id"] for r in receiver.received)

        await eventually(called_back, what="the moved run polled to its end and called back")
        assert (await stack.api.get(f"/v1/runs/{run['id']}")).json()["status"] == "succeeded"
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
        assert done.returncode == 1 and done.stdout.split() == ["moved=1", "kept=1", "expired=0"]
        assert "both layouts" in done.stderr
        assert (
            client.get(keys.PREFIX + "worker:w1") == b"new" and client.get(keys.ROOT + "worker:w1") == b"old"
        )
        assert 0 < client.pttl(keys.PREFIX + "worker:w2") <= 600_000  # the expiry came along
    finally:
        client.close()
