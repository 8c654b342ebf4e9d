"""The store's upkeep, off the hot path: workers' heartbeats, the sweeper's repair, the purge of expired
listing entries, and the gauges' samples (``observe``, ``due_counts``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis.asyncio import Redis

from service.config.settings import Settings
from service.core.domain import DeliveryStatus
from service.core.records import DELIVERY_HASH, DELIVERY_HASH_INTERNAL
from service.store import keys
from service.store.base import Part, each_call
from service.store.codec import text
from service.store.scripts import Scripts
from service.store.subscriptions import OWNER_DISABLED

# A walk's check of a page of ids (redis, scripts, ids, now_ms, vendors): how many it scheduled.
_Fix = Callable[[Redis, Scripts, list[str], int, Sequence[str]], Awaitable[int]]


async def repair(redis: Redis, scripts: Scripts, now_ms: int, vendors: Sequence[str]) -> dict[str, int]:
    """The sweeper: every unfinished run (of one of ``vendors``) and every pending delivery that should
    be due has a place in its due set. The scripts keep that true; this catches what they cannot (a due
    set lost or edited by hand, a Redis restored from an older snapshot). It walks the sets of unfinished
    work, so a pass costs what is in flight, not the history kept for retention. Idempotent: ``ZADD NX``
    never moves work that is already scheduled or leased."""
    counts = {"runs": 0, "deliveries": 0}
    # The vendors with runs in each shard's due sets: only theirs are asked where a run is (an empty set
    # holds none; a run added to one after this read is found in none, and its script sees it placed).
    pipe = redis.pipeline(transaction=False)
    for shard in range(keys.SHARDS):
        for vendor in vendors:
            pipe.zcard(keys.due_runs(vendor, shard))
    sizes = iter(await pipe.execute() if vendors else [])
    holding = {shard: [v for v in vendors if next(sizes)] for shard in range(keys.SHARDS)}
    runs: _Fix = partial(_repair_runs, holding=holding)
    walks: list[tuple[str, str, _Fix]] = [
        ("runs", keys.active_runs(shard), runs) for shard in range(keys.SHARDS)
    ]
    walks += [
        ("deliveries", keys.active_deliveries(shard), _repair_deliveries) for shard in range(keys.SHARDS)
    ]
    for count, active, fix in walks:
        batch: list[str] = []
        async for raw in redis.sscan_iter(active, count=500):
            batch.append(text(raw))
            if len(batch) >= 500:
                counts[count] += await fix(redis, scripts, batch, now_ms, vendors)
                batch = []
        if batch:
            counts[count] += await fix(redis, scripts, batch, now_ms, vendors)
    return counts


async def _repair_runs(
    redis: Redis,
    scripts: Scripts,
    ids: list[str],
    now_ms: int,
    vendors: Sequence[str],
    holding: Mapping[int, Sequence[str]] | None = None,
) -> int:
    """repair.lua per run that has no place in a due set, given every vendor's due set of its shard: the
    script picks the run's own (the record is not read first).

    A run in flight sits in its vendor's due set from its creation to its end (``create_run.lua`` adds
    it to both sets, ``transition.lua`` takes it out of both at once), so what the sweeper is for is the
    run that has none. One ``ZMSCORE`` per vendor asks the page's runs (its ids are one shard's) where a
    script per run read and decoded every record: at 100,000 runs in flight that was 100,000 calls each
    ``SWEEP_INTERVAL_S``, a tenth of the worker's CPU; the script still decides, atomically, for those
    left (a run found in no due set, then added, ended or dropped meanwhile is checked again there).
    ``holding`` names, per shard, the vendors whose due set there held runs at the pass's start: only
    those are asked (the others' sets were empty); without it, every vendor's."""
    by_shard: dict[int, list[str]] = {}
    for run_id in ids:  # one shard's, but for an id put in another's set by hand
        by_shard.setdefault(keys.shard_of(run_id), []).append(run_id)
    pipe = redis.pipeline(transaction=False)
    asked: list[list[str]] = []
    for shard, members in by_shard.items():
        for vendor in vendors if holding is None else holding.get(shard, vendors):
            pipe.zmscore(keys.due_runs(vendor, shard), members)
            asked.append(members)
    placed: set[str] = set()
    for members, scores in zip(asked, await pipe.execute() if asked else [], strict=True):
        placed.update(run_id for run_id, score in zip(members, scores, strict=True) if score is not None)
    calls = []
    for run_id in ids:
        if run_id in placed:
            continue
        shard = keys.shard_of(run_id)
        due_sets = [keys.due_runs(v, shard) for v in vendors]
        calls.append(
            ([keys.run(run_id), keys.active_runs(shard), *due_sets], ["run", now_ms, run_id, *vendors])
        )
    return sum(int(r) for r in await each_call(redis, scripts.repair, calls)) if calls else 0


_REPAIR_FIELDS = [
    *(DELIVERY_HASH[f] for f in ("status", "subscription_id", "run_id")),
    DELIVERY_HASH_INTERNAL["chained"],
]


async def _repair_deliveries(
    redis: Redis, scripts: Scripts, ids: list[str], now_ms: int, vendors: Sequence[str] = ()
) -> int:
    """repair.lua per delivery, given its chain and the chain's entries before it (read first)."""
    pipe = redis.pipeline(transaction=False)
    for dlv_id in ids:
        pipe.hmget(keys.delivery(dlv_id), _REPAIR_FIELDS)
    rows = [[text(v) for v in row] for row in await pipe.execute()]
    chained = [
        (dlv_id, sid, run_id)
        for dlv_id, (status, sid, run_id, in_chain) in zip(ids, rows, strict=True)
        if status == DeliveryStatus.PENDING and in_chain == "1"
    ]
    pipe = redis.pipeline(transaction=False)
    for _, sid, run_id in chained:
        pipe.lrange(keys.chain(sid, run_id), 0, -1)
    heads: dict[str, list[str]] = {}
    for (dlv_id, _, _), chain in zip(chained, await pipe.execute(), strict=True):
        members = [text(m) for m in chain]
        heads[dlv_id] = members[: members.index(dlv_id)] if dlv_id in members else members
    calls = []
    for dlv_id, (_, sid, run_id, _) in zip(ids, rows, strict=True):
        before = heads.get(dlv_id, [])
        dkey = keys.delivery(dlv_id)
        chain_key = keys.chain(sid, run_id) if dlv_id in heads else dkey
        shard = keys.shard_of(dlv_id)
        due, active = keys.due_deliveries(shard), keys.active_deliveries(shard)
        calls.append(
            (
                [dkey, chain_key, due, active, *map(keys.delivery, before)],
                ["delivery", now_ms, dlv_id, sid, run_id, *before],
            )
        )
    return sum(int(r) for r in await each_call(redis, scripts.repair, calls))


async def purge_indexes(redis: Redis, cutoff_ms: int) -> int:
    """Drops listing entries older than ``cutoff_ms`` whose records have expired.

    Only the listings of records that expire are walked (a client's runs, by creation and by metadata
    pair, a subscription's deliveries), found by the key builders' own patterns, so a subscription
    index can never match.
    An entry stays while its record lives: a run still in flight, a delivery still pending.

    A metadata value of its own per run (an order number) makes one index per run: they are read a SCAN
    page at a time (:func:`_purge_page`: three round trips for up to ``PURGE_PAGE`` indexes), never one
    round trip each, which at 100,000 runs in flight made every pass 100,000 round trips."""
    removed = 0
    for pattern, record in (
        (keys.RUN_LISTINGS, keys.run),
        (keys.DELIVERY_LOGS, keys.delivery),
        (keys.METADATA_LISTINGS, keys.run),
    ):
        page: list[str] = []
        async for index in redis.scan_iter(match=pattern, count=PURGE_PAGE):
            page.append(text(index))
            if len(page) >= PURGE_PAGE:
                removed += await _purge_page(redis, page, record, cutoff_ms)
                page = []
        if page:
            removed += await _purge_page(redis, page, record, cutoff_ms)
    return removed


# Indexes read in one round trip by the purge, and entries read at once from one index walked alone.
PURGE_PAGE = 500
# Entries read of each index of a page: most metadata indexes hold a few; one that holds more is walked
# on alone. A page's round trips carry at most PURGE_PAGE * PAGE_ENTRIES commands.
PAGE_ENTRIES = 10


async def _purge_page(redis: Redis, indexes: list[str], record: Callable[[str], str], cutoff: int) -> int:
    """The indexes' entries older than ``cutoff`` whose records are gone, dropped: one round trip reads up
    to ``PAGE_ENTRIES`` of the oldest of each index, one asks whether their records exist, one drops those
    that do not. An index with more than that is walked on alone (:func:`_purge_index`)."""
    pipe = redis.pipeline(transaction=False)
    for index in indexes:
        pipe.zrangebyscore(index, "-inf", cutoff, start=0, num=PAGE_ENTRIES)
    read = await pipe.execute()
    found = [(index, [text(r) for r in rows]) for index, rows in zip(indexes, read, strict=True) if rows]
    if not found:
        return 0
    expired = set(await _expired(redis, record, [item for _, ids in found for item in ids]))
    gone = [(index, ids, [item for item in ids if item in expired]) for index, ids in found]
    removed = 0
    if any(dropped for _, _, dropped in gone):
        # A record that expired never comes back (ids are never reused): no race to guard.
        pipe = redis.pipeline(transaction=False)
        for index, _, dropped in gone:
            if dropped:
                pipe.zrem(index, *dropped)
        removed = sum(int(n) for n in await pipe.execute())
    for index, ids, dropped in gone:
        if len(ids) == PAGE_ENTRIES:  # more past the cutoff: after the live ones this page kept
            removed += await _purge_index(redis, index, record, cutoff, start=len(ids) - len(dropped))
    return removed


async def _purge_index(
    redis: Redis, index: str, record: Callable[[str], str], cutoff: int, start: int = 0
) -> int:
    removed = 0
    while True:
        rows = await redis.zrangebyscore(index, "-inf", cutoff, start=start, num=PURGE_PAGE)
        if not rows:
            return removed
        gone = await _expired(redis, record, [text(r) for r in rows])
        if gone:
            removed += await redis.zrem(index, *gone)
        if len(rows) < PURGE_PAGE:
            return removed
        start += len(rows) - len(gone)


async def _expired(redis: Redis, record: Callable[[str], str], ids: list[str]) -> list[str]:
    """The ids whose records are gone (one round trip)."""
    pipe = redis.pipeline(transaction=False)
    for item in ids:
        pipe.exists(record(item))
    return [item for item, alive in zip(ids, await pipe.execute(), strict=True) if not alive]


@dataclass
class Observation:
    """A sample of the store for the worker's gauges (:func:`observe`)."""

    paused_until_ms: dict[str, float | None] = field(default_factory=dict)
    oldest_pending_s: dict[str, float] = field(default_factory=dict)
    disabled_subs: dict[tuple[str, str], int] = field(default_factory=dict)


async def observe(
    redis: Redis,
    settings: Settings,
    vendors: Sequence[str],
    clients: Sequence[str],
    now_ms: int,
    *,
    sample: int = 200,
    parked_sample: int = 20,
    batch: int = 250,
) -> Observation:
    """What the worker exports as gauges, at a bounded cost: each vendor's pause; per client the oldest
    pending delivery and the disabled subscriptions. The oldest pending delivery is a chain's head, so
    it is among the ``sample`` next due, the client's in-flight (at most CLIENT_MAX_IN_FLIGHT), or the
    ``parked_sample`` first parked ones of the client or of one of its subscriptions, unless more
    deliveries fall due before it (the gauge then reads low, never high). Subscriptions: at most
    MAX_SUBSCRIPTIONS_PER_CLIENT per client. The reads go in pipelines of ``batch`` commands, so the event
    loop is never held for long."""
    obs = Observation()
    pipe = redis.pipeline(transaction=False)
    for vendor in vendors:
        pipe.hget(keys.vendor_pause(vendor), "until")
    for shard in range(keys.SHARDS):
        pipe.zrange(keys.due_deliveries(shard), 0, sample // keys.SHARDS)
    for client in clients:
        pipe.zrange(keys.client_subs(client), 0, settings.max_subscriptions_per_client - 1)
    replies = await pipe.execute()
    for vendor, untl in zip(vendors, replies, strict=False):
        obs.paused_until_ms[vendor] = None if untl is None else float(untl)
    rest = replies[len(vendors) :]
    dlv_ids = {text(i) for due in rest[: keys.SHARDS] for i in due}
    sub_ids: list[tuple[str, str]] = []
    for client, subs in zip(clients, rest[keys.SHARDS :], strict=True):
        sub_ids.extend((client, text(s)) for s in subs)
    dlv_ids |= await _clients_deliveries(redis, settings, sub_ids, parked_sample, batch)
    for at in range(0, len(sub_ids), batch):  # each subscription's parked surplus (claim_deliveries.lua)
        pipe = redis.pipeline(transaction=False)
        for _, sub_id in sub_ids[at : at + batch]:
            pipe.zrange(keys.sub_parked(sub_id), 0, parked_sample - 1)
        for parked in await pipe.execute():
            dlv_ids.update(text(i) for i in parked)
    reads: list[tuple[str, list[str]]] = [
        (keys.delivery(d), [DELIVERY_HASH[n] for n in ("client", "created_at", "status")]) for d in dlv_ids
    ] + [(keys.subscription(sub_id), ["disabled", "disabled_reason"]) for _, sub_id in sub_ids]
    fields: list[list[Any]] = []
    for at in range(0, len(reads), batch):
        pipe = redis.pipeline(transaction=False)
        for key, names in reads[at : at + batch]:
            pipe.hmget(key, names)
        fields += await pipe.execute()
    for client_raw, created, status in fields[: len(dlv_ids)]:
        pending = text(status) == DeliveryStatus.PENDING
        if client_raw is None or created is None or not pending or not created.isdigit():
            continue
        client = text(client_raw)
        age = max(0.0, (now_ms - int(created)) / 1000)
        obs.oldest_pending_s[client] = max(obs.oldest_pending_s.get(client, 0.0), age)
    for (client, _), (disabled, reason) in zip(sub_ids, fields[len(dlv_ids) :], strict=False):
        if disabled is not None and text(disabled) == "1":
            kind = "auto" if reason and text(reason) != OWNER_DISABLED else "owner"
            obs.disabled_subs[(client, kind)] = obs.disabled_subs.get((client, kind), 0) + 1
    return obs


async def _clients_deliveries(
    redis: Redis, settings: Settings, sub_ids: Sequence[tuple[str, str]], parked_sample: int, batch: int
) -> set[str]:
    """The clients' deliveries in flight and the first ``parked_sample`` parked, in each shard that
    holds one of their subscriptions (``sub_ids``: client, subscription)."""
    out: set[str] = set()
    shards_of = sorted({(client, keys.shard_of(s)) for client, s in sub_ids})
    for at in range(0, len(shards_of), batch):
        pipe = redis.pipeline(transaction=False)
        for client, shard in shards_of[at : at + batch]:
            pipe.zrange(keys.client_inflight(client, shard), 0, settings.client_max_in_flight - 1)
            pipe.zrange(keys.client_parked(client, shard), 0, parked_sample - 1)
        for found in await pipe.execute():
            out.update(text(i) for i in found)
    return out


class Upkeep(Part):
    async def heartbeat(self, worker_id: str, payload: str, ttl_s: float) -> None:
        await self.redis.set(keys.worker(worker_id), payload, px=int(ttl_s * 1000))

    async def repair(self, now_ms: int) -> dict[str, int]:
        """The sweeper's pass (:func:`repair`)."""
        return await repair(self.redis, self.scripts, now_ms, list(self.settings.vendors))

    async def purge_indexes(self, now_ms: int) -> int:
        """Drops listing entries past retention whose records expired (:func:`purge_indexes`)."""
        return await purge_indexes(self.redis, now_ms - self.retention_ms)

    async def observe(self, vendors: Sequence[str], clients: Sequence[str], now_ms: int) -> Observation:
        """The worker's gauges, sampled at a bounded cost (:func:`observe`)."""
        return await observe(self.redis, self.settings, vendors, clients, now_ms)

    async def due_counts(self, vendors: Sequence[str], now_ms: int) -> dict[str, int]:
        """How many runs per vendor and deliveries are due now and unclaimed (the ready-jobs gauge)."""
        pipe = self.redis.pipeline(transaction=False)
        for vendor in vendors:
            for shard in range(keys.SHARDS):
                pipe.zcount(keys.due_runs(vendor, shard), "-inf", now_ms)
        for shard in range(keys.SHARDS):
            pipe.zcount(keys.due_deliveries(shard), "-inf", now_ms)
        counts = await pipe.execute()
        out = {v: sum(counts[n * keys.SHARDS : (n + 1) * keys.SHARDS]) for n, v in enumerate(vendors)}
        out["deliveries"] = sum(counts[-keys.SHARDS :])
        return out
