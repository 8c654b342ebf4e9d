"""The purge (``upkeep.purge_indexes``) on a real redis-server: it drops the listing entries past the cutoff
whose records are gone, keeps the rest, and reads many indexes a page at a time. A metadata value of
its own per run makes one index per run; the purge once made a round trip for each, 100,000 a pass
with 100,000 runs in flight, each pass one minute apart."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from service.store import keys, upkeep

CUTOFF = 1_800_000_000_000
OLD, YOUNG = CUTOFF - 1000, CUTOFF + 1000


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


async def _listed(redis: Redis, index: str, run_id: str, score: int, *, alive: bool) -> None:
    await redis.zadd(index, {run_id: score})
    if alive:
        await redis.set(keys.run(run_id), "{}")


async def _members(redis: Redis, index: str) -> set[str]:
    return {m.decode() for m in await redis.zrange(index, 0, -1)}


async def test_only_old_entries_of_gone_records_are_dropped(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 7: the long index below is walked on alone past its first 3, then 7 at a time.
    monkeypatch.setattr(upkeep, "PURGE_PAGE", 7)
    monkeypatch.setattr(upkeep, "PAGE_ENTRIES", 3)
    runs, meta, long = (
        keys.client_runs("alice"),
        keys.run_metadata("alice", "order", "A"),
        keys.run_metadata("alice", "batch", "B"),
    )
    rows = [  # (index, run id, score, record alive, kept)
        (runs, "run_old_gone", OLD, False, False),
        (runs, "run_old_alive", OLD, True, True),
        (runs, "run_young_gone", YOUNG, False, True),  # not walked: younger than the cutoff
        (meta, "run_old_gone", OLD, False, False),
        (meta, "run_young_alive", YOUNG, True, True),
    ]
    # 40 old entries, every third alive: past one page, with live ones in each.
    rows += [(long, f"run_l{i:02d}", OLD - i, i % 3 == 0, i % 3 == 0) for i in range(40)]
    for index, run_id, score, alive, _ in rows:
        await _listed(redis, index, run_id, score, alive=alive)

    removed = await upkeep.purge_indexes(redis, CUTOFF)

    for index in (runs, meta, long):
        assert await _members(redis, index) == {r for i, r, _, _, kept in rows if i == index and kept}, index
    assert removed == sum(1 for *_, kept in rows if not kept)
    assert await upkeep.purge_indexes(redis, CUTOFF) == 0  # nothing left to drop


async def test_a_thousand_indexes_cost_a_few_round_trips_not_one_each(redis: Redis) -> None:
    """1,200 metadata indexes (a value of its own per run, as an order number), each with a run in
    flight: nothing to drop, and the server reads a few dozen requests from the purge, where it read
    one per index and more (the read events of INFO stats: a round trip is at least one)."""
    pipe = redis.pipeline(transaction=False)
    for i in range(1200):
        pipe.zadd(keys.run_metadata("alice", "order", str(i)), {f"run_{i}": OLD})
        pipe.set(keys.run(f"run_{i}"), "{}")
    await pipe.execute()

    before = int((await redis.info("stats"))["total_reads_processed"])
    assert await upkeep.purge_indexes(redis, CUTOFF) == 0
    reads = int((await redis.info("stats"))["total_reads_processed"]) - before
    # Three SCAN patterns over ~2,400 keys (pages of 500) and three pipelines per page of 500 indexes.
    assert reads < 60, reads
