"""The event feed where it lives: ``_fanout.lua`` appends every event to the client's stream in the step
that emits it, ``read_feed.lua`` reads it a page at a time, ``stream_slot.lua`` bounds the streams;
against a real redis-server, through the Store and the Feed, no API and no worker."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from service.core import domain
from service.core.lifecycle import Transition, finished, new_run, polled, submitted
from service.core.records import Event, Run, Subscription, replace
from service.store import Applied, Store, bodies, connect, feedform, keys
from service.store.feed import Feed, FeedFilter, IteratorInvalid, IteratorTrimmed, valid_iterator
from service.vendors.registry import load_settings
from tests.conftest import base_env, eventually


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    settings = load_settings(base_env(redis_url, HOOKBRIDGE_RETENTION_S="3600"))
    s = Store(connect(settings), settings)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def feed(store: Store) -> AsyncIterator[Feed]:
    f = Feed(store.redis, connect(store.settings), store.settings.retention_s)
    try:
        yield f
    finally:
        await f.close()


async def _sub(store: Store, sub_id: str, client: str = "alice", types: list[str] | None = None) -> None:
    sub = {
        "id": sub_id,
        "client": client,
        "event_types": json.dumps(types) if types else "",
        "disabled": "0",
        "created": str(domain.now_ms()),
        "secrets": "[]",
    }
    assert await store.subscriptions.create_subscription(Subscription.from_hash(sub), max_count=10)


async def _run(store: Store, run_id: str, client: str = "alice", **extra: Any) -> Run:
    run = new_run(
        run_id=run_id,
        client=client,
        vendor=extra.pop("vendor", "nutrient"),
        operation="extract",
        document={"url": "https://example.com/a.pdf"},
        options={},
        metadata={},
        subscription_ids=[],
        zero_retention=extra.pop("zero_retention", False),
        now_ms=domain.now_ms(),
    )
    assert await store.runs.create_run(run, None, None) is None
    return run


async def _apply(store: Store, change: Transition) -> Run:
    assert isinstance(await store.runs.transition(change), Applied)
    return change.run


def _eid(run_id: str, n: int) -> str:
    """``evt_<run>_<n>`` placed in the run's shard (itself, or the first ``evt_<run>_<n>_<k>`` there): a
    readable event id minted beside its run, as production mints them (``domain.new_id_beside``)."""
    name = f"evt_{run_id}_{n}"
    return keys.in_shard(lambda k: f"{name}_{k}" if k else name, keys.shard_of(run_id))


def _event(run: Run, etype: str, n: int) -> Event:
    body = {"type": etype, "timestamp": "t", "data": {"run": {"id": run.id}, "n": n}}
    return Event(id=_eid(run.id, n), type=etype, created=0, vendor=run.vendor, body=json.dumps(body))


async def _emit(store: Store, run: Run, *events: Event) -> Run:
    new = replace(run, version=run.version + 1, status="running", updated_at=domain.now_ms())
    return await _apply(store, Transition(new, run.version, events=list(events)))


async def _read(feed: Feed, after: str = "", client: str = "alice", **kw: Any) -> Any:
    return await feed.read(client, after, limit=kw.pop("limit", 50), now_ms=domain.now_ms(), **kw)


def _pos(stream_id: str) -> tuple[int, int]:
    ms, seq = stream_id.split("-")
    return int(ms), int(seq)


async def test_every_emitted_event_is_in_its_clients_feed_in_order(store: Store, feed: Feed) -> None:
    await _sub(store, "sub_1", types=["run.*"])
    a, b = await _run(store, "run_a"), await _run(store, "run_b")
    a = await _emit(store, a, _event(a, "run.submitted", 1))
    b = await _emit(store, b, _event(b, "run.submitted", 2))
    a = await _emit(store, a, _event(a, "run.progress", 3), _event(a, "run.succeeded", 4))
    other = await _run(store, "run_c", client="bob")
    await _emit(store, other, _event(other, "run.submitted", 5))

    page = await _read(feed)
    assert [e.event_id for e in page.events] == [
        _eid("run_a", 1),
        _eid("run_b", 2),
        _eid("run_a", 3),
        _eid("run_a", 4),
    ]
    assert page.done and valid_iterator(page.iterator)
    ids = [e.id for e in page.events]
    assert ids == sorted(ids, key=_pos)
    # The entry refers to the body hb:evt keeps (the exact bytes sent) instead of copying it.
    raw = await store.redis.xrange(keys.client_feed("alice"))
    first = feedform.entry(raw[0][1])
    assert first.body is None and first.size > 0 and (first.run_id, first.vendor) == ("run_a", "nutrient")
    assert page.events[0].envelope() == {
        "id": ids[0],
        "event_id": _eid("run_a", 1),
        "type": "run.submitted",
        "timestamp": "t",
        "data": {"run": {"id": "run_a"}, "n": 1},
    }
    assert [e.event_id for e in (await _read(feed, client="bob")).events] == [_eid("run_c", 5)]
    assert (await _read(feed, page.iterator)).events == []


async def test_pages_filters_and_the_iterator(store: Store, feed: Feed) -> None:
    run = await _run(store, "run_a")
    run = await _emit(store, run, *[_event(run, "run.progress", n) for n in range(5)])
    run = await _emit(store, run, _event(run, "run.failed", 5))
    other = await _run(store, "run_b", vendor="uptiq")
    await _emit(store, other, _event(other, "run.submitted", 6))

    first = await _read(feed, limit=2)
    assert [e.event_id for e in first.events] == [_eid("run_a", 0), _eid("run_a", 1)] and not first.done
    rest = await _read(feed, first.iterator, limit=50)
    assert [e.event_id for e in rest.events][-1] == _eid("run_b", 6) and rest.done
    assert len(first.events) + len(rest.events) == 7
    assert [e.event_id for e in (await _read(feed, only=FeedFilter(types=("run.failed",)))).events] == [
        _eid("run_a", 5)
    ]
    assert len((await _read(feed, only=FeedFilter(types=("run.*",)))).events) == 7
    assert [e.event_id for e in (await _read(feed, only=FeedFilter(run_id="run_b"))).events] == [
        _eid("run_b", 6)
    ]
    assert [e.event_id for e in (await _read(feed, only=FeedFilter(vendor="uptiq"))).events] == [
        _eid("run_b", 6)
    ]
    # A filter that matches nothing still moves the iterator past what it read.
    none = await _read(feed, only=FeedFilter(run_id="run_zzz"))
    assert none.events == [] and none.done and _pos(none.iterator) >= _pos(rest.events[-1].id)


async def test_progress_nobody_wants_and_zero_retention_carry_their_own_body(
    store: Store, feed: Feed
) -> None:
    settings = store.settings
    run = await _run(store, "run_a", zero_retention=True)
    run = await _apply(
        store,
        polled(
            run,
            domain.now_ms(),
            running=True,
            vendor_status="processing",
            progress={"percent": 10, "phase": None, "message": None},
            delay_s=1,
            due_ms=domain.now_ms(),
            settings=settings,
        ),
    )
    # No subscription wants run.progress: the event is not kept (hb:evt) but the feed has it, whole.
    assert await store.runs.run_events(run) == []
    change = finished(run, domain.now_ms(), status="succeeded", settings=settings, result={"secret": 42})
    await _apply(store, change)
    callback_body = json.loads(change.events[0].body)
    assert callback_body["data"]["result"] == {"secret": 42}
    page = await _read(feed)
    progress, done = (e.envelope() for e in page.events)
    assert progress["type"] == "run.progress" and progress["data"]["run"]["progress"]["percent"] == 10
    # Zero retention: the feed keeps the event, never the result.
    assert done["type"] == "run.succeeded" and done["data"]["result"] is None
    assert done["data"]["run"]["status"] == "succeeded"


async def test_the_test_event_goes_to_the_feed_too(store: Store, feed: Feed) -> None:
    await _sub(store, "sub_1")
    body = json.dumps({"type": domain.EVENT_TEST, "timestamp": "t", "data": {"subscription_id": "sub_1"}})
    ev = Event(id="evt_test", type=domain.EVENT_TEST, created=0, body=body)
    assert await store.subscriptions.emit_test_event("alice", "sub_1", ev, domain.now_ms()) == 1
    assert await store.subscriptions.emit_test_event("alice", "sub_1", ev, domain.now_ms()) == 0  # once
    page = await _read(feed)
    assert [(e.event_id, e.envelope()["type"]) for e in page.events] == [("evt_test", domain.EVENT_TEST)]


# Entries as stored (service/store/feedform.py) ------------------------------------------------------


async def _real_run(store: Store, client: str = "alice") -> Run:
    """A run with an id as production mints them (the short form drops only such ids' prefixes)."""
    return await _run(store, domain.new_id("run"), client=client)


def _real_event(run: Run, etype: str, n: int) -> Event:
    """An event of ``run`` with an id as production mints them, beside its run."""
    body = json.dumps({"type": etype, "timestamp": "t", "data": {"run": {"id": run.id}, "n": n}})
    return Event(id=domain.new_id_beside("evt", run.id), type=etype, created=0, vendor=run.vendor, body=body)


async def test_a_new_entry_is_short_and_always_has_the_same_five_fields(store: Store, feed: Feed) -> None:
    await _sub(store, "sub_1", types=["run.succeeded"])  # progress goes to the feed alone, with its body
    run = await _real_run(store)
    submitted_, progress = (
        _real_event(run, domain.EVENT_SUBMITTED, 1),
        _real_event(run, domain.EVENT_PROGRESS, 2),
    )
    await _emit(store, run, submitted_, progress)
    raw = await store.redis.xrange(keys.client_feed("alice"))
    assert [sorted(fields) for _, fields in raw] == [[b"b", b"e", b"r", b"t", b"v"]] * 2
    kept, carried = (fields for _, fields in raw)
    # The ids: a zero byte, then the 128 bits their 26 Crockford characters after the prefix stand for.
    assert kept[b"e"] == b"\x00" + domain.crockford_value(submitted_.id[4:]).to_bytes(16, "big")
    assert kept[b"r"] == b"\x00" + domain.crockford_value(run.id[4:]).to_bytes(16, "big")
    assert (kept[b"t"], carried[b"t"]) == (b"s", b"p") and kept[b"v"] == carried[b"v"] == b"N"
    # The kept one's b: the size of its stored body (a page's bound); the other's: its packed body.
    assert int(kept[b"b"]) == len(bodies.packed(submitted_.body, run.id)) and carried[b"b"].startswith(
        bodies.RUN_MARKS
    )
    # Read back in full, the same as the events emitted.
    page = await _read(feed)
    assert [(e.event_id, e.body) for e in page.events] == [
        (submitted_.id, submitted_.body.encode()),
        (progress.id, progress.body.encode()),
    ]


async def test_entries_written_before_the_short_form_read_alike_through_every_filter(
    store: Store, feed: Feed
) -> None:
    """A feed kept for RETENTION_S across the upgrade holds both forms: each reads in full and matches
    the same filters (a type or ``run.*``, a run, a vendor), and its size bounds a page the same."""
    await _sub(store, "sub_1", types=["run.succeeded"])
    run = await _real_run(store)

    # As the script before this wrote them: prefixes kept, the type spelled out, the size in n, no r or v
    # for a test event; the bodies packed, the kept one under the event's key.
    old_kept, old_carried = (
        _real_event(run, domain.EVENT_SUBMITTED, 1),
        _real_event(run, domain.EVENT_PROGRESS, 2),
    )
    test_body = json.dumps(
        {"type": domain.EVENT_TEST, "timestamp": "t", "data": {"subscription_id": "sub_1"}}
    )
    old_test = Event(id=domain.new_id("evt"), type=domain.EVENT_TEST, created=0, body=test_body)
    await store.redis.set(keys.event(old_kept.id), bodies.packed(old_kept.body))
    feed_key = keys.client_feed("alice")
    common = {"r": run.id, "v": "nutrient"}
    await store.redis.xadd(
        feed_key, {"e": old_kept.id, "t": old_kept.type, **common, "n": len(bodies.packed(old_kept.body))}
    )
    await store.redis.xadd(
        feed_key, {"e": old_carried.id, "t": old_carried.type, **common, "b": bodies.packed(old_carried.body)}
    )
    await store.redis.xadd(feed_key, {"e": old_test.id, "t": old_test.type, "b": bodies.packed(test_body)})
    # As the version before this one wrote them: the ids as their 26 characters, without the prefix.
    mid_kept, mid_carried = (
        _real_event(run, domain.EVENT_SUBMITTED, 5),
        _real_event(run, domain.EVENT_PROGRESS, 6),
    )
    await store.redis.set(keys.event(mid_kept.id), bodies.packed(mid_kept.body, run.id))
    mid = {"r": run.id[4:], "v": "nutrient"}
    await store.redis.xadd(
        feed_key, {"e": mid_kept.id[4:], "t": "s", **mid, "b": str(len(bodies.packed(mid_kept.body, run.id)))}
    )
    await store.redis.xadd(
        feed_key, {"e": mid_carried.id[4:], "t": "p", **mid, "b": bodies.packed(mid_carried.body, run.id)}
    )
    mid_test = Event(id=domain.new_id("evt"), type=domain.EVENT_TEST, created=0, body=test_body)
    await store.redis.xadd(
        feed_key, {"e": mid_test.id[4:], "t": "t", "r": "", "v": "", "b": bodies.packed(test_body)}
    )
    # As the version before this one wrote them: the ids as bits, the vendor spelled out.
    bits_kept, bits_carried = (
        _real_event(run, domain.EVENT_SUBMITTED, 7),
        _real_event(run, domain.EVENT_PROGRESS, 8),
    )
    await store.redis.set(keys.event(bits_kept.id), bodies.packed(bits_kept.body, run.id))
    bits = {"r": feedform.stored_run_id(run.id), "v": "nutrient"}
    size = str(len(bodies.packed(bits_kept.body, run.id)))
    await store.redis.xadd(
        feed_key, {"e": feedform.stored_event_id(bits_kept.id), "t": "s", **bits, "b": size}
    )
    await store.redis.xadd(
        feed_key,
        {
            "e": feedform.stored_event_id(bits_carried.id),
            "t": "p",
            **bits,
            "b": bodies.packed(bits_carried.body, run.id),
        },
    )
    # Then the same kinds as this version writes them.
    new_kept, new_carried = (
        _real_event(run, domain.EVENT_SUBMITTED, 3),
        _real_event(run, domain.EVENT_PROGRESS, 4),
    )
    await _emit(store, run, new_kept, new_carried)
    new_test = Event(id=domain.new_id("evt"), type=domain.EVENT_TEST, created=0, body=test_body)
    assert await store.subscriptions.emit_test_event("alice", "sub_1", new_test, domain.now_ms()) == 1
    raw = await store.redis.xrange(feed_key)
    assert len(raw[-1][1][b"e"]) == 17 and raw[-1][1][b"r"] == b""  # the last one is of today's form

    everything = [
        old_kept,
        old_carried,
        old_test,
        mid_kept,
        mid_carried,
        mid_test,
        bits_kept,
        bits_carried,
        new_kept,
        new_carried,
        new_test,
    ]
    of_the_run = [
        old_kept,
        old_carried,
        mid_kept,
        mid_carried,
        bits_kept,
        bits_carried,
        new_kept,
        new_carried,
    ]
    cases: list[tuple[FeedFilter, list[Event]]] = [
        (FeedFilter(), everything),
        (FeedFilter(types=(domain.EVENT_PROGRESS,)), [old_carried, mid_carried, bits_carried, new_carried]),
        (
            FeedFilter(types=(domain.EVENT_SUBMITTED, domain.EVENT_TEST)),
            [old_kept, old_test, mid_kept, mid_test, bits_kept, new_kept, new_test],
        ),
        (FeedFilter(types=("run.*",)), of_the_run),
        (FeedFilter(run_id=run.id), of_the_run),
        (FeedFilter(run_id=domain.new_id("run")), []),
        (FeedFilter(vendor="nutrient"), of_the_run),
        (FeedFilter(vendor="uptiq"), []),
    ]
    for only, expected in cases:
        page = await _read(feed, only=only)
        assert [(e.event_id, e.body) for e in page.events] == [(x.id, x.body.encode()) for x in expected], (
            only
        )
    # A page's bytes: the first match always, then it stops once the bound is reached, whichever form
    # gave the size (n, or b in digits).
    starts = [(old_kept, "")] + [
        (x, raw[at][0].decode()) for x, at in ((mid_kept, 2), (bits_kept, 5), (new_kept, 7))
    ]
    for first, after in starts:
        only = FeedFilter(run_id=run.id)  # then the next of its run, which the bound leaves out
        page = await _read(feed, after, only=only, max_bytes=1)
        assert [e.event_id for e in page.events] == [first.id] and not page.done
    # The tool's view of each stored entry names the same events, types, runs and sizes.
    entries = [feedform.entry(fields) for _, fields in raw]
    assert [(x.event_id, x.type) for x in entries] == [(e.id, e.type) for e in everything]
    assert [x.run_id for x in entries] == [run.id, run.id, ""] * 2 + [run.id] * 4 + [""]
    assert [x.vendor for x in entries] == ["nutrient", "nutrient", ""] * 2 + ["nutrient"] * 4 + [""]
    assert [(x.body is None, x.size) for x in (entries[0], entries[3], entries[6], entries[8])] == [
        (True, len(bodies.packed(old_kept.body))),
        (True, len(bodies.packed(mid_kept.body, run.id))),
        (True, len(bodies.packed(bits_kept.body, run.id))),
        (True, len(bodies.packed(new_kept.body, run.id))),
    ]


# Event bodies as stored (service/store/bodies.py) -------------------------------------------------


async def test_every_reader_gets_the_exact_bytes_of_a_packed_body(store: Store, feed: Feed) -> None:
    await _sub(store, "sub_all", types=["run.*"])
    run = await _run(store, "run_a")
    change = submitted(run, domain.now_ms(), vendor_run_id="v-1", vendor_status="queued", state={}, due_ms=0)
    await _apply(store, change)
    body = change.events[0].body.encode()
    stored = await store.redis.get(keys.event(change.events[0].id))
    # The key holds the packed form, under a quarter of the body's bytes.
    assert stored.startswith(bodies.RUN_MARKS) and len(stored) < len(body) / 4
    # The delivery, the feed and the run's history each get the body itself.
    claimed, _ = await store.deliveries.claim_deliveries(domain.now_ms() + 1, 10, 30_000)
    assert [c.body for c in claimed] == [body]
    assert [e.body for e in (await _read(feed)).events] == [body]
    assert await store.runs.run_events(change.run) == [(change.events[0].id, json.loads(body))]


async def test_a_body_written_before_packing_reads_as_it_was(store: Store, feed: Feed) -> None:
    await _sub(store, "sub_all", types=["run.*"])
    run = await _run(store, "run_a")
    change = submitted(run, domain.now_ms(), vendor_run_id="v-1", vendor_status="queued", state={}, due_ms=0)
    await _apply(store, change)
    event_id, body = change.events[0].id, change.events[0].body.encode()
    await store.redis.set(keys.event(event_id), body)  # as hookbridge wrote it before bodies were packed
    claimed, _ = await store.deliveries.claim_deliveries(domain.now_ms() + 1, 10, 30_000)
    assert [c.body for c in claimed] == [body]
    assert [e.body for e in (await _read(feed)).events] == [body]
    assert await store.runs.run_events(change.run) == [(event_id, json.loads(body))]


async def test_a_damaged_body_is_skipped_by_every_reader_never_sent_otherwise(
    store: Store, feed: Feed
) -> None:
    await _sub(store, "sub_all", types=["run.*"])
    run = await _run(store, "run_a")
    change = submitted(run, domain.now_ms(), vendor_run_id="v-1", vendor_status="queued", state={}, due_ms=0)
    await _apply(store, change)
    key = keys.event(change.events[0].id)
    stored = await store.redis.get(key)
    flipped = stored[:-6] + (b"A" if stored[-6:-5] != b"A" else b"B") + stored[-5:]
    await store.redis.set(key, flipped)
    claimed, _ = await store.deliveries.claim_deliveries(domain.now_ms() + 1, 10, 30_000)
    assert [c.body for c in claimed] == [None]  # the deliverer skips it: "no longer kept"
    assert (await _read(feed)).events == []
    assert await store.runs.run_events(change.run) == []


async def test_old_entries_are_trimmed_and_an_iterator_past_retention_is_expired(
    redis_url: str,
) -> None:
    settings = load_settings(base_env(redis_url, HOOKBRIDGE_RETENTION_S="1"))
    store = Store(connect(settings), settings)
    feed = Feed(store.redis, connect(settings), settings.retention_s)
    try:
        run = await _run(store, "run_a")
        run = await _emit(store, run, _event(run, "run.submitted", 1))
        first = await _read(feed)
        assert [e.event_id for e in first.events] == [_eid("run_a", 1)]
        before = f"{int(first.events[0].id.split('-')[0]) - 1}-0"

        # An append trims every entry older than the retention window.
        async def trimmed() -> bool:
            nonlocal run
            run = await _emit(store, run, _event(run, "run.progress", run.version + 10))
            oldest = await store.redis.xrange(keys.client_feed("alice"), count=1)
            return bool(oldest[0][0].decode() != first.events[0].id)

        await eventually(trimmed, timeout=10, interval=0.2, what="the first entry trimmed")
        with pytest.raises(IteratorTrimmed):
            await _read(feed, before)
        with pytest.raises(IteratorTrimmed):
            await _read(feed, first.iterator)
        # The iterator of the latest read is inside the window; no iterator reads from the oldest kept.
        latest = await _read(feed)
        assert latest.events and _eid("run_a", 1) not in [e.event_id for e in latest.events]
        assert (await _read(feed, latest.iterator)).events == []
    finally:
        await feed.close()
        await store.close()


async def test_a_quiet_feed_keeps_its_readers_iterator_inside_the_window(store: Store, feed: Feed) -> None:
    empty = await _read(feed)
    assert empty.events == [] and empty.done
    ms = int(empty.iterator.split("-")[0])
    assert abs(ms - domain.now_ms()) < 5_000  # now, not the start of time
    run = await _run(store, "run_a")
    await _emit(store, run, _event(run, "run.submitted", 1))
    assert [e.event_id for e in (await _read(feed, empty.iterator)).events] == [_eid("run_a", 1)]


async def test_an_iterator_in_the_future_is_invalid(feed: Feed) -> None:
    with pytest.raises(IteratorInvalid):
        await _read(feed, f"{domain.now_ms() + 3_600_000}-0")


async def test_wait_returns_when_an_entry_arrives_or_after_its_timeout(store: Store, feed: Feed) -> None:
    empty = await _read(feed)
    assert not await feed.wait("alice", empty.iterator, 0.05)
    run = await _run(store, "run_a")
    await _emit(store, run, _event(run, "run.submitted", 1))
    assert await feed.wait("alice", empty.iterator, 5)


async def test_stream_slots_are_capped_renewed_dropped_and_expire(feed: Feed) -> None:
    now = domain.now_ms()
    assert await feed.take_slot("alice", "s1", now_ms=now, lease_s=10, cap=2)
    assert await feed.take_slot("alice", "s2", now_ms=now, lease_s=10, cap=2)
    assert not await feed.take_slot("alice", "s3", now_ms=now, lease_s=10, cap=2)
    assert await feed.take_slot("bob", "s4", now_ms=now, lease_s=10, cap=2)  # per client
    await feed.drop_slot("alice", "s1")
    assert await feed.take_slot("alice", "s3", now_ms=now, lease_s=10, cap=2)
    assert await feed.renew_slot("alice", "s2", now_ms=now + 5_000, lease_s=10)
    # A slot whose lease ran out goes to the next stream; renewing it then fails.
    later = now + 12_000
    assert await feed.take_slot("alice", "s5", now_ms=later, lease_s=10, cap=2)
    assert not await feed.renew_slot("alice", "s3", now_ms=later, lease_s=10)
