"""The run's outbox (issue 26): a transition puts the events it emits in the run's outbox, in its own
step and slot, and the relay fans them out right after (the deliveries in each subscription's shard,
fanout_deliveries.lua; then the client's feed, relay_feed.lua; then the run's side, relay_done.lua); the
sweeper relays what a process that died between the two left there. These tests leave events stranded the
way a crash does (the transition's script alone, no relay) and check that nothing is lost, nothing is
sent twice, and a run's events still reach each subscription in the order it emitted them. Real Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from redis.asyncio import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from service.core.records import Event, Run, Transition, replace
from service.store import Applied, Store, bodies, fanout, feedform, keys
from service.store.runs import RELAY_GRACE_MS
from service.store.scripts import BATCHED
from tests.store.test_lua import T0, _deliveries_of, _due_deliveries, _next, _run, _s, _sub
from tests.store.test_lua import store as store  # the fixture


async def _strand(store: Store, run: Run, status: str, *events: Event, now: int = T0 + 1) -> Run:
    """The transition's own step, and no relay after it: what a process that died in between leaves. The
    step as a cluster takes it, its events in the run's outbox: on one Redis server, events that no
    subscription may want go to the client's feed in that step (test_feed_in_transition.py), and leave
    nothing to strand."""
    current = await store.runs.get_run(run.id)
    assert current is not None
    new = replace(_next(current, status, now), event_ids=[*current.event_ids, *(e.id for e in events)])
    store.runs._feed_in_transition = False
    try:
        ks, args, _ = store.runs._transition_call(Transition(new, current.version, events=list(events)))
    finally:
        store.runs._feed_in_transition = not isinstance(store.redis, RedisCluster)
    reply = await store.runs.scripts.transition(keys=ks, args=args)
    assert _s(reply[0]) == "ok"
    return new


@contextmanager
def _lost(store: Store, script: str) -> Iterator[None]:
    """The store's ``script`` fails as a lost connection would, then is given back: the one failure a
    simulator cannot produce here (a process or a link lost between two steps of the relay). Its batch
    (``relay_feeds`` for ``relay_feed``: scripts.BATCHED) fails with it."""
    names = [script, *(batch for batch, one in BATCHED.items() if one == script)]
    real = {name: getattr(store.runs.scripts, name) for name in names}

    async def lost(*args: object, **kwargs: object) -> object:
        raise RedisConnectionError("connection lost")

    for name in names:
        setattr(store.runs.scripts, name, lost)
    try:
        yield
    finally:
        for name, script_object in real.items():
            setattr(store.runs.scripts, name, script_object)


# This file's own ids (not test_lua's helpers): every event id in the shard of its run, as production
# mints it (domain.new_id_beside), since a transition refuses any other (its body is written with the run).
def _in(name: str, shard: int) -> str:
    """``name`` when it falls in ``shard``, else the first ``name_<k>`` that does: readable, deterministic."""
    return keys.in_shard(lambda k: f"{name}_{k}" if k else name, shard)


def _e(name: str, run_id: str = "run_a") -> str:
    """The event id ``name`` placed in ``run_id``'s shard, as production mints it beside its run."""
    return _in(name, keys.shard_of(run_id))


def _event(etype: str, n: int = 0, event_id: str | None = None, *, run_id: str = "run_a") -> Event:
    """An event of ``run_id``: ``evt_<type>_<n>`` (or ``event_id``), its id beside the run (:func:`_e`)."""
    body = json.dumps({"type": etype, "n": n})
    return Event(id=_e(event_id or f"evt_{etype}_{n}", run_id), type=etype, created=T0, body=body)


async def _outboxed(store: Store) -> list[str]:
    """The runs in the outbox indexes of every shard."""
    out: list[str] = []
    for shard in range(keys.SHARDS):
        out += [_s(r) for r in await store.redis.zrange(keys.outbox(shard), 0, -1)]
    return sorted(out)


async def _feed_ids(store: Store, client: str = "alice") -> list[str]:
    entries = await store.redis.xrange(keys.client_feed(client))
    return [feedform.entry(fields).event_id for _, fields in entries]


async def test_a_stranded_event_is_readable_at_once_and_relayed_by_the_sweeper_once(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    done = _event("run.succeeded", event_id="evt_done")
    await _strand(store, run, "succeeded", done)
    # The transition stored the body: what the record names is readable (the result inline in it, say).
    assert await store.redis.get(keys.event(_e("evt_done"))) is not None
    assert await _deliveries_of(store, "sub_a") == [] and await _feed_ids(store) == []
    assert await store.redis.zscore(keys.outbox(keys.shard_of(run.id)), run.id) == T0 + 1
    # Within the grace the relay right after the transition may still be under way: left alone.
    assert await store.runs.stranded_count(T0 + 1 + RELAY_GRACE_MS - 1) == 0
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS - 1) == 0
    assert await store.runs.stranded_count(T0 + 1 + RELAY_GRACE_MS) == 1  # the gauge's count
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 1
    assert [d.event_id for d in await _deliveries_of(store, "sub_a")] == [_e("evt_done")]
    assert await _feed_ids(store) == [_e("evt_done")]
    assert await store.redis.exists(keys.run_outbox(run.id), keys.outbox(keys.shard_of(run.id))) == 0
    assert await store.runs.stranded_count(T0 + 10 * RELAY_GRACE_MS) == 0
    # Again: nothing left, nothing sent twice.
    assert await store.runs.relay_stranded(T0 + 10 * RELAY_GRACE_MS) == 0
    assert await store.runs.relay(run.id, run.client, []) == 0
    assert len(await _deliveries_of(store, "sub_a")) == 1 and await _feed_ids(store) == [_e("evt_done")]


async def test_stranded_events_are_relayed_in_the_order_the_run_emitted_them(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    first = await _strand(store, run, "processing", _event("run.submitted", event_id="evt_1"))
    await _strand(store, first, "succeeded", _event("run.succeeded", event_id="evt_2"), now=T0 + 2)
    assert (
        await store.redis.zscore(keys.outbox(keys.shard_of(run.id)), run.id) == T0 + 1
    )  # the oldest entry's time
    assert await store.runs.relay_stranded(T0 + 2 + RELAY_GRACE_MS) == 1
    assert await _feed_ids(store) == [_e("evt_1"), _e("evt_2")]
    deliveries = {d.event_id: d.id for d in await _deliveries_of(store, "sub_a")}
    # Per-run order per subscription: the first event's delivery is the chain's head, the only one due.
    chain = [_s(i) for i in await store.redis.lrange(keys.chain("sub_a", run.id), 0, -1)]  # type: ignore[misc]
    assert chain == [deliveries[_e("evt_1")], deliveries[_e("evt_2")]]
    assert list(await _due_deliveries(store)) == [deliveries[_e("evt_1")]]


async def test_a_later_transition_relays_the_earlier_stranded_events_first(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    first = await _strand(store, run, "processing", _event("run.submitted", event_id="evt_1"))
    new = replace(_next(first, "succeeded", T0 + 2), event_ids=[*first.event_ids, _e("evt_2")])
    outcome = await store.runs.transition(
        Transition(new, first.version, events=[_event("run.succeeded", event_id="evt_2")])
    )
    assert outcome == Applied(2, ended=True)  # both events, one delivery each, in order
    assert await _feed_ids(store) == [_e("evt_1"), _e("evt_2")]
    assert await store.redis.exists(keys.run_outbox(run.id)) == 0


@pytest.mark.parametrize("step", ["fanout_deliveries", "relay_feed"])
async def test_a_failed_relay_leaves_the_change_applied_and_the_events_to_the_sweeper(
    store: Store, step: str
) -> None:
    # Lost at its first step (no delivery yet) or at the feed's (the deliveries made, no feed entry):
    # either way the change stands, and the sweeper's relay does the rest, nothing twice.
    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    new = replace(_next(run, "succeeded"), event_ids=[_e("evt_done")])
    with _lost(store, step):
        outcome = await store.runs.transition(
            Transition(new, run.version, events=[_event("run.succeeded", event_id="evt_done")])
        )
    assert outcome == Applied(0, ended=True)
    assert (await store.runs.get_run(run.id)).status == "succeeded"  # type: ignore[union-attr]
    assert await _feed_ids(store) == []  # never an event in the feed without its deliveries
    assert await store.redis.llen(keys.run_outbox(run.id)) > 0  # type: ignore[misc]
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 1
    assert [d.event_id for d in await _deliveries_of(store, "sub_a")] == [_e("evt_done")]
    assert await _feed_ids(store) == [_e("evt_done")]
    assert await store.redis.exists(keys.run_outbox(run.id), keys.outbox(keys.shard_of(run.id))) == 0


async def test_the_sweeper_drops_the_outbox_of_a_run_gone_and_takes_a_bounded_number(store: Store) -> None:
    # One run in the first shard, one in the middle, one in the last: the sweeper reads every shard's
    # outbox index, and the bound is over them all. Shards are taken in order (relay_stranded), so the
    # first pass is the first two runs'.
    gone, first, last = _in("run_0", 0), _in("run_1", 8), _in("run_2", keys.SHARDS - 1)
    for n, run_id in enumerate((gone, first, last)):
        await _strand(
            store, await _run(store, run_id), "processing", _event("run.submitted", n, run_id=run_id)
        )
    assert await _outboxed(store) == sorted([gone, first, last])
    await store.redis.delete(keys.run(gone))  # past retention
    assert (
        await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS, limit=2) == 1
    )  # gone dropped, first relayed
    assert await store.redis.exists(keys.run_outbox(gone), keys.run_outbox(first)) == 0
    assert await _feed_ids(store) == [_e("evt_run.submitted_1", first)]
    assert await _outboxed(store) == [last]
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS, limit=2) == 1
    assert await _outboxed(store) == []
    assert await _feed_ids(store) == [_e("evt_run.submitted_1", first), _e("evt_run.submitted_2", last)]


async def test_a_progress_event_nobody_asked_for_is_kept_in_the_feed_only(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_a")  # the default types: no run.progress
    progress = _event("run.progress", event_id="evt_p")
    await _strand(store, run, "processing", progress)
    # Not stored by the transition (fanout.stored_by_relay): the outbox holds its body until the relay.
    assert await store.redis.get(keys.event(progress.id)) is None
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 1
    assert await store.redis.get(keys.event(progress.id)) is None  # nor by the relay: nobody wants it
    [(_, fields)] = await store.redis.xrange(keys.client_feed("alice"))
    entry = feedform.entry(fields)
    assert entry.event_id == progress.id and entry.body is not None
    assert bodies.unpacked(entry.body, run.id) == progress.body.encode()
    assert await _deliveries_of(store, "sub_a") == []


async def test_a_stranded_progress_a_subscription_wants_is_stored_before_its_delivery_exists(
    store: Store,
) -> None:
    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    progress = _event("run.progress", event_id="evt_p")
    await _strand(store, run, "processing", progress)
    assert await store.redis.get(keys.event(progress.id)) is None  # the outbox alone holds it
    seen: list[bytes | None] = []
    fan_out = store.runs.scripts.fanout_deliveries

    async def watched(*args: object, **kwargs: object) -> object:
        seen.append(await store.redis.get(keys.event(progress.id)))  # just before any delivery of it
        return await fan_out(*args, **kwargs)

    store.runs.scripts.fanout_deliveries = watched  # type: ignore[method-assign]
    try:
        assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 1
    finally:
        store.runs.scripts.fanout_deliveries = fan_out  # type: ignore[method-assign]
    assert seen and all(
        raw is not None and bodies.unpacked(raw, run.id) == progress.body.encode() for raw in seen
    )
    [delivery] = await _deliveries_of(store, "sub_a")
    assert delivery.event_id == progress.id
    stored = await store.redis.get(keys.event(progress.id))
    assert (
        stored is not None and bodies.unpacked(stored, run.id) == progress.body.encode()
    )  # kept for its delivery
    assert await store.redis.pttl(keys.event(progress.id)) > 0  # and expires with the retention
    [(_, fields)] = await store.redis.xrange(keys.client_feed("alice"))
    # The feed reads it from the event's key, as any delivered event's: the entry holds its size.
    assert feedform.entry(fields).body is None and feedform.entry(fields).size > 0


async def test_a_progress_relayed_again_after_its_body_was_stored_is_delivered_once(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    progress = _event("run.progress", event_id="evt_p")
    await _strand(store, run, "processing", progress)
    with _lost(store, "relay_feed"), pytest.raises(RedisConnectionError):  # the feed step lost, after
        await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS)  # the body stored and the delivery made
    assert [d.event_id for d in await _deliveries_of(store, "sub_a")] == [progress.id]
    assert await store.redis.get(keys.event(progress.id)) is not None
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 1
    assert [d.event_id for d in await _deliveries_of(store, "sub_a")] == [progress.id]
    assert await _feed_ids(store) == [progress.id]
    assert await _outboxed(store) == []


async def test_one_run_whose_relay_fails_does_not_hold_up_the_others(store: Store) -> None:
    # A tenant whose subscriptions keep changing under every relay (StaleFanout), or an entry the script
    # refuses: that run waits for the next pass; the other runs' events are relayed in this one.
    for n in range(3):
        await _strand(
            store,
            await _run(store, f"run_{n}", client=f"client_{n}"),
            "processing",
            _event("run.submitted", n, run_id=f"run_{n}"),
        )
    await store.redis.rpush(keys.run_outbox("run_0"), "not the relay's ops")  # type: ignore[misc]
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 2
    assert await _outboxed(store) == ["run_0"]
    assert await _feed_ids(store, "client_1") == [_e("evt_run.submitted_1", "run_1")]
    assert await _feed_ids(store, "client_2") == [_e("evt_run.submitted_2", "run_2")]


async def test_an_unexpected_error_in_one_relay_is_that_runs_alone(store: Store) -> None:
    for n in range(2):
        await _strand(
            store,
            await _run(store, f"run_{n}", client=f"client_{n}"),
            "processing",
            _event("run.submitted", n, run_id=f"run_{n}"),
        )
    relay = store.runs.relay

    async def odd(run_id: str, *args: object, **kwargs: object) -> int:
        if run_id == "run_0":  # a bug's exception, which no real part raises on demand
            raise ValueError("unexpected")
        return await relay(run_id, *args, **kwargs)  # type: ignore[arg-type]

    store.runs.relay = odd  # type: ignore[method-assign,assignment]
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 1
    assert await _outboxed(store) == ["run_0"]
    assert await _feed_ids(store, "client_1") == [_e("evt_run.submitted_1", "run_1")]


async def test_a_relay_whose_last_step_failed_is_finished_without_a_second_feed_entry(store: Store) -> None:
    # The relay's three steps live in different slots once the run's keys have their shard's tag: the
    # fan-out may succeed and the run's side (relay_done.lua) fail. The events are out, once; the outbox
    # still holds them; the sweeper's relay finds the run's mark and only finishes the run's side.
    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    new = replace(_next(run, "processing"), event_ids=[_e("evt_p")])
    with _lost(store, "relay_done"):
        outcome = await store.runs.transition(
            Transition(new, run.version, events=[_event("run.progress", event_id="evt_p")])
        )
    assert outcome == Applied(1)
    assert await _feed_ids(store) == [_e("evt_p")]
    assert await store.redis.llen(keys.run_outbox(run.id)) > 0  # type: ignore[misc]
    assert await store.redis.exists(keys.run_deliveries(run.id), keys.run_events(run.id)) == 0
    assert await store.runs.relay_stranded(T0 + 1 + RELAY_GRACE_MS) == 1
    assert await _feed_ids(store) == [_e("evt_p")]  # not twice
    assert [d.event_id for d in await _deliveries_of(store, "sub_a")] == [_e("evt_p")]
    assert [_s(i) for i in await store.redis.lrange(keys.run_events(run.id), 0, -1)] == [_e("evt_p")]  # type: ignore[misc]
    assert await store.redis.zcard(keys.run_deliveries(run.id)) == 1
    assert await store.redis.exists(keys.run_outbox(run.id), keys.outbox(keys.shard_of(run.id))) == 0


async def test_two_relays_interleaved_fan_out_each_event_once_and_empty_the_outbox(store: Store) -> None:
    # Relay A reads the outbox ([e1]); a second transition appends e2; relay B reads [e1, e2] and does all
    # of it first; A finishes late. Each event is in the feed once, both reach the subscription in order,
    # and A's last step, finding its entry gone from the outbox's head, trims nothing of B's.
    from service.store.runs import _outbox_entries

    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    runs = store.runs
    run = await _strand(store, run, "processing", _event("run.progress", event_id="evt_1"))
    items_a = await store.redis.lrange(keys.run_outbox(run.id), 0, -1)  # type: ignore[misc]
    await _strand(store, run, "processing", _event("run.progress", event_id="evt_2"), now=T0 + 2)
    assert await runs.relay(run.id, run.client, []) == 2  # relay B, whole
    read_a = _outbox_entries(items_a)
    fanned_a = await runs._fan_out(run.id, run.client, [], read_a)
    assert fanned_a.created == 0  # nothing created twice
    assert await runs.scripts.relay_done(*runs._done_call(run.id, read_a, fanned_a)) == 0
    assert await _feed_ids(store) == [_e("evt_1"), _e("evt_2")]
    assert [d.event_id for d in await _deliveries_of(store, "sub_a")] == [_e("evt_1"), _e("evt_2")]
    assert [_s(i) for i in await store.redis.lrange(keys.run_events(run.id), 0, -1)] == [
        _e("evt_1"),
        _e("evt_2"),
    ]  # type: ignore[misc]
    assert await store.redis.exists(keys.run_outbox(run.id), keys.outbox(keys.shard_of(run.id))) == 0


async def test_a_late_last_step_trims_only_its_own_entries(store: Store) -> None:
    # Relay A reads [e1] and fans it out; a second transition appends e2; A's last step trims e1 alone and
    # leaves e2, re-indexed by its own time, for its relay.
    from service.store.runs import _outbox_entries

    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    runs = store.runs
    run = await _strand(store, run, "processing", _event("run.progress", event_id="evt_1"))
    items_a = await store.redis.lrange(keys.run_outbox(run.id), 0, -1)  # type: ignore[misc]
    read_a = _outbox_entries(items_a)
    fanned_a = await runs._fan_out(run.id, run.client, [], read_a)
    assert fanned_a.created == 1
    await _strand(store, run, "processing", _event("run.progress", event_id="evt_2"), now=T0 + 7)
    assert await runs.scripts.relay_done(*runs._done_call(run.id, read_a, fanned_a)) == 1
    assert await store.redis.zscore(keys.outbox(keys.shard_of(run.id)), run.id) == T0 + 7
    assert await _feed_ids(store) == [_e("evt_1")]
    assert await runs.relay_stranded(T0 + 7 + RELAY_GRACE_MS) == 1
    assert await _feed_ids(store) == [_e("evt_1"), _e("evt_2")]
    assert await store.redis.exists(keys.run_outbox(run.id), keys.outbox(keys.shard_of(run.id))) == 0


async def test_a_relay_that_read_long_ago_fans_out_nothing_done_since(store: Store) -> None:
    # Relay Y reads [e1] and stalls; e1 is relayed whole by another, then e2 is emitted and relayed whole.
    # Y's fan-out comes last: e1's entry is at or below the run's mark, so nothing goes to the feed again,
    # and a subscription created meanwhile gets no delivery of an event fanned out before it existed.
    from service.store.runs import _outbox_entries

    run = await _run(store)
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    runs = store.runs
    run = await _strand(store, run, "processing", _event("run.progress", event_id="evt_1"))
    items_y = await store.redis.lrange(keys.run_outbox(run.id), 0, -1)  # type: ignore[misc]
    assert await runs.relay(run.id, run.client, []) == 1
    await _strand(store, run, "processing", _event("run.progress", event_id="evt_2"), now=T0 + 2)
    assert await runs.relay(run.id, run.client, []) == 1
    await _sub(store, "sub_b", event_types=json.dumps(["run.*"]))
    read_y = _outbox_entries(items_y)
    fanned_y = await runs._fan_out(run.id, run.client, [], read_y)
    # Nothing created; e1's delivery only reported (so Y's last step would not drop e1's body as if nobody
    # wanted it), by the id the first relay minted for it.
    assert fanned_y.created == 0
    assert fanned_y.deliveries == [[fanout.delivery_id_in_shard(_e("evt_1"), "sub_a")]]
    assert await runs.scripts.relay_done(*runs._done_call(run.id, read_y, fanned_y)) == 0
    assert await _deliveries_of(store, "sub_b") == []
    assert await _feed_ids(store) == [_e("evt_1"), _e("evt_2")]
    assert [_s(i) for i in await store.redis.lrange(keys.run_events(run.id), 0, -1)] == [
        _e("evt_1"),
        _e("evt_2"),
    ]  # type: ignore[misc]
