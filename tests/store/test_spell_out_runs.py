"""``hookbridge spell-out-runs`` (``layout.spell_out_runs``), what a rollback across run records without
their id needs, on a real redis-server: every run record rewritten in the form the versions before read (its
id in it, its trail's kinds as words), its expiry kept, read back by today's code as the same run; nothing
else touched; a second pass rewrites nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from service.core import compact, lifecycle, trail
from service.core.lifecycle import Transition
from service.core.records import Run, replace
from service.store import connect, keys
from service.store.layout import spell_out_runs
from service.vendors.registry import load_settings
from tests.conftest import base_env, hookbridge_command


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client: Redis = connect(load_settings(base_env(redis_url)))  # a cluster's client under HB_TEST_CLUSTER
    try:
        yield client
    finally:
        await client.aclose()


def _run(run_id: str) -> Run:
    run = lifecycle.new_run(
        run_id=run_id,
        client="alice",
        vendor="nutrient",
        operation="extract",
        document={"url": "https://example.com/a.pdf"},
        options={},
        metadata={"k": "v"},
        subscription_ids=[],
        zero_retention=False,
        now_ms=1_800_000_000_000,
    )
    change = trail.record(Transition(run, 0), "submitted", at_ms=run.created_at + 5, vendor_status="queued")
    for n in range(12):
        kind = "progress" if n % 2 else "poll"
        change = trail.record(change, kind, at_ms=run.created_at + 1_000 * n, vendor_status="running")
    return change.run


async def test_every_run_record_is_rewritten_as_earlier_versions_read_it(redis: Redis) -> None:
    runs = [_run(f"run_{i:04d}") for i in range(1_203)]  # more than a batch: three batches
    pipe = redis.pipeline(transaction=False)
    for run in runs:
        pipe.set(keys.run(run.id), run.to_json())
    pipe.pexpire(keys.run(runs[0].id), 3_600_000)
    others = {keys.run_events(runs[0].id): "list", keys.relayed("alice", runs[0].id): "mark"}
    pipe.rpush(keys.run_events(runs[0].id), "evt_1")
    pipe.set(keys.relayed("alice", runs[0].id), "7")
    await pipe.execute()

    counts = await spell_out_runs(redis)

    assert counts == {"rewritten": len(runs), "kept": 0, "expired": 0, "unreadable": 0}
    for run in runs[:50]:
        raw = await redis.get(keys.run(run.id))
        stored = json.loads(raw)
        assert stored["id"] == run.id  # what the earlier versions require
        assert [e[1] for e in stored["t"]] == [e["kind"] for e in trail.public(run)["trail"]]
        assert Run.from_json(raw, run.id) == Run.from_json(raw) != run  # its kinds are words now
        assert trail.public(Run.from_json(raw)) == trail.public(run)  # and show the same trail
    assert 0 < await redis.pttl(keys.run(runs[0].id)) <= 3_600_000
    assert await redis.pttl(keys.run(runs[1].id)) == -1  # no expiry stays none
    assert await redis.lrange(keys.run_events(runs[0].id), 0, -1) == [b"evt_1"] and len(others) == 2
    assert await redis.get(keys.relayed("alice", runs[0].id)) == b"7"

    again = await spell_out_runs(redis)
    assert again == {"rewritten": 0, "kept": len(runs), "expired": 0, "unreadable": 0}


async def test_a_record_that_does_not_read_is_left_as_it_is(redis: Redis) -> None:
    await redis.set(keys.run("run_bad"), b"not json")
    await redis.set(keys.run("run_ok"), _run("run_ok").to_json())
    counts = await spell_out_runs(redis)
    assert counts["unreadable"] == 1 and counts["rewritten"] == 1
    assert await redis.get(keys.run("run_bad")) == b"not json"


async def test_the_command_rewrites_them_and_says_how_many(redis: Redis, redis_url: str) -> None:
    await redis.set(keys.run("run_cli"), _run("run_cli").to_json())
    done = hookbridge_command(redis_url, "spell-out-runs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["rewritten=1", "kept=0", "expired=0", "unreadable=0"]
    assert json.loads(await redis.get(keys.run("run_cli")) or b"{}")["id"] == "run_cli"


async def test_a_finished_runs_compact_record_is_spelled_out_plain(redis: Redis) -> None:
    # The versions before read only the plain form: a compact record (service/core/compact.py) would read
    # there as a run without its vendor's id, trail or events.
    ended = {"status": "succeeded", "completed_at": 1_800_000_100_000, "vendor_run_id": "v-1"}
    run = replace(_run("run_done"), **ended, event_ids=["evt_1", "evt_2"])
    assert compact.MARK in run.to_json().encode()
    await redis.set(keys.run(run.id), run.to_json(), px=3_600_000)

    assert await spell_out_runs(redis) == {"rewritten": 1, "kept": 0, "expired": 0, "unreadable": 0}
    raw = await redis.get(keys.run(run.id))
    stored = json.loads(raw)
    assert "z" not in stored and stored["id"] == run.id and stored["vr"] == "v-1"
    assert len(stored["t"]) == len(run.trail) and stored["e"] == run.event_ids
    assert trail.public(Run.from_json(raw)) == trail.public(run)
    assert 0 < await redis.pttl(keys.run(run.id)) <= 3_600_000
