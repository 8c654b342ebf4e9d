"""Transitions applied together (``Store.transitions`` and the worker's ``TransitionBatcher``) against a
real redis-server: one call for the changes of one turn of the event loop (``transitions`` once for them
all on this one server; on a cluster once per shard the runs are in, ``base.batch_groups``, all in one round
trip), each with its own outcome, exactly as one ``Store.transition`` each would have had."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ResponseError

from service.core.lifecycle import Transition
from service.core.records import replace
from service.observability.metrics import REGISTRY, client_label
from service.store import Applied, Conflict, Missing, Store, keys
from service.store.base import batched
from service.worker.transitions import MAX_BATCH, TransitionBatcher
from tests.store.test_lua import T0, _event, _in, _next, _run, _s, store

__all__ = ["store"]  # the fixture, shared with test_lua.py


def _count_calls(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each batch that ``store.runs.transitions`` is called with, from now on."""
    batches: list[int] = []
    original = store.runs.transitions

    async def counted(changes: Any) -> Any:
        batches.append(len(changes))
        return await original(changes)

    monkeypatch.setattr(store.runs, "transitions", counted)
    return batches


def _count_scripts(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many changes each call of ``transitions`` carries, from now on (its ARGV: per change, its key
    count, its argument count, then its arguments)."""
    sizes: list[int] = []
    original = store.runs.scripts.transitions

    async def counted(keys: Any = None, args: Any = None, client: Any = None) -> Any:
        at = n = 0
        while at < len(args):
            at, n = at + 2 + int(args[at + 1]), n + 1
        sizes.append(n)
        return await original(keys=keys, args=args, client=client)

    monkeypatch.setattr(store.runs.scripts, "transitions", counted)
    return sizes


async def test_one_call_per_turn_each_change_with_its_own_outcome(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Over two shards (run_ghost is in a third): on one server the script runs once, with every change.
    ids = [_in(f"run_{i}", (3, 9)[i % 2]) for i in range(5)]
    runs = [await _run(store, run_id) for run_id in ids]
    await store.runs.transition(Transition(_next(runs[4], "processing"), 0))  # runs[4] is at version 1 now
    batches, scripts = _count_calls(store, monkeypatch), _count_scripts(store, monkeypatch)
    batcher = TransitionBatcher(store.runs)
    changes = [Transition(_next(run, "processing"), 0, due_ms=T0 + 100 + i) for i, run in enumerate(runs)]
    ghost = Transition(replace(_next(runs[0], "processing"), id="run_ghost"), 0)
    outcomes = await asyncio.gather(*(batcher.apply(c) for c in [*changes, ghost]))

    assert batches == [6]
    assert keys.shard_of("run_ghost") not in (3, 9) and scripts == [6]
    assert outcomes[:4] == [Applied()] * 4
    assert isinstance(outcomes[4], Conflict) and outcomes[4].current.version == 1
    assert outcomes[5] == Missing()
    for i, run_id in enumerate(ids[:4]):
        due = keys.due_runs("nutrient", keys.shard_of(run_id))  # the run's shard's due set
        assert await store.redis.zscore(due, run_id) == T0 + 100 + i
        assert (await store.runs.get_run(run_id)).version == 1  # type: ignore[union-attr]


async def test_a_change_alone_in_its_turn_goes_as_one_script(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await _run(store)

    async def no_batch(changes: Any) -> Any:
        raise AssertionError("a single change needs no batch")

    monkeypatch.setattr(store.runs, "transitions", no_batch)
    assert await TransitionBatcher(store.runs).apply(Transition(_next(run, "processing"), 0)) == Applied()


async def test_a_script_flushed_from_redis_is_loaded_again(store: Store) -> None:
    runs = [await _run(store, f"run_{i}") for i in range(2)]
    await store.redis.script_flush()
    outcomes = await store.runs.transitions([Transition(_next(r, "processing"), 0) for r in runs])
    assert outcomes == [Applied(), Applied()]


async def test_a_lost_connection_fails_every_step_of_the_batch(store: Store) -> None:
    runs = [await _run(store, f"run_{i}") for i in range(3)]
    batcher = TransitionBatcher(store.runs)

    async def broken(changes: Any) -> Any:
        raise ConnectionError("redis went away")

    store.runs.transitions = broken  # type: ignore[method-assign]
    outcomes = await asyncio.gather(
        *(batcher.apply(Transition(_next(r, "processing"), 0)) for r in runs), return_exceptions=True
    )
    assert [type(o) for o in outcomes] == [ConnectionError] * 3


async def test_settle_waits_for_changes_whose_steps_were_cancelled(store: Store) -> None:
    """Shutdown: a step cancelled while its change is on its way leaves the change sending; the worker
    settles the batcher before it closes the store, so no send opens a connection of a closed pool."""
    runs = [await _run(store, f"run_{i}") for i in range(3)]
    batcher = TransitionBatcher(store.runs, linger_s=0)  # the batch goes at the end of the turn
    steps = [asyncio.create_task(batcher.apply(Transition(_next(r, "processing"), 0))) for r in runs]
    await asyncio.sleep(0)  # one turn of the loop (not a wait for work): the steps queue their changes
    await asyncio.sleep(0)  # the flush creates the send
    assert batcher._sending
    for step in steps:
        step.cancel()
    await batcher.settle()
    assert not batcher._sending and not batcher._queued
    for i in range(3):  # the changes went in all the same
        assert (await store.runs.get_run(f"run_{i}")).version == 1  # type: ignore[union-attr]
    assert all(step.cancelled() for step in steps)


async def test_changes_of_the_next_milliseconds_go_in_one_batch_and_settle_sends_a_lingering_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change waits LINGER_S for others: two steps a millisecond apart (as a worker that is not
    saturated finishes them) are one call; a change still lingering at shutdown is sent by settle()."""
    runs = [await _run(store, f"run_{i}") for i in range(3)]
    batches = _count_calls(store, monkeypatch)
    batcher = TransitionBatcher(store.runs, linger_s=0.5)

    async def later(run: Any, delay: float) -> Any:
        await asyncio.sleep(delay)
        return await batcher.apply(Transition(_next(run, "processing"), 0))

    assert await asyncio.gather(later(runs[0], 0), later(runs[1], 0.01)) == [Applied(), Applied()]
    assert batches == [2]
    lingering = asyncio.create_task(batcher.apply(Transition(_next(runs[2], "processing"), 0)))
    await asyncio.sleep(0)  # queued, its batch not yet gone
    assert batches == [2] and batcher._queued
    await batcher.settle()
    assert await lingering == Applied()  # alone: Runs.transition, not a batch
    assert (await store.runs.get_run("run_2")).version == 1  # type: ignore[union-attr]


async def test_a_change_that_raises_fails_alone_in_its_batch(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call applies a shard's batch (``transitions``); a step that raises there (here a record that is
    not JSON, as a hand edit in Redis would leave it) is that change's error, and the others still apply.
    The runs share a shard, so that the three changes are one call of the script."""
    ids = [_in(f"run_{i}", keys.shard_of("run_0")) for i in range(3)]
    runs = [await _run(store, run_id) for run_id in ids]
    scripts = _count_scripts(store, monkeypatch)
    await store.redis.set(keys.run(ids[1]), b"{not json")
    outcomes = await store.runs.transitions([Transition(_next(r, "processing"), 0) for r in runs])
    assert scripts == [3]
    assert outcomes[0] == Applied() and outcomes[2] == Applied()
    assert isinstance(outcomes[1], ResponseError) and "invalid token" in str(outcomes[1])
    assert await store.redis.get(keys.run(ids[1])) == b"{not json"  # nothing written for it
    for i in (0, 2):
        assert (await store.runs.get_run(ids[i])).version == 1  # type: ignore[union-attr]


async def test_a_change_the_store_refuses_fails_alone_in_its_batch(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change the store refuses before any script (an event not minted beside its run: its body would
    be in another shard) is that change's error; the others of the batch still go, in their call."""
    ids = [_in(f"run_{i}", keys.shard_of("run_0")) for i in range(3)]
    runs = [await _run(store, run_id) for run_id in ids]
    scripts = _count_scripts(store, monkeypatch)
    stray = _event("run.submitted", event_id=_in("evt_stray", (keys.shard_of(ids[1]) + 1) % keys.SHARDS))
    changes = [Transition(_next(r, "processing"), 0) for r in runs]
    changes[1] = Transition(_next(runs[1], "processing"), 0, events=[stray])
    outcomes = await store.runs.transitions(changes)
    assert scripts == [2]
    assert outcomes[0] == Applied() and outcomes[2] == Applied()
    assert isinstance(outcomes[1], ValueError) and "beside its run" in str(outcomes[1])
    assert (await store.runs.get_run(ids[1])).version == 0  # type: ignore[union-attr]
    assert not await store.redis.exists(keys.event(stray.id))


async def test_a_turn_past_max_batch_goes_in_several_calls(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call holds Redis for its whole batch: a turn with more changes than MAX_BATCH is split."""
    runs = [await _run(store, f"run_{i}") for i in range(MAX_BATCH + 5)]
    batches = _count_calls(store, monkeypatch)
    batcher = TransitionBatcher(store.runs)
    outcomes = await asyncio.gather(*(batcher.apply(Transition(_next(r, "processing"), 0)) for r in runs))
    assert batches == [MAX_BATCH, 5]
    assert outcomes == [Applied()] * len(runs)


async def test_the_batcher_counts_each_runs_end_once(store: Store) -> None:
    # The store answers whether a change ended the run; the batcher, which applies every worker change,
    # counts it in hookbridge_runs_total (the store counts nothing).
    run = await _run(store)
    labels = {"vendor": run.vendor, "status": "succeeded", "client": client_label(run.client)}

    def ended() -> float:
        return REGISTRY.get_sample_value("hookbridge_runs_total", labels) or 0.0

    before = ended()
    batcher = TransitionBatcher(store.runs)
    done = _next(run, "succeeded")
    assert await batcher.apply(Transition(done, 0, remove_due=True)) == Applied(0, ended=True)
    assert (
        await batcher.apply(Transition(replace(_next(done, "succeeded"), vendor_deleted=True), 1))
        == Applied()
    )
    assert ended() == before + 1


async def test_a_call_of_a_batch_gets_its_own_keys_and_arguments_whatever_their_number(store: Store) -> None:
    # _batch.lua takes a call's KEYS and ARGV from the stack at once (unpack), and item by item past what
    # Lua's stack takes: a claim of 4,500 ids (4,501 keys, 4,506 arguments) goes the second way, the
    # small one beside it the first; each claims its own due runs, found at the end of its ids.
    due = keys.due_runs("nutrient", 0)
    big = [f"run_big_{n}" for n in range(4_500)]
    small = ["run_small_0", "run_small_1"]
    for run_id in (big[-2], big[-1], small[-1]):
        await store.redis.zadd(due, {run_id: T0 - 1})
        await store.redis.set(keys.run(run_id), "{}")
    calls = [([due, *map(keys.run, ids)], [T0, 30_000, T0, 0, len(ids), 0, *ids]) for ids in (big, small)]
    replies = await batched(store.redis, store.runs.scripts.claims, calls)
    claimed = [[_s(x) for x in reply[0][::4]] for reply in replies]
    assert claimed == [[big[-2], big[-1]], [small[-1]]]
