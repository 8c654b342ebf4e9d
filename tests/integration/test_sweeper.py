"""The sweeper puts back work that has no place in a due set, never acts on a stale read, and is
idempotent: run twice, it changes nothing the second time."""

from __future__ import annotations

from service.store import Store, connect
from service.store import keys as k
from service.store.fanout import delivery_id_in_shard
from tests.conftest import Receiver, StackFactory, eventually, store_client


async def test_lost_due_entries_are_rescheduled_and_runs_finish(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    api = await make_stack(worker=False)
    await api.subscribe(receiver.url, event_types=["run.*"])
    runs = [await api.submit("nutrient", filename=f"lost-{i}.pdf") for i in range(3)]
    raw = store_client(api.redis_url)
    store = Store(connect(api.settings), api.settings)
    try:
        due_sets = sorted({k.due_runs("nutrient", k.shard_of(run["id"])) for run in runs})
        for due in due_sets:  # as if the runs' due sets were lost
            assert await raw.delete(due) == 1
        assert await store.upkeep.repair(0) == {"runs": 3, "deliveries": 0}
        assert await store.upkeep.repair(0) == {"runs": 0, "deliveries": 0}  # idempotent
        assert sum([await raw.zcard(due) for due in due_sets]) == 3
    finally:
        await raw.aclose()
        await store.close()
    stack = await make_stack()
    for run in runs:
        await stack.wait_status(run["id"], "succeeded")
    await eventually(lambda: _ready(len(receiver.events("run.succeeded")) == 3), what="callbacks")


async def test_a_stale_chain_head_is_dropped_and_the_next_delivery_made_due(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack()
    sub = await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient")
    await stack.wait_status(run["id"], "succeeded")
    await eventually(lambda: _ready(receiver.events("run.succeeded")), what="callback")
    await stack.stop_worker()  # else it may claim the repaired delivery before the test reads the due set
    raw = store_client(stack.redis_url, decode_responses=True)
    store = Store(connect(stack.settings), stack.settings)
    try:
        [delivered] = await raw.zrange(k.sub_deliveries(sub["id"]), 0, -1)
        # A pending delivery stuck behind a head that has already succeeded (a hand edit, an old snapshot),
        # in its subscription's shard as every delivery is.
        stuck = delivery_id_in_shard("evt_stuck", sub["id"])
        shard = k.shard_of(stuck)
        await raw.hset(
            k.delivery(stuck),
            mapping={
                "id": stuck,
                "status": "pending",
                "chained": "1",
                "sub": sub["id"],
                "run": run["id"],
            },
        )
        await raw.rpush(k.chain(sub["id"], run["id"]), delivered, stuck)
        await raw.sadd(k.active_deliveries(shard), stuck)
        assert (await store.upkeep.repair(0))["deliveries"] == 1
        assert await raw.lrange(k.chain(sub["id"], run["id"]), 0, -1) == [stuck]
        assert await raw.zscore(k.due_deliveries(shard), stuck) is not None
        assert (await store.upkeep.repair(0))["deliveries"] == 0

        async def finished_work_left_the_active_sets() -> bool:
            await store.upkeep.repair(0)
            return not await raw.sismember(k.active_deliveries(shard), delivered) and not await raw.sismember(
                k.active_runs(k.shard_of(run["id"])), run["id"]
            )

        await eventually(finished_work_left_the_active_sets, what="only unfinished work in the active sets")
    finally:
        await raw.aclose()
        await store.close()


async def _ready(value: object) -> object:
    return value
