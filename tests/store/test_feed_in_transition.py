"""On one Redis server, a change's events that no subscription may want go to the client's feed in the
change's own step (``transition.lua``'s feed part), with no relay after it; on a real redis-server.

A cluster's slots keep the client's feed apart from the run, so there every event takes the run's outbox
and the relay's steps (the cluster stage of ``.ci/run`` runs the store's tests on one). On one server the
script reads the client's directory itself: when the run's outbox is empty and no subscription (of the
run's, if it names some) keeps a type that matches one of the events, it appends them to the feed as the
relay's feed step would, and writes no outbox entry. Anything else (a subscription that may want one, a
directory entry missing or unreadable, an older entry still in the outbox, a zero-retention run) takes the
outbox and the relay as before. Each test counts the relay's scripts by wrapping them (their calls still
go to the server)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from service.core import domain, runs
from service.core.backoff import VendorPolicy
from service.core.lifecycle import Transition, new_run
from service.core.records import Run
from service.store import Applied, Store, bodies, feedform, keys
from service.vendors import base
from tests.store.test_relay_types import CLIENT, Jitter, _feed_types, _subscription
from tests.store.test_relay_types import store as store  # the fixture

RELAY_SCRIPTS = ("relay_feeds", "relays_done", "relay_feed", "relay_done", "fanout_deliveries")


@contextmanager
def _relay_calls(store: Store) -> Iterator[list[str]]:
    """The names of the relay's scripts called meanwhile, in order."""
    called: list[str] = []
    real = {name: getattr(store.runs.scripts, name) for name in RELAY_SCRIPTS}

    def counted(name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            return await real[name](*args, **kwargs)

        return call

    for name in RELAY_SCRIPTS:
        setattr(store.runs.scripts, name, counted(name))
    try:
        yield called
    finally:
        for name, script in real.items():
            setattr(store.runs.scripts, name, script)


async def _accepted(
    store: Store, *, subscription_ids: list[str] | None = None, zero_retention: bool = False
) -> tuple[Run, VendorPolicy]:
    """A Nutrient run accepted by the vendor (its run.submitted in the feed)."""
    now = domain.now_ms() - 100_000
    run = new_run(
        run_id=domain.new_id("run"),
        client=CLIENT,
        vendor="nutrient",
        operation="extract",
        document={"url": "https://example.com/a.pdf", "media_type": "application/pdf"},
        options={},
        metadata={},
        subscription_ids=subscription_ids or [],
        zero_retention=zero_retention,
        now_ms=now,
    )
    assert await store.runs.create_run(run, None, None) is None
    policy: VendorPolicy = store.settings.vendor("nutrient")
    accepted = base.Submitted(vendor_run_id="5d41402a-bc4b-2a76-b971-9d911017c592", vendor_status="queued")
    change = runs.after_submit(run, accepted, {}, policy, now_ms=now + 40, jitter=Jitter())
    assert isinstance(await store.runs.transition(change), Applied)
    return change.run, policy


def _progress(store: Store, run: Run, policy: VendorPolicy, percent: float) -> Transition:
    answer = base.PollResult(base.RUNNING, "running", progress=base.Progress(percent=percent, phase="ocr"))
    return runs.after_poll(
        run, answer, policy, store.settings.run_policy, now_ms=run.updated_at + 30_000, jitter=Jitter()
    )


async def _last_feed_entry(store: Store) -> feedform.Entry:
    [(_, fields)] = await store.redis.xrevrange(keys.client_feed(CLIENT), count=1)
    return feedform.entry(fields)


async def _outbox_clear(store: Store, run: Run) -> bool:
    return (
        await store.redis.llen(keys.run_outbox(run.id)) == 0  # type: ignore[misc]
        and await store.redis.zscore(keys.outbox(keys.shard_of(run.id)), run.id) is None
    )


async def test_a_progress_no_subscription_may_want_goes_to_the_feed_in_its_own_step(store: Store) -> None:
    await _subscription(store)  # the default types: the terminal events
    run, policy = await _accepted(store)
    change = _progress(store, run, policy, 10.0)
    [event] = [e for e in change.events if e.type == domain.EVENT_PROGRESS]
    with _relay_calls(store) as called:
        [outcome] = await store.runs.transitions([change])
    assert called == []
    assert isinstance(outcome, Applied) and outcome.deliveries == 0 and outcome.due_in == frozenset()
    entry = await _last_feed_entry(store)
    assert entry.event_id == event.id and entry.run_id == run.id and entry.vendor == "nutrient"
    # Its body is the feed's (nothing else keeps a progress nobody asked for), byte for byte.
    assert entry.body is not None and bodies.unpacked(entry.body, run.id) == event.body.encode()
    assert await store.redis.exists(keys.event(event.id)) == 0
    assert await _outbox_clear(store, run)
    assert await store.redis.get(keys.relayed(CLIENT, run.id)) is None  # no relay, no mark
    assert await _feed_types(store) == [domain.EVENT_SUBMITTED, domain.EVENT_PROGRESS]
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.version == change.run.version


async def test_an_event_a_subscription_may_want_takes_the_relay(store: Store) -> None:
    await _subscription(store, ("run.progress",))
    run, policy = await _accepted(store)
    with _relay_calls(store) as called:
        [outcome] = await store.runs.transitions([_progress(store, run, policy, 10.0)])
    assert called == ["fanout_deliveries", "relay_feeds", "relays_done"]
    assert isinstance(outcome, Applied) and outcome.deliveries == 1
    assert (await _last_feed_entry(store)).type == domain.EVENT_PROGRESS
    assert await _outbox_clear(store, run)


async def test_a_subscription_the_run_does_not_name_is_not_asked(store: Store) -> None:
    quiet = await _subscription(store)
    await _subscription(store, ("run.*",))  # wants everything, but not named by the run
    run, policy = await _accepted(store, subscription_ids=[quiet.id])
    with _relay_calls(store) as called:
        [outcome] = await store.runs.transitions([_progress(store, run, policy, 10.0)])
    assert called == []
    assert isinstance(outcome, Applied) and outcome.deliveries == 0
    assert (await _last_feed_entry(store)).type == domain.EVENT_PROGRESS


async def test_a_directory_entry_missing_or_unreadable_takes_the_relay(store: Store) -> None:
    # A store written before the directory kept types, or a hand edit: the subscription may want anything.
    sub = await _subscription(store)
    run, policy = await _accepted(store)
    for kept in (None, "{not json", "null"):
        if kept is None:
            await store.redis.hdel(keys.client_sub_types(CLIENT), sub.id)
        else:
            await store.redis.hset(keys.client_sub_types(CLIENT), sub.id, kept)
        change = _progress(store, run, policy, 10.0 + len(kept or ""))
        with _relay_calls(store) as called:
            [outcome] = await store.runs.transitions([change])
        assert "relay_feeds" in called, kept
        assert isinstance(outcome, Applied)
        run = change.run
    assert await _outbox_clear(store, run)


async def test_an_event_behind_one_still_in_the_outbox_waits_its_turn(store: Store) -> None:
    # A relay that failed left the run's last event in its outbox (the sweeper's, later): the next event
    # goes behind it, so that the feed keeps the run's order.
    await _subscription(store)
    run, policy = await _accepted(store)
    first = _progress(store, run, policy, 10.0)
    store.runs._feed_in_transition = False  # the first step as a cluster takes it, and no relay after
    try:
        ks, args, _ = store.runs._transition_call(first)
    finally:
        store.runs._feed_in_transition = True
    assert (await store.runs.scripts.transition(keys=ks, args=args))[0] == b"ok"
    second = _progress(store, first.run, policy, 20.0)
    with _relay_calls(store) as called:
        [outcome] = await store.runs.transitions([second])
    assert "relay_feeds" in called  # both relayed, the stranded one first
    assert isinstance(outcome, Applied)
    feed = await store.redis.xrange(keys.client_feed(CLIENT))
    ids = [feedform.entry(fields).event_id for _, fields in feed]
    assert ids[-2:] == [first.events[0].id, second.events[0].id]
    assert await _outbox_clear(store, run)


async def test_a_zero_retention_run_takes_the_relay(store: Store) -> None:
    # Its feed keeps a body without the result, and its deliveries count down its events (relay_done).
    await _subscription(store)
    run, policy = await _accepted(store, zero_retention=True)
    with _relay_calls(store) as called:
        [outcome] = await store.runs.transitions([_progress(store, run, policy, 10.0)])
    assert "relay_feeds" in called
    assert isinstance(outcome, Applied)


async def test_a_batch_mixes_both_and_each_change_is_as_it_would_be_alone(store: Store) -> None:
    loud = await _subscription(store, ("run.progress",))
    quiet = await _subscription(store)
    named_loud = [await _accepted(store, subscription_ids=[loud.id]) for _ in range(3)]
    named_quiet = [await _accepted(store, subscription_ids=[quiet.id]) for _ in range(3)]
    changes = [_progress(store, run, policy, 10.0) for run, policy in named_loud + named_quiet]
    with _relay_calls(store) as called:
        outcomes = await store.runs.transitions(changes)
    assert called.count("relay_feeds") == 1  # the three named_loud in one call
    assert [o.deliveries if isinstance(o, Applied) else None for o in outcomes] == [1, 1, 1, 0, 0, 0]
    progress = [feedform.entry(f) for _, f in await store.redis.xrange(keys.client_feed(CLIENT))]
    assert sorted(e.event_id for e in progress if e.type == domain.EVENT_PROGRESS) == sorted(
        change.events[0].id for change in changes
    )
    for run, _ in named_loud + named_quiet:
        assert await _outbox_clear(store, run)


async def _calls(store: Store, command: str) -> int:
    stats = await store.redis.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def test_a_directory_is_read_once_a_batch_whatever_its_size(store: Store) -> None:
    # A client at its subscriptions' quota costs each change two commands, not one per subscription, and a
    # batch's changes of one client ask its directory once (nothing else runs inside the batch's script).
    for _ in range(30):
        await _subscription(store, max_count=100)
    accepted = [await _accepted(store) for _ in range(5)]
    changes = [_progress(store, run, policy, 10.0) for run, policy in accepted]
    hgetall, hget = await _calls(store, "hgetall"), await _calls(store, "hget")
    with _relay_calls(store) as called:
        outcomes = await store.runs.transitions(changes)
    assert called == [] and all(isinstance(o, Applied) for o in outcomes)
    assert await _calls(store, "hgetall") - hgetall == 1
    assert await _calls(store, "hget") - hget == 0
    # One more subscription that asks for progress, the last in the directory: the next batch relays.
    await _subscription(store, ("run.progress",), max_count=100)
    changes = [
        _progress(store, change.run, policy, 20.0)
        for change, (_, policy) in zip(changes, accepted, strict=True)
    ]
    with _relay_calls(store) as called:
        outcomes = await store.runs.transitions(changes)
    assert "relay_feeds" in called
    assert [o.deliveries if isinstance(o, Applied) else None for o in outcomes] == [1] * 5
