"""``hookbridge spell-out-feeds`` (``layout.spell_out_feeds``), what a rollback across short feed entries
needs, on a real redis-server (or a cluster under HB_TEST_CLUSTER): every client's feed rewritten in the
form the versions before read (feedform.spelled_out), each entry under its own id, the expiry kept, read
by today's code as the same events; a second pass rewrites nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from service.core import domain
from service.core.lifecycle import Transition, new_run
from service.core.records import Event, replace
from service.store import Applied, Store, connect, feedform, keys
from service.store.feed import Feed
from service.store.layout import spell_out_feeds
from service.vendors.registry import load_settings
from tests.conftest import base_env


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    settings = load_settings(base_env(redis_url, HOOKBRIDGE_RETENTION_S="3600"))
    s = Store(connect(settings), settings)
    try:
        yield s
    finally:
        await s.close()


async def _emit_run(store: Store, client: str, n: int) -> None:
    """A run of ``client`` with a run.submitted (its body under its key) and ``n`` run.progress (nobody
    asked for them: their bodies in the feed), relayed as the worker relays them."""
    run = new_run(
        run_id=domain.new_id("run"), client=client, vendor="nutrient", operation="extract",
        document={"url": "https://example.com/a.pdf"}, options={}, metadata={}, subscription_ids=[],
        zero_retention=False, now_ms=domain.now_ms(),
    )  # fmt: skip
    assert await store.runs.create_run(run, None, None) is None
    for k, etype in enumerate([domain.EVENT_SUBMITTED] + [domain.EVENT_PROGRESS] * n):
        body = json.dumps({"type": etype, "timestamp": "t", "data": {"run": {"id": run.id}, "k": k}})
        event = Event(
            id=domain.new_id_beside("evt", run.id), type=etype, created=0, vendor=run.vendor, body=body
        )
        new = replace(run, version=run.version + 1, status="running", updated_at=domain.now_ms())
        assert isinstance(await store.runs.transition(Transition(new, run.version, events=[event])), Applied)
        run = new


async def _everything(feed: Feed, client: str) -> list[tuple[str, str, bytes]]:
    page = await feed.read(client, "", limit=1000, now_ms=domain.now_ms())
    return [(e.id, e.event_id, e.body) for e in page.events]


async def test_every_feed_is_rewritten_as_earlier_versions_read_it(store: Store) -> None:
    feed = Feed(store.redis, store.redis, store.settings.retention_s)
    for _ in range(3):
        await _emit_run(store, "alice", 250)  # 753 entries: two batches of 500
    await _emit_run(store, "bob", 2)
    await store.redis.persist(keys.client_feed("bob"))  # no expiry stays none
    before = {c: await _everything(feed, c) for c in ("alice", "bob")}
    assert len(before["alice"]) == 753 and len(before["bob"]) == 3

    counts = await spell_out_feeds(store.redis)

    assert counts == {"rewritten": 2, "kept": 0, "entries": 756}
    for client in ("alice", "bob"):
        raw = await store.redis.xrange(keys.client_feed(client))
        assert [text.decode() for text, _ in raw] == [entry_id for entry_id, _, _ in before[client]]
        for _, fields in raw:
            # As the versions before wrote an entry: the prefixes, the type's word, n for a kept body.
            assert fields[b"e"].startswith(b"evt_") and fields[b"r"].startswith(b"run_")
            assert fields[b"t"] in {b"run.submitted", b"run.progress"}
            assert (b"n" in fields) == (fields[b"t"] == b"run.submitted") != (b"b" in fields)
        assert await _everything(feed, client) == before[client]  # today's code reads the same events
    assert 0 < await store.redis.pttl(keys.client_feed("alice")) <= 3_600_000
    assert await store.redis.pttl(keys.client_feed("bob")) == -1
    assert await store.redis.exists(keys.client_feed("alice") + ":spelling") == 0

    again = await spell_out_feeds(store.redis)
    assert again == {"rewritten": 0, "kept": 2, "entries": 0}


async def test_the_command_rewrites_them_and_says_how_many(store: Store, redis_url: str) -> None:
    await _emit_run(store, "carol", 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    env.update(base_env(redis_url))
    done = subprocess.run(
        [sys.executable, "-m", "service", "spell-out-feeds"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["rewritten=1", "kept=0", "entries=2"]
    [first, _] = await store.redis.xrange(keys.client_feed("carol"))
    assert feedform.spelled_out(first[1])["t"] == first[1][b"t"].decode() == "run.submitted"
