"""``hookbridge spell-out-events`` (``layout.spell_out_events``), what a rollback across short feed entries
and bodies packed against their run's id needs, on a real redis-server (or a cluster under
HB_TEST_CLUSTER): every client's feed rewritten in the form the versions before read
(feedform.spelled_out), each entry under its own id, the expiry kept; every body of a run's event, under
its key, in the feed or in an outbox, packed as ~2; all of it read by today's code as the same events; a
second pass rewrites nothing; every first attempt a delivery's hash keeps goes back to the head of its
attempt list."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from service.core import domain
from service.core.domain import AttemptOutcome
from service.core.lifecycle import Transition, new_run
from service.core.records import DELIVERY_HASH_INTERNAL, Attempt, Event, Run, Subscription, replace
from service.store import Applied, Store, bodies, connect, feedform, keys
from service.store.feed import Feed
from service.store.layout import spell_out_events
from service.vendors.registry import load_settings
from tests.conftest import base_env, hookbridge_command


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    settings = load_settings(base_env(redis_url, HOOKBRIDGE_RETENTION_S="3600"))
    s = Store(connect(settings), settings)
    try:
        yield s
    finally:
        await s.close()


async def _emit_run(store: Store, client: str, n: int) -> str:
    """A run of ``client`` with a run.submitted (its body under its key) and ``n`` run.progress (nobody
    asked for them: their bodies in the feed), relayed as the worker relays them; its id."""
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
        events = [event]
        if k == 0:
            new = replace(new, event_ids=[event.id])  # the record names its run.submitted, as lifecycle does
        assert isinstance(await store.runs.transition(Transition(new, run.version, events=events)), Applied)
        run = new
    return run.id


async def _stored_bodies(store: Store) -> list[bytes]:
    """Every body Redis holds: under the events' keys, in the feeds' entries, in the outboxes."""
    found: list[bytes] = []
    async for name in store.redis.scan_iter(match=f"{keys.ANY_SHARD}*", count=1000):
        key, kind = name.decode(), (await store.redis.type(name)).decode()
        if kind == "string" and ":evt:" in key:
            found.append(await store.redis.get(name))
        elif kind == "stream":
            found += [
                f[b"b"] for _, f in await store.redis.xrange(name) if not f.get(b"b", b"0")[:1].isdigit()
            ]
        elif kind == "list" and key.endswith(":outbox"):
            found += [item for item in await store.redis.lrange(name, 0, -1) if item[:1] == b"~"]
    return found


async def _everything(feed: Feed, client: str) -> list[tuple[str, str, bytes]]:
    page = await feed.read(client, "", limit=1000, now_ms=domain.now_ms())
    return [(e.id, e.event_id, e.body) for e in page.events]


async def test_every_feed_and_body_is_rewritten_as_earlier_versions_read_them(store: Store) -> None:
    feed = Feed(store.redis, store.redis, store.settings.retention_s)
    alice = [await _emit_run(store, "alice", 250) for _ in range(3)]  # 753 entries: two batches of 500
    await _emit_run(store, "bob", 2)
    await store.redis.persist(keys.client_feed("bob"))  # no expiry stays none
    # A relay that had not finished when the pods stopped: its entry in the outbox (the ops name the event,
    # the body packed against its run follows), and the body the relay stored under the event's key for a
    # delivery before it listed the event (no record or list names it yet).
    stranded = bodies.packed(json.dumps({"type": "run.progress", "k": "stranded"}), alice[0])
    stranded_id = domain.new_id_beside("evt", alice[0])
    ops = json.dumps({"v": 9, "events": [{"id": stranded_id, "type": "run.progress", "body": 2}]}).encode()
    await store.redis.rpush(keys.run_outbox(alice[0]), ops, stranded)
    await store.redis.set(keys.event(stranded_id), stranded, px=3_600_000)
    before = {c: await _everything(feed, c) for c in ("alice", "bob")}
    history = await store.runs.run_events(await _record(store, alice[0]))
    assert len(before["alice"]) == 753 and len(before["bob"]) == 3 and len(history) == 1
    assert any(b.startswith(bodies.RUN_MARKS) for b in await _stored_bodies(store))

    counts = await spell_out_events(store.redis)

    # 4 run.submitted under their keys, 752 progress bodies in the feeds, 1 in the outbox and its key.
    assert counts == {
        "feeds": 2,
        "feeds_kept": 0,
        "entries": 756,
        "bodies": 758,
        "unreadable": 0,
        "attempts": 0,
    }
    for client in ("alice", "bob"):
        raw = await store.redis.xrange(keys.client_feed(client))
        assert [text.decode() for text, _ in raw] == [entry_id for entry_id, _, _ in before[client]]
        for _, fields in raw:
            # As the versions before wrote an entry: the prefixes, the type's and the vendor's words, n for a
            # kept body.
            assert fields[b"e"].startswith(b"evt_") and fields[b"r"].startswith(b"run_")
            assert fields[b"t"] in {b"run.submitted", b"run.progress"} and fields[b"v"] == b"nutrient"
            assert (b"n" in fields) == (fields[b"t"] == b"run.submitted") != (b"b" in fields)
        assert await _everything(feed, client) == before[client]  # today's code reads the same events
    # Nothing an earlier version cannot read is left, and each body reads as it did.
    assert all(b.startswith((bodies.MARK, b"{")) for b in await _stored_bodies(store))
    assert await store.runs.run_events(await _record(store, alice[0])) == history
    outbox = await store.redis.lrange(keys.run_outbox(alice[0]), 0, -1)
    assert outbox[0] == ops and bodies.unpacked(outbox[1]) == bodies.unpacked(stranded, alice[0])
    kept = await store.redis.get(keys.event(stranded_id))
    assert kept.startswith(bodies.MARK) and bodies.unpacked(kept) == bodies.unpacked(stranded, alice[0])
    assert 0 < await store.redis.pttl(keys.event(stranded_id)) <= 3_600_000
    assert 0 < await store.redis.pttl(keys.client_feed("alice")) <= 3_600_000
    assert await store.redis.pttl(keys.client_feed("bob")) == -1
    assert await store.redis.exists(keys.client_feed("alice") + ":spelling") == 0

    again = await spell_out_events(store.redis)
    assert again == {"feeds": 0, "feeds_kept": 2, "entries": 0, "bodies": 0, "unreadable": 0, "attempts": 0}


async def _record(store: Store, run_id: str) -> Run:
    run = await store.runs.get_run(run_id)
    assert run is not None
    return run


async def test_the_command_rewrites_them_and_says_how_many(store: Store, redis_url: str) -> None:
    await _emit_run(store, "carol", 1)
    done = hookbridge_command(redis_url, "spell-out-events")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "feeds=1", "feeds_kept=0", "entries=2", "bodies=2", "unreadable=0", "attempts=0"
    ]  # fmt: skip
    [first, _] = await store.redis.xrange(keys.client_feed("carol"))
    assert feedform.spelled_out(first[1])["t"] == first[1][b"t"].decode() == "run.submitted"


async def test_a_first_attempt_its_delivery_keeps_goes_back_to_the_head_of_its_list(store: Store) -> None:
    # The versions before read a delivery's attempts from its list alone.
    stored = {"id": "sub_1", "client": "dave", "url": "https://example.com/hook", "created": "1"}
    sub = Subscription.from_hash({**stored, "event_types": json.dumps(["run.*"])})
    assert await store.subscriptions.create_subscription(sub, max_count=10)
    await _emit_run(store, "dave", 0)
    [claimed], _ = await store.deliveries.claim_deliveries(domain.now_ms(), 10, 30_000)
    dlv = claimed.delivery.id
    first = Attempt(at=domain.rfc3339(domain.now_ms()) or "", status_code=204, duration_ms=2.5)
    await store.deliveries.record_attempt(
        claimed.delivery, AttemptOutcome.SUCCEEDED, now_ms=domain.now_ms(), attempt=first, status_code=204
    )
    field = DELIVERY_HASH_INTERNAL["first_attempt"]
    assert await store.redis.hget(keys.delivery(dlv), field) is not None
    assert not await store.redis.exists(keys.delivery_attempts(dlv))

    counts = await spell_out_events(store.redis)

    assert counts["attempts"] == 1
    assert await store.redis.hget(keys.delivery(dlv), field) is None
    assert await store.redis.lrange(keys.delivery_attempts(dlv), 0, -1) == [first.to_json().encode()]
    expires_at = await store.redis.pexpiretime(keys.delivery(dlv))
    assert expires_at > 0
    assert await store.redis.pexpiretime(keys.delivery_attempts(dlv)) == expires_at
    assert await store.deliveries.delivery_attempts(dlv) == [first]  # today's code reads the same
    assert (await spell_out_events(store.redis))["attempts"] == 0
