"""The vendor pause in Redis, step by step with explicit clocks (pause.lua and claim_runs.lua): every
claim holds while paused, then exactly one run goes out as the probe; its answer ends the pause or, if
429 again, extends it; a probe that never answers is handed to another run after its lease."""

from __future__ import annotations

import itertools
import time

from service.core.records import Run
from service.store import Store, connect, keys
from service.vendors.registry import load_settings
from tests.conftest import base_env

T0 = 1_800_000_000_000
LEASE, PROBE_LEASE = 10_000, 5_000
# The runs' ids, all in one shard: a claim over several shards takes them shard by shard, and these tests
# are about the order the pause lets them out in, which is the due order within a shard.
IDS = [keys.in_shard(lambda k, i=i: f"run_{i:02d}" + (f"_{k}" if k else ""), 0) for i in range(5)]


def _run(run_id: str) -> str:
    return Run(
        id=run_id,
        client="alice",
        vendor="nutrient",
        operation="parse",
        created_at=T0,
        updated_at=T0,
        status="submitted",
        version=1,
    ).to_json()


async def _store(redis_url: str, runs: int) -> Store:
    settings = load_settings(base_env(redis_url))
    store = Store(connect(settings), settings)
    for i in range(runs):
        run_id = IDS[i]
        await store.redis.set(keys.run(run_id), _run(run_id))
        await store.redis.zadd(keys.due_runs("nutrient", keys.shard_of(run_id)), {run_id: T0 - 1000 + i})
    return store


async def _claim(store: Store, now: int, limit: int = 10) -> tuple[list[str], str | None]:
    claimed, _ = await store.runs.claim_runs("nutrient", now, limit, LEASE, 0.0, 1000, PROBE_LEASE)
    probes = {c.probe for c in claimed}
    assert len(probes) == 1 or not claimed
    return [c.run.id for c in claimed], claimed[0].probe if claimed else None


async def test_a_429_holds_every_claim_then_lets_one_probe_out(redis_url: str) -> None:
    store = await _store(redis_url, runs=5)
    try:
        ids, probe = await _claim(store, T0, limit=2)
        assert ids == [IDS[0], IDS[1]] and probe is None  # not paused: a normal batch
        until, streak = await store.limits.pause_limited("nutrient", T0, 3000, 2000, 60_000, None)
        assert (until, streak) == (T0 + 3000, 1)
        # The other run that was in flight also got its 429: same pause, same streak.
        assert await store.limits.pause_limited("nutrient", T0 + 10, 3000, 2000, 60_000, None) == (
            T0 + 3010,
            1,
        )

        assert await _claim(store, T0 + 3000) == ([], None)  # held, although three runs are due
        ids, probe = await _claim(store, T0 + 3011)
        assert ids == [IDS[2]] and probe  # one probe, not the backlog
        assert await _claim(store, T0 + 3020) == ([], None)  # nothing more while it is out

        # The probe is refused again: the pause grows without a header (floor 2 s, doubled).
        until, streak = await store.limits.pause_limited("nutrient", T0 + 3030, None, 2000, 60_000, probe)
        assert (until, streak) == (T0 + 3030 + 4000, 2)
        assert await _claim(store, T0 + 5000) == ([], None)
        ids, probe = await _claim(store, T0 + 7030)
        assert ids == [IDS[3]] and probe

        # It is answered: the pause is over and the backlog goes.
        assert await store.limits.pause_settle("nutrient", T0 + 7040, probe, answered=True)
        assert not await store.redis.exists(keys.vendor_pause("nutrient"))
        ids, probe = await _claim(store, T0 + 7050)
        assert ids == [IDS[4]] and probe is None
    finally:
        await store.close()


async def test_a_probe_that_never_answers_is_handed_to_another_run(redis_url: str) -> None:
    store = await _store(redis_url, runs=3)
    try:
        await store.limits.pause_limited("nutrient", T0, 1000, 1000, 60_000, None)
        ids, probe = await _claim(store, T0 + 1000)
        assert ids == [IDS[0]] and probe
        # A stale token (another probe's) changes nothing.
        assert not await store.limits.pause_settle("nutrient", T0 + 1100, "run_99@1", answered=True)
        assert await _claim(store, T0 + 1000 + PROBE_LEASE - 1) == ([], None)
        ids, second = await _claim(store, T0 + 1000 + PROBE_LEASE + 1)  # its worker died: lease ran out
        assert ids == [IDS[1]] and second and second != probe
        # The second probe got no answer (a dropped connection): a third may go at once.
        assert await store.limits.pause_settle("nutrient", T0 + 6100, second, answered=False)
        ids, third = await _claim(store, T0 + 6101)
        assert ids == [IDS[2]] and third
    finally:
        await store.close()


async def test_retry_after_is_kept_between_the_floor_and_the_cap(redis_url: str) -> None:
    store = await _store(redis_url, runs=0)
    try:
        # Retry-After: 0 is never shorter than the vendor's minimum interval ...
        assert await store.limits.pause_limited("nutrient", T0, 0, 2000, 60_000, None) == (T0 + 2000, 1)
        await store.redis.delete(keys.vendor_pause("nutrient"))
        # ... and a day-long one is cut to PAUSE_MAX_S, after which a probe finds out.
        assert await store.limits.pause_limited("nutrient", T0, 86_400_000, 2000, 60_000, None) == (
            T0 + 60_000,
            1,
        )
        ttl = await store.redis.pttl(keys.vendor_pause("nutrient"))
        assert 0 < ttl  # a pause nobody resolves does not stay forever
    finally:
        await store.close()


async def test_a_probe_step_that_sends_nothing_hands_the_probe_back(redis_url: str) -> None:
    """A probe whose step makes no vendor request (a run that ended meanwhile, a document gone) must not
    hold the vendor until the probe's lease runs out: the pump hands the probe back when the step ends."""
    from service.store import ClaimedRun
    from service.worker.pumps import RunPump

    store = await _store(redis_url, runs=0)
    try:
        now = int(time.time() * 1000)
        for run_id in ("run_a", "run_b"):
            await store.redis.set(keys.run(run_id), _run(run_id))
            await store.redis.zadd(keys.due_runs("nutrient", keys.shard_of(run_id)), {run_id: now - 5000})
        await store.limits.pause_limited(
            "nutrient", now - 3000, 1000, 1000, 60_000, None
        )  # over: a probe may go
        probes: list[str | None] = []

        async def step(claimed: ClaimedRun) -> None:
            probes.append(claimed.probe)  # and sends nothing to the vendor

        pump = RunPump(store, store.settings, step, ["nutrient"], {})
        work, _ = await pump.claim(10)
        assert len(work) == 1  # the probe alone
        await work[0]
        assert probes[0]
        work, _ = await pump.claim(10)  # at once, not after the probe's lease
        assert len(work) == 1
        await work[0]
        assert probes[1] and probes[1] != probes[0]
    finally:
        await store.close()


async def test_a_kind_group_spends_its_own_gcra_key(redis_url: str) -> None:
    """``VendorSpec.budgets``: a group's requests take slots from the group's own key in Redis (Azure's
    reads at their own rate), leaving the vendor's shared budget untouched."""
    from service.core.clock import ManualClock
    from service.worker.budget import GroupBudget, StoreBudget

    store = await _store(redis_url, runs=0)
    try:
        vendor = store.settings.vendor("nutrient")
        clock = ManualClock(T0 / 1000)
        shared = StoreBudget(store.limits, vendor, clock)
        reads = GroupBudget(store.limits, vendor, "poll", 1000.0, shared, clock)  # a slot every millisecond
        for _ in range(5):
            await reads.acquire(None)  # no wait: the slots are at the clock's now, 1 ms apart
        # The group's GCRA has moved 5 ms ahead of the clock; the vendor's own key has not been touched.
        assert await store.limits.budget_take("nutrient.poll", T0, 1.0) >= T0 + 5
        assert await store.limits.budget_take("nutrient", T0, 1.0) == T0
    finally:
        await store.close()


async def test_a_stall_past_several_slots_does_not_send_them_together(redis_url: str) -> None:
    """Slots from the store's budget (5 per second), the claim's prepaid one and then one per request,
    while the worker's loop stalls past all of them: they go out paced, not at once (``worker/budget.py``:
    ``paced``)."""
    from service.core.clock import ManualClock
    from service.worker.budget import StepTicket, StoreBudget

    settings = load_settings(base_env(redis_url, HOOKBRIDGE_NUTRIENT_MAX_RPS="5"))
    store = Store(connect(settings), settings)
    try:
        clock = ManualClock(T0 / 1000)

        async def sleep(seconds: float) -> None:
            clock.advance(seconds)

        budget = StoreBudget(store.limits, settings.vendor("nutrient"), clock, sleep=sleep)
        steps = [StepTicket("nutrient", prepaid=(T0 + i * 200.0, T0 + i * 200.0)) for i in range(3)]
        clock.advance(2.0)  # the loop stalls past the three prepaid slots
        sent = []
        for step in steps:  # each step's first request, then one more each from the store's budget
            await budget.acquire(step)
            sent.append(clock.time())
        for step in steps:
            await budget.acquire(step)
            sent.append(clock.time())
        gaps = [b - a for a, b in itertools.pairwise(sent)]
        assert min(gaps) >= 0.1 - 1e-3
        assert min(sent[i + 5] - sent[i] for i in range(len(sent) - 5)) >= 0.9 - 1e-3
        assert sent[0] == T0 / 1000 + 2.0
    finally:
        await store.close()
