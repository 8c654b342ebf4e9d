"""The relay skips the fan-out of events that no subscription may want, on a real redis-server.

A client's directory keeps, beside each subscription, every event type it has asked for since it was created
(``keys.client_sub_types``); the relay reads it with the directory and calls ``fanout_deliveries.lua`` only
on the subscriptions that may want one of the events (``fanout.to_fan_out``). The script reads each
subscription's own types again, so what is kept may only ever be wider than the hash: a change of types
widens it before the hash is written (``widen_sub_types.lua``), and a subscription with nothing kept (a store
written before) is fanned out to whatever the event. These tests drive the store as the worker does and
count the fan-out's script calls by wrapping the script (the Redis calls still go to the server)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from service.core import domain, runs
from service.core.backoff import VendorPolicy
from service.core.lifecycle import Transition, new_run
from service.core.records import Run, Subscription
from service.store import Applied, Store, connect, fanout, feedform, keys
from service.vendors import base
from service.vendors.registry import load_settings
from tests.conftest import base_env

CLIENT = "alice"


class Jitter:
    def uniform(self, a: float, b: float) -> float:
        return a


class Counted:
    """The fan-out's script, counting its calls and the subscriptions each names."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.subs: list[list[str]] = []

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        self.subs.append(json.loads(args[0])["subs"])
        return await self.script(keys=keys, args=args, client=client)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    settings = load_settings(base_env(redis_url))
    s = Store(connect(settings), settings)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def counted(store: Store) -> Counted:
    wrapped = Counted(store.runs.scripts.fanout_deliveries)
    store.runs.scripts.fanout_deliveries = wrapped  # type: ignore[assignment]
    return wrapped


async def _subscription(
    store: Store, event_types: tuple[str, ...] | None = None, *, max_count: int = 10
) -> Subscription:
    now = domain.now_ms()
    sub = Subscription(
        id=await store.subscriptions.new_subscription_id(CLIENT),
        client=CLIENT,
        url="http://127.0.0.1:9/hook",
        secrets="[]",
        created_at=now,
        updated_at=now,
        event_types=event_types,
    )
    assert await store.subscriptions.create_subscription(sub, max_count=max_count)
    return sub


async def _apply(store: Store, change: Transition) -> Applied:
    outcome = await store.runs.transition(change)
    assert isinstance(outcome, Applied)
    return outcome


async def _polled(store: Store) -> tuple[Run, VendorPolicy]:
    """A Nutrient run accepted by the vendor (its run.submitted relayed)."""
    now = domain.now_ms() - 100_000
    run = new_run(
        run_id=domain.new_id("run"),
        client=CLIENT,
        vendor="nutrient",
        operation="extract",
        document={"url": "https://example.com/a.pdf", "media_type": "application/pdf"},
        options={},
        metadata={},
        subscription_ids=[],
        zero_retention=False,
        now_ms=now,
    )
    assert await store.runs.create_run(run, None, None) is None
    policy: VendorPolicy = store.settings.vendor("nutrient")
    accepted = base.Submitted(vendor_run_id="5d41402a-bc4b-2a76-b971-9d911017c592", vendor_status="queued")
    change = runs.after_submit(run, accepted, {}, policy, now_ms=now + 40, jitter=Jitter())
    await _apply(store, change)
    return change.run, policy


async def _progress(store: Store, run: Run, policy: VendorPolicy, percent: float) -> tuple[Run, Applied]:
    answer = base.PollResult(base.RUNNING, "running", progress=base.Progress(percent=percent, phase="ocr"))
    change = runs.after_poll(
        run, answer, policy, store.settings.run_policy, now_ms=run.updated_at + 30_000, jitter=Jitter()
    )
    [event] = [e for e in change.events if e.type == domain.EVENT_PROGRESS]
    applied = await _apply(store, change)
    # Delivered or not, the event's body is kept where a reader finds it: its own key, or the feed entry.
    [(_, fields)] = await store.redis.xrevrange(keys.client_feed(CLIENT), count=1)
    entry = feedform.entry(fields)
    assert entry.event_id == event.id
    assert (entry.body is not None) != bool(await store.redis.exists(keys.event(event.id)))
    assert (entry.body is not None) == (applied.deliveries == 0)
    return change.run, applied


async def _feed_types(store: Store) -> list[str]:
    entries = await store.redis.xrange(keys.client_feed(CLIENT))
    return [feedform.entry(fields).type for _, fields in entries]


async def test_a_progress_no_subscription_asked_for_calls_no_fan_out_and_still_reaches_the_feed(
    store: Store, counted: Counted
) -> None:
    await _subscription(store)  # the default: terminal events only
    run, policy = await _polled(store)
    counted.subs.clear()
    run, applied = await _progress(store, run, policy, 10.0)
    assert counted.subs == []
    assert applied.deliveries == 0
    assert await _feed_types(store) == [domain.EVENT_SUBMITTED, domain.EVENT_PROGRESS]


async def test_a_subscription_that_asked_for_progress_is_fanned_out_to_and_gets_it(
    store: Store, counted: Counted
) -> None:
    quiet = await _subscription(store)
    loud = await _subscription(store, ("run.*",))
    run, policy = await _polled(store)
    counted.subs.clear()
    run, applied = await _progress(store, run, policy, 10.0)
    assert applied.deliveries == 1
    called = [s for subs in counted.subs for s in subs]
    assert loud.id in called
    if keys.shard_of(quiet.id) != keys.shard_of(loud.id):
        assert quiet.id not in called  # its shard's call is skipped altogether


async def test_a_change_of_types_is_seen_by_the_next_relay_and_the_kept_types_only_widen(
    store: Store, counted: Counted
) -> None:
    sub = await _subscription(store)
    run, policy = await _polled(store)
    run, applied = await _progress(store, run, policy, 10.0)
    assert applied.deliveries == 0
    wide = sub.model_copy(update={"event_types": ("run.progress", "run.succeeded")})
    await store.subscriptions.update_subscription(wide, ["event_types"])
    run, applied = await _progress(store, run, policy, 20.0)
    assert applied.deliveries == 1
    # Narrowed again: the hash says so (no delivery), the kept types stay wide (the fan-out is called).
    narrow = sub.model_copy(update={"event_types": ("run.succeeded",)})
    await store.subscriptions.update_subscription(narrow, ["event_types"])
    kept = await store.redis.hget(keys.client_sub_types(CLIENT), sub.id)
    assert set(json.loads(kept)) == {*domain.DEFAULT_EVENT_TYPES, "run.progress"}
    counted.subs.clear()
    run, applied = await _progress(store, run, policy, 30.0)
    assert applied.deliveries == 0
    assert counted.subs == [[sub.id]]


async def test_a_subscription_with_no_kept_types_is_fanned_out_to_whatever_the_event(
    store: Store, counted: Counted
) -> None:
    sub = await _subscription(store, ("run.*",))
    await store.redis.hdel(keys.client_sub_types(CLIENT), sub.id)  # as a store written before
    run, policy = await _polled(store)
    counted.subs.clear()
    run, applied = await _progress(store, run, policy, 10.0)
    assert counted.subs == [[sub.id]]
    assert applied.deliveries == 1
    # A change of its types does not make up an entry narrower than what it asked for before.
    await store.subscriptions.update_subscription(
        sub.model_copy(update={"event_types": None}), ["event_types"]
    )
    assert await store.redis.hget(keys.client_sub_types(CLIENT), sub.id) is None


async def test_a_kept_entry_that_is_no_list_is_dropped_by_a_change_of_types(
    store: Store, counted: Counted
) -> None:
    sub = await _subscription(store)
    await store.redis.hset(keys.client_sub_types(CLIENT), sub.id, "{not json")  # a hand edit
    await store.subscriptions.update_subscription(
        sub.model_copy(update={"event_types": ("run.*",)}), ["event_types"]
    )
    assert await store.redis.hget(keys.client_sub_types(CLIENT), sub.id) is None  # so: every event
    run, policy = await _polled(store)
    run, applied = await _progress(store, run, policy, 10.0)
    assert applied.deliveries == 1


async def test_deleting_a_subscription_drops_its_kept_types(store: Store) -> None:
    sub = await _subscription(store, ("run.failed",))
    assert json.loads(await store.redis.hget(keys.client_sub_types(CLIENT), sub.id)) == ["run.failed"]
    await store.subscriptions.delete_subscription(sub.id, CLIENT)
    assert await store.redis.hget(keys.client_sub_types(CLIENT), sub.id) is None


# The Python reading is never narrower than the script's: for every pair, the fan-out's script creates a
# delivery only where may_want says it may.
TYPES = [None, ("run.*",), ("run.progress",), ("run.succeeded", "run.failed"), ("run.canceled",)]
EVENTS = [
    domain.EVENT_SUBMITTED,
    domain.EVENT_PROGRESS,
    domain.EVENT_SUCCEEDED,
    domain.EVENT_FAILED,
    domain.EVENT_CANCELED,
    domain.EVENT_TEST,
]


@pytest.mark.parametrize("types", TYPES)
async def test_may_want_is_never_narrower_than_the_fan_outs_own_match(
    store: Store, types: tuple[str, ...] | None
) -> None:
    sub = await _subscription(store, types)
    kept = fanout.kept_types(await store.redis.hgetall(keys.client_sub_types(CLIENT)))
    for etype in EVENTS:
        event = fanout.Event(id=domain.new_id("evt"), type=etype, now=domain.now_ms(), body=b"{}")
        [call] = fanout.deliveries_calls(CLIENT, domain.new_id("run"), [event], [sub.id])
        created = int((await store.runs.scripts.fanout_deliveries(*call))[0])
        wanted = fanout.may_want(kept.get(sub.id), etype)
        assert created <= int(wanted), (types, etype)
        # And exact where the types are known: the same matcher, not only a wider one.
        assert created == int(wanted), (types, etype)


class Batches:
    """A batched script (scripts.BATCHED), counting its calls and how many of the one script each carries."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.sizes: list[int] = []

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        at = n = 0
        while at < len(args):  # per call: its key count, its argument count, its arguments
            at, n = at + 2 + int(args[at + 1]), n + 1
        self.sizes.append(n)
        return await self.script(keys=keys, args=args, client=client)


async def test_a_batch_of_relays_is_one_feed_call_and_one_last_step_on_one_server(
    store: Store,
) -> None:
    # On a cluster, a feed call per client and a last step per shard (base.batch_groups, tested as a table
    # in tests/unit/test_batch_groups.py); this Redis is one server, which has no slots. The subscription
    # asks for every run event, so that the progress events take the relay (on one server, those that no
    # subscription may want go to the feed in their transition's step: test_feed_in_transition.py).
    await _subscription(store, ("run.*",))
    polled = [await _polled(store) for _ in range(6)]
    feeds = Batches(store.runs.scripts.relay_feeds)
    done = Batches(store.runs.scripts.relays_done)
    store.runs.scripts.relay_feeds = feeds  # type: ignore[method-assign]
    store.runs.scripts.relays_done = done  # type: ignore[method-assign]
    answer = base.PollResult(base.RUNNING, "running", progress=base.Progress(percent=40.0, phase="ocr"))
    changes = [
        runs.after_poll(
            run, answer, policy, store.settings.run_policy, now_ms=run.updated_at + 30_000, jitter=Jitter()
        )
        for run, policy in polled
    ]
    outcomes = await store.runs.transitions(changes)
    assert all(isinstance(o, Applied) for o in outcomes)
    assert feeds.sizes == [6]  # one client: one call, six relays in it
    assert len({keys.shard_of(run.id) for run, _ in polled}) > 1  # the runs' shards, one call for them
    assert done.sizes == [6]
    assert await _feed_types(store) == [domain.EVENT_SUBMITTED] * 6 + [domain.EVENT_PROGRESS] * 6
    for run, _ in polled:  # each relay finished: its outbox is empty and out of the index
        assert await store.redis.llen(keys.run_outbox(run.id)) == 0
        assert await store.redis.zscore(keys.outbox(keys.shard_of(run.id)), run.id) is None
