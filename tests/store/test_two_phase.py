"""The scripts that learn their keys from data are two-phase (issue 25): the caller reads what names the
keys (the due ids, a delivery's subscription, a client's subscriptions), then the script, given every key,
checks what it relies on still holds. These tests put a change between the two phases (a subscription
created, a run claimed by another worker) and check the race changes nothing: what the one-phase script
did is what happens. The relay's fan-out is three steps in as many slots (fanout_deliveries.lua per
subscription shard, relay_feed.lua in the client's, relay_done.lua in the run's): the feed step reads the
client's directory again and answers 'stale' when a subscription appeared since the read."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from redis.asyncio import RedisCluster
from redis.crc import key_slot

from service.core.domain import AttemptOutcome, DeliveryStatus
from service.core.records import Event, Transition, replace
from service.store import Applied, Store, fanout, feedform, keys
from service.store.base import batched, each_call
from service.store.runs import _outbox_entries
from tests.store.test_lua import LEASE, T0, _attempt, _deliveries_of, _due_deliveries, _next, _run, _s, _sub
from tests.store.test_lua import store as store  # the fixture


# This file's own ids (not test_lua's helpers): every event id in the shard of its run, as production
# mints it (domain.new_id_beside), since a transition refuses any other (its body is written with the run).
def _in(name: str, shard: int) -> str:
    """``name`` when it falls in ``shard``, else the first ``name_<k>`` that does: readable, deterministic."""
    return keys.in_shard(lambda k: f"{name}_{k}" if k else name, shard)


def _e(name: str, run_id: str = "run_a") -> str:
    """The event id ``name`` placed in ``run_id``'s shard, as production mints it beside its run."""
    return _in(name, keys.shard_of(run_id))


def _event(etype: str, event_id: str, run_id: str = "run_a") -> Event:
    """The event ``event_id`` of ``run_id``, its id placed beside the run (:func:`_e`)."""
    body = json.dumps({"type": etype, "n": 0})
    return Event(id=_e(event_id, run_id), type=etype, created=T0, body=body)


@contextmanager
def _sent(store: Store) -> Iterator[list[str]]:
    """The names of the commands the store sends meanwhile, alone or in a pipeline (where the claim reads
    the due sets: a count of the client's own ``zrangebyscore`` would see none of those)."""
    redis = store.runs.redis
    sent: list[str] = []

    heads = store.runs.scripts.due_heads.sha

    def recorded(send: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            name = str(args[0]).upper()
            sent.append("DUE_HEADS" if name == "EVALSHA_RO" and args[1] == heads else name)
            return send(*args, **kwargs)

        return record

    pipeline = redis.pipeline

    def recording_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        pipe.execute_command = recorded(pipe.execute_command)  # type: ignore[method-assign]
        return pipe

    redis.execute_command = recorded(redis.execute_command)  # type: ignore[method-assign]
    redis.pipeline = recording_pipeline  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        del redis.execute_command, redis.pipeline  # the class's own again


SHARD = 5  # the claims' tests put their runs in one shard: the order they are claimed in is the due order
OTHER = 11  # and a second, for those of a claim over shards
IDS = [_in(f"run_{n}", SHARD) for n in range(5)]
DUE = keys.due_runs("nutrient", SHARD)


async def test_a_subscription_created_after_the_read_gets_the_event(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_early", event_types=json.dumps(["run.*"]))
    change = Transition(
        replace(_next(run, "succeeded"), event_ids=[_e("evt_done")]),
        run.version,
        events=[_event("run.succeeded", "evt_done")],
    )
    # The transition puts the event in the run's outbox; the relay's phase one reads the client's
    # subscriptions (and the run's mark), then a subscription is created before its steps run.
    ks, args, _ = store.runs._transition_call(change)
    reply = await store.runs.scripts.transition(keys=ks, args=args)
    assert _s(reply[0]) == "ok"
    [directory] = await store.runs._directories([(run.client, run.id)])
    assert (directory.subs, directory.mark) == (["sub_early"], 0)
    await _sub(store, "sub_late", event_types=json.dumps(["run.*"]))
    items = await store.runs.redis.lrange(keys.run_outbox(run.id), 0, -1)  # type: ignore[misc]
    assert len(items) == 2  # ops, body
    plan = store.runs._plan(run.id, run.client, [], _outbox_entries(items), directory)
    replies = await each_call(store.redis, store.runs.scripts.fanout_deliveries, plan.deliveries)
    fanned = fanout.merged(plan.events, replies)
    assert fanned.created == 1  # sub_early's: the deliveries step knows only what was read
    # The feed step reads the directory again: sub_late would get the event and was not fanned out to.
    reply = await store.runs.scripts.relay_feed(*plan.feed(fanned))
    assert [_s(r) for r in reply] == ["stale"]
    assert await store.redis.xlen(keys.client_feed(run.client)) == 0  # nothing in the feed
    assert await store.runs.redis.exists(keys.relayed(run.client, run.id)) == 0  # nor the mark
    assert await _deliveries_of(store, "sub_late") == []
    # Through the store: read again, then relayed, with both deliveries (as the one-phase script did);
    # sub_early's, made above, is found and not made twice.
    assert await store.runs.relay(run.id, run.client, [], items) == 1
    assert [d.event_id for d in await _deliveries_of(store, "sub_late")] == [_e("evt_done")]
    assert [d.event_id for d in await _deliveries_of(store, "sub_early")] == [_e("evt_done")]
    assert [
        feedform.entry(f).event_id for _, f in await store.redis.xrange(keys.client_feed(run.client))
    ] == [_e("evt_done")]
    assert await store.runs.redis.exists(keys.run_outbox(run.id)) == 0
    assert await store.runs.redis.zscore(keys.outbox(keys.shard_of(run.id)), run.id) is None


async def test_a_batch_relays_again_only_the_change_whose_subscriptions_changed(store: Store) -> None:
    a, b = await _run(store, "run_a"), await _run(store, "run_b", client="bob")
    await _sub(store, "sub_a", event_types=json.dumps(["run.*"]))
    await _sub(store, "sub_b", client="bob", event_types=json.dumps(["run.*"]))
    original = store.runs._directories
    fed: list[str] = []  # the runs whose feed step ran, by their relay mark's key

    async def late_sub(pairs: list[tuple[str, str]]) -> list[Any]:
        read = await original(pairs)
        await _sub(store, "sub_a2", event_types=json.dumps(["run.*"]))  # after the first read only
        store.runs._directories = original  # type: ignore[method-assign]
        return read

    real_feed, real_feeds = store.runs.scripts.relay_feed, store.runs.scripts.relay_feeds

    async def feed(*args: Any, **kwargs: Any) -> Any:  # called as the script is: (keys, args[, client])
        fed.append((args[0] if args else kwargs["keys"])[1])
        return await real_feed(*args, **kwargs)

    async def feeds(keys: Any = None, args: Any = None, client: Any = None) -> Any:  # a batch of them
        k = at = 0
        while at < len(args):  # per call: its key count, its argument count, its arguments
            fed.append(keys[k + 1])
            k, at = k + int(args[at]), at + 2 + int(args[at + 1])
        return await real_feeds(keys=keys, args=args, client=client)

    store.runs._directories = late_sub  # type: ignore[method-assign]
    store.runs.scripts.relay_feed = feed  # type: ignore[method-assign]
    store.runs.scripts.relay_feeds = feeds  # type: ignore[method-assign]
    try:
        outcomes = await store.runs.transitions(
            [
                Transition(
                    replace(_next(a, "succeeded"), event_ids=[_e("evt_a")]),
                    a.version,
                    events=[_event("run.succeeded", "evt_a")],
                ),
                Transition(
                    replace(_next(b, "succeeded"), event_ids=[_e("evt_b", "run_b")]),
                    b.version,
                    events=[_event("run.succeeded", "evt_b", "run_b")],
                ),
            ]
        )
    finally:
        store.runs._directories = original  # type: ignore[method-assign]
        store.runs.scripts.relay_feed = real_feed  # type: ignore[method-assign]
        store.runs.scripts.relay_feeds = real_feeds  # type: ignore[method-assign]
    # Every delivery the change made counts, those of its first fan-out as well as its second's.
    assert outcomes == [Applied(2, True), Applied(1, True)]
    assert len(await _deliveries_of(store, "sub_a2")) == 1
    assert len(await _deliveries_of(store, "sub_a")) == 1 and len(await _deliveries_of(store, "sub_b")) == 1
    # run_a's feed step ran twice (stale, then again alone); run_b's once, in the batch.
    assert sorted(fed) == sorted([keys.relayed("alice", "run_a")] * 2 + [keys.relayed("bob", "run_b")])


async def test_a_run_claimed_between_the_read_and_the_script_is_not_claimed_twice(store: Store) -> None:
    run = await _run(store)
    first, _ = await store.runs.claim_runs("nutrient", T0, 10, LEASE, 0, 1000)
    assert [c.run.id for c in first] == [run.id]
    # A second worker read the id as due before the first claim moved it: the script checks again.
    [reply] = await batched(
        store.redis,
        store.runs.scripts.claims,
        [
            (
                [keys.due_runs("nutrient", keys.shard_of(run.id)), keys.run(run.id)],
                [T0, LEASE, T0, 0, 1, 10, run.id],
            )
        ],
    )
    assert reply[0] == [] and reply[2] == []  # and nothing is due to give back


def _reads(sent: list[str]) -> list[str]:
    """The reads of due sets among the commands ``sent``: a head (ZRANGE), every shard's head (DUE_HEADS)
    or the due ids (ZRANGEBYSCORE)."""
    return [c for c in sent if c in ("ZRANGE", "DUE_HEADS", "ZRANGEBYSCORE")]


def _look(store: Store) -> list[str]:
    """The reads of a look at every shard's head (``Part.heads``): one ``due_heads.lua`` on one Redis
    server, a ZRANGE a shard on a cluster."""
    return ["ZRANGE"] * keys.SHARDS if isinstance(store.redis, RedisCluster) else ["DUE_HEADS"]


async def test_a_busy_claim_takes_the_ids_the_last_one_left_due_without_reading_them(store: Store) -> None:
    for run_id in IDS:
        await _run(store, run_id)
    idle_ms = store.settings.worker_idle_s * 1000
    assert 3 + idle_ms < LEASE  # the clock below stays within the leases taken at T0
    with _sent(store) as sent:
        first, _ = await store.runs.claim_runs("nutrient", T0, 2, LEASE, 0, 1000)
        assert [c.run.id for c in first] == IDS[:2]
        # The first claim looks at every shard (their heads), and reads the ids of the one due.
        assert sent.count("ZRANGEBYSCORE") == 1
        # Its reply there named the ids it saw still due (the shard's share of the next batch: all of it).
        assert store.runs._due["nutrient"].ahead == {SHARD: IDS[2:4]}
        sent.clear()
        # Another worker claims IDS[2] meanwhile: the ids left due are candidates, checked by the script.
        await store.redis.zadd(DUE, {IDS[2]: T0 + LEASE}, xx=True)
        second, _ = await store.runs.claim_runs("nutrient", T0 + 1, 2, LEASE, 0, 1000)
        assert [c.run.id for c in second] == [IDS[3]] and _reads(sent) == []
        third, _ = await store.runs.claim_runs("nutrient", T0 + 2, 2, LEASE, 0, 1000)
        assert [c.run.id for c in third] == [IDS[4]] and _reads(sent) == []
        # Nothing was left due, and the worker knows it (store/due.py): the last claim's reply said the
        # shard's next run is due at a lease's end, and every other shard was empty when it last looked,
        # under WORKER_IDLE_S ago. It reads nothing, and answers when the next run falls due.
        assert await store.runs.claim_runs("nutrient", T0 + 3, 2, LEASE, 0, 1000) == ([], T0 + LEASE)
        assert _reads(sent) == []
        # Once a full look is due (WORKER_IDLE_S later) it reads every shard's head again, and no ids: no
        # head is due.
        later = int(T0 + 3 + idle_ms)
        assert await store.runs.claim_runs("nutrient", later, 2, LEASE, 0, 1000) == ([], T0 + LEASE)
        assert _reads(sent) == _look(store)
        sent.clear()
        # When the leases end the shard is due as it said: its ids are read again, and claimed.
        again, _ = await store.runs.claim_runs("nutrient", T0 + LEASE, 2, LEASE, 0, 1000)
        assert [c.run.id for c in again] == IDS[:2] and sent.count("ZRANGEBYSCORE") == 1


async def test_a_busy_claim_over_shards_takes_the_ids_left_due_and_reads_a_cut_shard_again(
    store: Store,
) -> None:
    a = [_in(f"run_a{n}", SHARD) for n in range(5)]
    b = [_in(f"run_b{n}", OTHER) for n in range(3)]
    for run_id in a + b:
        await _run(store, run_id)
    calls: list[list[str]] = []
    original = store.runs.scripts.claims

    async def seen(**kwargs: Any) -> Any:
        calls.append(kwargs["keys"])
        return await original(**kwargs)

    store.runs.scripts.claims = seen  # type: ignore[method-assign]
    try:
        with _sent(store) as sent:
            first, _ = await store.runs.claim_runs("nutrient", T0, 4, LEASE, 0, 1000)
            # Two of each shard, not the first four due of the busier one; both shards' ids read.
            assert sorted(c.run.id for c in first) == sorted(a[:2] + b[:2])
            assert sent.count("ZRANGEBYSCORE") == 2
            # claim_runs.lua for each shard touched, in one call on this one server (on a cluster one call
            # per shard, each on that shard's keys alone: base.batch_groups); each shard's due set first.
            [ks] = calls
            assert {DUE, keys.due_runs("nutrient", OTHER)} <= set(ks)
            assert len({key_slot(k.encode()) for k in ks}) == 2
            # Each shard's reply named its share of the next batch (4 / 2 shards) of the ids still due:
            # the busier shard's is cut at that share (more may be due behind it), the other's is all.
            known = store.runs._due["nutrient"]
            assert (known.ahead, known.cut) == ({SHARD: a[2:4], OTHER: b[2:]}, {SHARD})
            sent.clear()
            calls.clear()
            # Three ids left due for a claim of four: the cut shard is read again, not the other, and the
            # claim is full (had it taken the three, the pump would have waited its gap with a[4] due).
            second, _ = await store.runs.claim_runs("nutrient", T0 + 1, 4, LEASE, 0, 1000)
            assert sorted(c.run.id for c in second) == sorted(a[2:] + b[2:])
            assert sent.count("ZRANGEBYSCORE") == 1 and len(calls) == 1
            assert (known.ahead, known.cut) == ({}, set())
            # Nothing is left due, and the worker knows it: it reads nothing until the leases end.
            sent.clear()
            assert await store.runs.claim_runs("nutrient", T0 + 2, 4, LEASE, 0, 1000) == ([], T0 + LEASE)
            assert _reads(sent) == [] and len(calls) == 1
    finally:
        store.runs.scripts.claims = original  # type: ignore[method-assign]


async def test_a_claim_after_one_cut_short_by_its_slots_reads_the_shards_again_and_comes_back_full(
    store: Store,
) -> None:
    """A burst's backlog: a claim of 100 (its free slots) over 16 shards leaves in each its share of the ids
    still due, cut there; the next claim, of 200, reads those shards again and takes 200. Taking the 112
    left alone, it came back short, and the pump took that for all there was and waited its gap."""
    runs = [_in(f"run_{shard}_{n}", shard) for shard in range(keys.SHARDS) for n in range(20)]
    for run_id in runs:
        await _run(store, run_id)
    first, _ = await store.runs.claim_runs("nutrient", T0, 100, LEASE, 0, 1000)
    assert len(first) == 100
    known = store.runs._due["nutrient"]
    assert sum(map(len, known.ahead.values())) == keys.SHARDS * 7 and known.cut == set(range(keys.SHARDS))
    second, _ = await store.runs.claim_runs("nutrient", T0 + 1, 200, LEASE, 0, 1000)
    assert len(second) == 200
    assert not {c.run.id for c in first} & {c.run.id for c in second}


async def test_a_delivery_claimed_between_the_read_and_the_script_is_not_claimed_twice(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_x", event_types=json.dumps(["run.*"]))
    change = Transition(
        replace(_next(run, "succeeded"), event_ids=[_e("evt_x")]),
        run.version,
        events=[_event("run.succeeded", "evt_x")],
    )
    assert await store.runs.transition(change) == Applied(1, True)
    dlv_id = fanout.delivery_id_in_shard(_e("evt_x"), "sub_x")
    assert dlv_id in await _due_deliveries(store)
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 5, 10, LEASE)
    assert [c.delivery.id for c in claimed] == [dlv_id]
    sid, client, shard = "sub_x", "alice", keys.shard_of(dlv_id)
    # A second worker read the id as due before the first claim leased it: the script checks again.
    reply = await store.deliveries.scripts.claim_deliveries(
        keys=[
            keys.due_deliveries(shard),
            keys.active_deliveries(shard),
            keys.delivery(dlv_id),
            keys.subscription(sid),
            keys.sub_inflight(sid),
            keys.sub_parked(sid),
            keys.sub_budget(sid),
            keys.client_inflight(client, shard),
            keys.client_parked(client, shard),
        ],
        args=[T0 + 5, 10, LEASE, 2, 3, dlv_id, sid, _e("evt_x"), client, "take"],
    )
    assert reply[0] == []
    assert [_s(m) for m in await store.redis.zrange(keys.sub_inflight(sid), 0, -1)] == [dlv_id]  # once
    assert await store.redis.zcard(keys.client_inflight(client, shard)) == 1


async def test_the_python_delivery_id_is_the_one_the_fanout_mints(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_id", event_types=json.dumps(["run.*"]))
    change = Transition(
        replace(_next(run, "failed"), event_ids=[_e("evt_f")]),
        run.version,
        events=[_event("run.failed", "evt_f")],
    )
    assert await store.runs.transition(change) == Applied(1, True)
    [d] = await _deliveries_of(store, "sub_id")
    # Deterministic, and in the subscription's shard: its hash, claim and result share the slot of the
    # subscription's keys.
    assert d.id == fanout.delivery_id_in_shard(_e("evt_f"), "sub_id")
    assert keys.shard_of(d.id) == keys.shard_of("sub_id")
    assert keys.delivery(d.id).startswith(keys.of("sub_id"))


async def test_a_feed_page_reads_the_bodies_kept_under_the_events_keys(store: Store) -> None:
    from service.store.feed import Feed

    run = await _run(store)
    change = Transition(
        replace(_next(run, "succeeded"), event_ids=[_e("evt_kept")]),
        run.version,
        events=[_event("run.succeeded", "evt_kept")],
    )
    assert await store.runs.transition(change) == Applied(0, True)
    # The entry does not carry the body (the event's key keeps it) but its size.
    [(_, fields)] = await store.redis.xrange(keys.client_feed("alice"))
    assert feedform.entry(fields).body is None and feedform.entry(fields).size > 0
    feed = Feed(store.redis, store.redis, 3600)
    page = await feed.read("alice", "", limit=10, now_ms=T0)
    assert [(e.event_id, json.loads(e.body)["type"]) for e in page.events] == [
        (_e("evt_kept"), "run.succeeded")
    ]
    await store.redis.delete(keys.event(_e("evt_kept")))  # expired: the entry is past retention, skipped
    assert (await feed.read("alice", "", limit=10, now_ms=T0)).events == []


async def test_an_attempt_recorded_from_the_claimed_record_reads_nothing_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await _run(store)
    await _sub(store, "sub_r", event_types=json.dumps(["run.*"]))
    events = [_event("run.succeeded", "evt_r")]
    change = Transition(replace(_next(run, "succeeded"), event_ids=[_e("evt_r")]), run.version, events=events)
    assert await store.runs.transition(change) == Applied(1, True)
    [claimed], _ = await store.deliveries.claim_deliveries(T0 + 5, 10, LEASE)
    reads: list[object] = []
    original = store.deliveries._named

    async def counted(*args: object) -> list[list[str]]:
        reads.append(args)
        return await original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store.deliveries, "_named", counted)
    await store.deliveries.record_attempt(
        claimed.delivery, AttemptOutcome.SUCCEEDED, now_ms=T0 + 6, attempt=_attempt(200)
    )
    assert reads == []
    stored = await store.deliveries.get_delivery(claimed.delivery.id)
    assert stored is not None and stored.status == DeliveryStatus.SUCCEEDED


async def test_a_record_that_names_other_keys_is_refused_then_read_again(store: Store) -> None:
    run = await _run(store)
    await _sub(store, "sub_s", event_types=json.dumps(["run.*"]))
    events = [_event("run.succeeded", "evt_s")]
    change = Transition(replace(_next(run, "succeeded"), event_ids=[_e("evt_s")]), run.version, events=events)
    assert await store.runs.transition(change) == Applied(1, True)
    [claimed], _ = await store.deliveries.claim_deliveries(T0 + 5, 10, LEASE)
    wrong = replace(claimed.delivery, client="mallory")  # names mallory's in-flight set: stale
    await store.deliveries.record_attempt(
        wrong, AttemptOutcome.SUCCEEDED, now_ms=T0 + 6, attempt=_attempt(200)
    )
    stored = await store.deliveries.get_delivery(claimed.delivery.id)
    assert stored is not None and stored.status == DeliveryStatus.SUCCEEDED
    shard = keys.shard_of(claimed.delivery.id)
    assert await store.redis.zcard(keys.client_inflight("alice", shard)) == 0  # the right set was freed


async def test_budget_slots_of_runs_claimed_meanwhile_are_given_back(store: Store) -> None:
    for run_id in IDS[:3]:
        await _run(store, run_id)
    # Another worker claims IDS[1] between this claim's read and its script: 3 slots taken, 2 used.
    original = store.runs.scripts.claims

    async def race(**kwargs: Any) -> Any:
        await store.redis.zadd(DUE, {IDS[1]: T0 + 10 + LEASE}, xx=True)
        return await original(**kwargs)

    store.runs.scripts.claims = race  # type: ignore[method-assign]
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 10, 10, LEASE, 1000.0, 10_000)
    store.runs.scripts.claims = original  # type: ignore[method-assign]
    assert [(c.run.id, c.slot_ms) for c in claimed] == [(IDS[0], T0 + 10), (IDS[2], T0 + 1010)]
    # The third slot went back: the next request's slot follows the last one used.
    assert await store.limits.budget_take("nutrient", T0 + 20, 1000.0) == T0 + 2010


@pytest.mark.parametrize(
    ("taken", "left", "next_slot"),
    [
        # The run taken meanwhile is the second shard's: its slot, the last, goes back.
        ("b", [("a", T0 + 10)], T0 + 1010),
        # The first shard's: the second's run keeps the slot it was given (the pace holds: never two runs
        # one slot), and the one before it cannot go back (the budget gives back only from its end): one
        # interval lost to the race, never a slot handed out twice.
        ("a", [("b", T0 + 1010)], T0 + 2010),
    ],
)
async def test_slots_after_the_last_one_used_go_back_across_shards(
    store: Store, taken: str, left: list[tuple[str, int]], next_slot: int
) -> None:
    """A claim over two shards hands the slots out in the order it took the runs, the first shard's then
    the second's (claim_runs.lua for each, given its first slot); a run another worker took meanwhile
    leaves its slot unused, and the slots after the last one used are given back."""
    ids = {"a": _in("run_a", 2), "b": _in("run_b", 9)}
    for run_id in ids.values():
        await _run(store, run_id)
    original = store.runs.scripts.claims
    due = keys.due_runs("nutrient", keys.shard_of(ids[taken]))

    async def race(**kwargs: Any) -> Any:  # both shards in one call on this one server
        if due in kwargs["keys"]:
            await store.redis.zadd(due, {ids[taken]: T0 + 10 + LEASE}, xx=True)
        return await original(**kwargs)

    store.runs.scripts.claims = race  # type: ignore[method-assign]
    try:
        claimed, _ = await store.runs.claim_runs("nutrient", T0 + 10, 10, LEASE, 1000.0, 10_000)
    finally:
        store.runs.scripts.claims = original  # type: ignore[method-assign]
    assert [(c.run.id, c.slot_ms) for c in claimed] == [(ids[name], slot) for name, slot in left]
    assert await store.limits.budget_take("nutrient", T0 + 20, 1000.0) == next_slot


async def test_a_probe_taken_by_another_claim_meanwhile_hands_the_run_back(store: Store) -> None:
    for run_id in IDS[:2]:
        await _run(store, run_id)
    await store.limits.pause_limited("nutrient", T0, 1000, 1000, 60_000, None)
    original = store.runs.scripts.claims

    async def race(**kwargs: Any) -> Any:  # another worker's claim set its probe first
        await store.redis.hset(
            keys.vendor_pause("nutrient"), mapping={"probe": "x", "probe_exp": T0 + 99_000}
        )
        return await original(**kwargs)

    store.runs.scripts.claims = race  # type: ignore[method-assign]
    claimed, nxt = await store.runs.claim_runs("nutrient", T0 + 1000, 10, LEASE, 0.0, 0)
    store.runs.scripts.claims = original  # type: ignore[method-assign]
    assert claimed == [] and nxt is None
    assert await store.redis.zscore(DUE, IDS[0]) == T0  # due again, as it was


async def test_an_idle_workers_vendors_look_at_their_shards_together_in_one_call(store: Store) -> None:
    """A look at every shard of one vendor's due sets takes along another vendor's look that is half due
    or more (``DueShards.join_look``): one call for both on one Redis server, a pipeline of a ZRANGE a set
    on a cluster; the other vendor's next claim then reads only the shard that look found due."""
    from tests.store.test_lua import _new

    idle_ms = int(store.settings.worker_idle_s * 1000)
    await store.runs.heads([DUE])  # the script loaded (a NOSCRIPT would send it twice)
    with _sent(store) as sent:
        assert await store.runs.claim_runs("nutrient", T0, 10, LEASE, 0, 1000) == ([], None)
        assert await store.runs.claim_runs("cloudsquid", T0, 10, LEASE, 0, 1000) == ([], None)
        # Each vendor's first look is its own: the other's was made just now, not half due.
        assert _reads(sent) == _look(store) * 2
        run = replace(_new(_in("run_c", OTHER)), vendor="cloudsquid")
        assert await store.runs.create_run(run, None, None) is None  # due at T0, in shard OTHER
        sent.clear()
        assert await store.runs.claim_runs("nutrient", T0 + idle_ms, 10, LEASE, 0, 1000) == ([], None)
        two_looks = ["ZRANGE"] * 2 * keys.SHARDS if isinstance(store.redis, RedisCluster) else ["DUE_HEADS"]
        assert _reads(sent) == two_looks
        sent.clear()
        claimed, _ = await store.runs.claim_runs("cloudsquid", T0 + idle_ms + 1, 10, LEASE, 0, 1000)
        assert [c.run.id for c in claimed] == [run.id]
        # No look of its own (the last was 1 ms ago): the due shard's ids and its head, nothing else.
        assert _reads(sent) == ["ZRANGEBYSCORE", "ZRANGE"]
        sent.clear()
        # And nutrient's next claim within WORKER_IDLE_S reads nothing.
        assert await store.runs.claim_runs("nutrient", T0 + idle_ms + 2, 10, LEASE, 0, 1000) == ([], None)
        assert _reads(sent) == []


async def test_an_idle_delivery_claim_reads_one_head_a_shard_and_the_ids_of_a_due_one_only(
    store: Store,
) -> None:
    """The delivery claim over the 16 due sets (store/due.py, as the runs'): nothing due, a claim reads the
    16 heads and no ids; within WORKER_IDLE_S the next reads nothing; a delivery made due meanwhile is
    found at the next full look, which reads the ids of its shard alone and claims it."""
    from tests.store.test_lua import _pending

    idle_ms = store.settings.worker_idle_s * 1000
    await store.runs.heads([DUE])  # the script loaded (a NOSCRIPT would send it twice)
    with _sent(store) as sent:
        assert await store.deliveries.claim_deliveries(T0, 10, LEASE) == ([], None)
        assert _reads(sent) == _look(store)
        sent.clear()
        assert await store.deliveries.claim_deliveries(T0 + 1, 10, LEASE) == ([], None)
        assert _reads(sent) == []
        await _sub(store, "sub_1")
        [made] = await _pending(store, "sub_1", 1)  # due at T0 + 1 (the run's step)
        sent.clear()
        claimed, _ = await store.deliveries.claim_deliveries(int(T0 + 1 + idle_ms), 10, LEASE)
        assert [c.delivery.id for c in claimed] == [made]
        assert _reads(sent) == [*_look(store), "ZRANGEBYSCORE", "ZRANGE"]
