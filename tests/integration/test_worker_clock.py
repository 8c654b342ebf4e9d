"""The worker's burst mode on a clock the test moves (``make_clocked``): leases, poll schedules and the
sweeper, asserted at exact instants instead of waited for."""

from __future__ import annotations

import httpx
from redis.exceptions import ConnectionError as RedisConnectionError

from service.store import keys
from service.store.runs import RELAY_GRACE_MS
from service.worker.runtime import WorkerRuntime
from tests.conftest import Clocked, ClockedFactory, Receiver


async def _status(c: Clocked, run_id: str) -> str:
    return str((await c.stack.api.get(f"/v1/runs/{run_id}")).json()["status"])


async def test_a_step_lost_with_its_worker_comes_back_when_its_lease_ends(
    make_clocked: ClockedFactory,
) -> None:
    c = await make_clocked(HOOKBRIDGE_LEASE_S="30")
    run = await c.stack.submit("nutrient")
    await c.step()  # nothing is claimed: the clock catches up with the API's time, and the run is submitted
    assert await _status(c, run["id"]) == "submitted"
    c.clock.advance(5)
    # A worker claims the run's next step (as its pump does) and dies before it takes it.
    claimed, _ = await c.worker.store.runs.claim_runs("nutrient", c.now_ms(), 10, 30_000, 0.0, 0)
    assert [cl.run.id for cl in claimed] == [run["id"]]
    lease_end = await c.worker.store.redis.zscore(
        keys.due_runs("nutrient", keys.shard_of(run["id"])), run["id"]
    )
    assert lease_end == c.now_ms() + 30_000
    other = WorkerRuntime(c.stack.settings, clock=c.clock)
    try:
        assert await other.step_until_idle() == 0  # leased: no other worker takes it
        c.clock.advance(29.999)
        assert await other.step_until_idle() == 0
        c.clock.advance(0.001)
        assert await other.step_until_idle() >= 1  # the lease ended: the step is due again, and taken
        assert await _status(c, run["id"]) in ("running", "succeeded")
    finally:
        await other.close()


async def test_polls_follow_the_vendor_policy_on_the_clock(make_clocked: ClockedFactory) -> None:
    # POLL_INITIAL_S 2 s, growing by the multiplier to POLL_MAX_S 8 s, 0 to 15 % jitter (up, or down where
    # up would pass POLL_MAX_S: the documented interval holds with the jitter); a run of 60 s.
    c = await make_clocked(
        HOOKBRIDGE_NUTRIENT_POLL_INITIAL_S="2",
        HOOKBRIDGE_NUTRIENT_POLL_MAX_S="8",
        HOOKBRIDGE_NUTRIENT_POLL_MULTIPLIER="2",
    )
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        assert (await sim.patch("/_sim/config", json={"duration_s": [60, 60]})).status_code == 200
    run = await c.stack.submit("nutrient")
    await c.step()
    due: list[float] = []
    while await _status(c, run["id"]) not in ("succeeded", "failed"):
        score = await c.worker.store.redis.zscore(
            keys.due_runs("nutrient", keys.shard_of(run["id"])), run["id"]
        )
        assert score is not None
        due.append((score - c.now_ms()) / 1000)
        c.clock.advance(due[-1])
        await c.step()
    planned = [2.0, 4.0, 8.0]
    for wait, base in zip(due, planned + [8.0] * len(due), strict=False):
        up = base <= wait <= base * 1.15 + 0.001
        down = base * 0.85 - 0.001 <= wait <= base
        assert wait <= 8.0 + 0.001 and (up or down), due
    polls = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()["polls"]
    assert polls == len(due) and 60 / 8 <= polls <= 60 / 6.8 + 3


async def test_the_sweeper_reschedules_a_run_whose_due_entry_was_lost(clocked: Clocked) -> None:
    c = clocked
    run = await c.stack.submit("nutrient")
    await c.step()
    due = keys.due_runs("nutrient", keys.shard_of(run["id"]))
    await c.worker.store.redis.zrem(due, run["id"])  # lost: a restore, a hand edit
    assert await c.advance(60) == 0  # a minute later, nothing knows of it
    assert await c.worker.sweep() == {"runs": 1, "deliveries": 0, "relayed": 0}
    await c.step()
    assert await _status(c, run["id"]) in ("running", "succeeded")


async def test_the_sweeper_relays_the_events_of_a_worker_that_died_before_its_relay(
    clocked: Clocked, receiver: Receiver
) -> None:
    c = clocked
    await c.stack.subscribe(receiver.url)
    run = await c.stack.submit("nutrient")
    relay = c.worker.durable.runs.scripts.fanout_deliveries

    async def died(*args: object, **kwargs: object) -> object:
        # The worker's process dies between its transition and the relay: no simulator can do that to
        # it, so the relay's call is made to fail (the one mock of this file), then given back.
        raise RedisConnectionError("the worker died here")

    c.worker.durable.runs.scripts.fanout_deliveries = died  # type: ignore[assignment]
    while await _status(c, run["id"]) != "succeeded":
        await c.advance(10)
    assert receiver.events("run.succeeded") == []
    assert await c.worker.store.redis.zscore(keys.outbox(keys.shard_of(run["id"])), run["id"]) is not None
    c.worker.durable.runs.scripts.fanout_deliveries = relay
    c.clock.advance(RELAY_GRACE_MS / 1000)
    assert (await c.worker.sweep())["relayed"] == 1
    await c.step()  # the deliveries the relay made due, sent
    assert [e["data"]["run"]["id"] for e in receiver.events("run.succeeded")] == [run["id"]]
    assert (await c.worker.sweep())["relayed"] == 0
