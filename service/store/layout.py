"""Moving a store that an earlier hookbridge wrote to today's key layout: `hookbridge migrate-keys`.

hookbridge 2 named its keys ``hb:<name>``; an earlier hookbridge 3 put them all under one hash tag,
``hb:{hb}:<name>`` (stage one of the virtual shards, docs/shards.md). Today a run's keys, and those of the
events it emits, of an idempotency record, of a subscription, of a delivery and of a client (its listing,
feed, directory of subscriptions, rates), live in their shard (``keys.of``: ``hb:{<tag>}:``, found from the
id or the client's name alone), the indexes of runs and of deliveries (due sets, unfinished ones, outboxes,
a client's deliveries in flight and parked) are one per shard, a vendor's budget and pause have the vendor's
own tag (``hb:{v:<vendor>}:``), and the workers' heartbeats the store's (``keys.PREFIX``).
A key named by an id moves with a ``RENAMENX`` (which keeps its value and expiry); an index of runs is split
by member into its shards' (scores and expiry kept), then dropped. A delivery made before its id was minted in
its subscription's shard moves to its own id's shard: on one Redis a script may touch keys of several shards,
so it is claimed and ended as before; a cluster does not allow that, so there the move refuses to start while
such a delivery is pending (``PendingDeliveries``: the earlier workers deliver them first).

On one Redis, Sentinel or a cluster (where a key cannot be renamed into another slot: it is copied, DUMP and
RESTORE with its expiry, then dropped), with every earlier process stopped first (one still writing would
write keys of its own layout after they were moved). It can be run again: a key moved already is not seen, and
a key of today's layout that exists already is never overwritten (counted as ``kept``, its old twin left for
an operator to look at). At most ``batch`` keys are held at once."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import ResponseError

from service.core import trail
from service.core.records import DELIVERY_HASH, DELIVERY_HASH_INTERNAL, Attempt, Run, replace
from service.store import bodies, fanout, feedform, keys
from service.store.codec import text

# The indexes that are one per shard today: (name after the prefix, builder of a shard's).
_SPLIT: dict[str, Callable[[int], str]] = {
    "active:runs": keys.active_runs,
    "outbox": keys.outbox,
    "due:deliveries": keys.due_deliveries,
    "active:deliveries": keys.active_deliveries,
}


def _split_index(rest: str) -> Callable[[int], str] | None:
    if rest.startswith("due:runs:"):
        vendor = rest.removeprefix("due:runs:")
        return lambda shard: keys.due_runs(vendor, shard)
    if rest.startswith("dlvclient:") and rest.endswith((":inflight", ":parked")):
        client, _, kind = rest.removeprefix("dlvclient:").rpartition(":")
        if kind == "inflight":
            return lambda shard: keys.client_inflight(client, shard)
        return lambda shard: keys.client_parked(client, shard)
    return _SPLIT.get(rest)


def _by_id(rest: str) -> str | None:
    """Today's key for a key named by a run's, an event's, a subscription's, a delivery's, an idempotency
    record's id or a client's name (``rest``: its name after the prefix), or None for any other."""
    kind, _, tail = rest.partition(":")
    if kind in ("run", "doc", "result", "sub", "dlv", "chain", "evt") and tail:
        # The id is the first name after the kind: a run's, a subscription's (its chains too), a
        # delivery's, an event's (its pending count too).
        return keys.of(tail.partition(":")[0]) + rest
    if kind == "idem" and tail:
        return keys.of(tail) + rest
    if kind == "client" and tail:  # a client's (its listing, feed, directory, ...): in the client's shard
        return keys.of(tail.partition(":")[0]) + rest
    if kind == "rate" and (client := tail.partition(":")[2]):  # rate:<name>:<client>
        return keys.of(client) + rest
    if rest.startswith("budget:sub:") and (sub_id := rest.removeprefix("budget:sub:")):
        return keys.of(sub_id) + rest
    return None


def tagged(name: str) -> str | None:
    """The key of today's layout for the key ``name`` of an earlier one (hookbridge 2's untagged, or an
    earlier hookbridge 3's under the store's tag); None for any other key, and for an index of runs
    (:func:`split` names its shards')."""
    if not name.startswith(keys.ROOT):
        return None
    store_tagged = name.startswith(keys.PREFIX)
    if name.startswith(keys.ROOT + "{") and not store_tagged:
        return None  # under a shard's or a vendor's tag: today's already
    rest = name.removeprefix(keys.PREFIX if store_tagged else keys.ROOT)
    if _split_index(rest) is not None:
        return None
    kind, _, vendor = rest.partition(":")
    if kind in ("budget", "pause") and vendor and not vendor.startswith("sub:"):
        return keys.vendor_budget(vendor) if kind == "budget" else keys.vendor_pause(vendor)
    if (by_id := _by_id(rest)) is not None:
        return by_id
    return None if store_tagged else keys.PREFIX + rest


def split(name: str) -> Callable[[int], str] | None:
    """For an index of runs of an earlier layout (a vendor's due set, the unfinished runs, the outboxes),
    the builder of its shards' today; None for any other key."""
    if not name.startswith(keys.ROOT) or (
        name.startswith(keys.ROOT + "{") and not name.startswith(keys.PREFIX)
    ):
        return None
    return _split_index(name.removeprefix(keys.PREFIX if name.startswith(keys.PREFIX) else keys.ROOT))


class PendingDeliveries(RuntimeError):
    """On a cluster: deliveries of the earlier layout are still pending (their ids were not minted in
    their subscriptions' shards, so no script of today's could claim one there)."""


async def move_untagged_keys(redis: Redis, *, batch: int = 500) -> dict[str, int]:
    """Moves every key of an earlier layout to today's; returns how many were ``moved``, ``kept`` (today's
    existed), ``expired`` (between the scan and the rename) and ``split`` (indexes spread over their
    shards). On a cluster, raises :class:`PendingDeliveries` first, moving nothing, while the earlier
    layout has a pending delivery."""
    if isinstance(redis, RedisCluster):
        await _refuse_pending(redis)
    counts = {"moved": 0, "kept": 0, "expired": 0, "split": 0}
    names: list[tuple[str, str]] = []
    indexes: list[tuple[str, Callable[[int], str]]] = []

    async def flush() -> None:
        if isinstance(redis, RedisCluster):
            await _copy(redis, names, counts)
            names.clear()
            return
        pipe = redis.pipeline(transaction=False)
        for name, new in names:
            pipe.renamenx(name, new)
        for done in await pipe.execute(raise_on_error=False):
            if isinstance(done, ResponseError) and "no such key" in str(done).lower():
                counts["expired"] += 1  # between the scan and its rename
            elif isinstance(done, Exception):
                raise done  # anything else (a lost connection, a refused command) ends the move: re-run it
            else:  # RENAMENX: False when today's key exists already
                counts["moved" if done else "kept"] += 1
        names.clear()

    async for raw in redis.scan_iter(match=f"{keys.ROOT}*", count=batch):
        name = text(raw)
        if (shard_key := split(name)) is not None:
            indexes.append((name, shard_key))
        elif (new := tagged(name)) is not None:
            names.append((name, new))
            if len(names) >= batch:
                await flush()
    if names:
        await flush()
    for name, shard_key in indexes:
        await _split(redis, name, shard_key, batch)
        counts["split"] += 1
    if isinstance(redis, RedisCluster):
        counts["rehomed"] = await _rehome_deliveries(redis)
    return counts


async def _refuse_pending(redis: RedisCluster) -> None:
    pending = 0
    for old in (keys.ROOT, keys.PREFIX):
        pending += int(await redis.scard(old + "active:deliveries"))  # type: ignore[misc]
    if pending:
        raise PendingDeliveries(f"{pending} deliveries of the earlier layout are pending")


_REHOME_FIELDS = [DELIVERY_HASH[f] for f in ("subscription_id", "event_id", "run_id")]


async def _rehome_deliveries(redis: RedisCluster) -> int:
    """On a cluster, every delivery made before its id was minted in its subscription's shard (all of
    them ended: :class:`PendingDeliveries`) gets today's id, the one in that shard
    (``fanout.delivery_id_in_shard``), so that a resend (``retry_delivery.lua``) is one slot: its hash
    (with its expiry) and attempts copied under it, its entries in the subscription's log and the run's
    index renamed (scores kept), the old keys dropped. Returns how many."""
    done = 0
    async for raw in redis.scan_iter(match=f"{keys.ANY_SHARD}dlv:*", count=500, _type="HASH"):
        name = text(raw)
        dlv_id = name.rpartition(":")[2]
        sid, evt, run_id = (
            text(v or b"")
            for v in await redis.hmget(name, _REHOME_FIELDS)  # type: ignore[misc]
        )
        if not sid or not evt or keys.shard_of(dlv_id) == keys.shard_of(sid):
            continue
        new = fanout.delivery_id_in_shard(evt, sid)
        old_keys = [name, keys.delivery_attempts(dlv_id)]
        if not await redis.exists(keys.delivery(new)):
            for old, target in zip(old_keys, [keys.delivery(new), keys.delivery_attempts(new)], strict=True):
                value, ttl = await redis.dump(old), int(await redis.pttl(old))
                if value is not None and ttl != -2:
                    await redis.restore(target, max(ttl, 0), value)
            await redis.hset(keys.delivery(new), DELIVERY_HASH["id"], new)  # type: ignore[misc]
        for index in [keys.sub_deliveries(sid)] + ([keys.run_deliveries(run_id)] if run_id else []):
            score = await redis.zscore(index, dlv_id)
            if score is not None:
                await redis.zadd(index, {new: score})
                await redis.zrem(index, dlv_id)
        await redis.delete(*old_keys)
        done += 1
    return done


async def _copy(redis: RedisCluster, names: list[tuple[str, str]], counts: dict[str, int]) -> None:
    """On a cluster, where a key cannot be renamed into another slot: each key's value copied to its new
    name (``DUMP``, ``RESTORE`` with its expiry), then the old one dropped. Not atomic per key, so run with
    every earlier process stopped (as on one Redis); a run that stopped between a copy and its drop is
    finished by the next (a new key that holds the same value as the old is the copy: the old goes)."""
    pipe = redis.pipeline(transaction=False)
    for name, new in names:
        pipe.dump(name)
        pipe.pttl(name)
        pipe.dump(new)
    read = await pipe.execute()
    pipe = redis.pipeline(transaction=False)
    for n, (name, new) in enumerate(names):
        value, ttl, there = read[3 * n], int(read[3 * n + 1]), read[3 * n + 2]
        if value is None or ttl == -2:
            counts["expired"] += 1  # between the scan and the copy
            continue
        if there is None:
            pipe.restore(new, max(ttl, 0), value)
        elif there != value:
            counts["kept"] += 1  # today's exists with a value of its own: both stay for an operator
            continue
        pipe.delete(name)
        counts["moved"] += 1
    await pipe.execute()


async def _split(redis: Redis, name: str, shard_key: Callable[[int], str], batch: int) -> None:
    """Adds each member of the index ``name`` (a sorted set with its score, or a set) to its shard's,
    ``batch`` at a time, then drops it. Run again after a failure, it adds nothing twice."""
    kind = text(await redis.type(name))
    ttl = int(await redis.pttl(name))
    targets: set[str] = set()
    if kind == "zset":
        start = 0
        while rows := await redis.zrange(name, start, start + batch - 1, withscores=True):
            pipe = redis.pipeline(transaction=False)
            for member, score in rows:
                target = shard_key(keys.shard_of(text(member)))
                targets.add(target)
                pipe.zadd(target, {text(member): score})
            await pipe.execute()
            start += len(rows)
    elif kind == "set":
        members = [text(m) async for m in redis.sscan_iter(name, count=batch)]
        for at in range(0, len(members), batch):
            pipe = redis.pipeline(transaction=False)
            for member in members[at : at + batch]:
                target = shard_key(keys.shard_of(member))
                targets.add(target)
                pipe.sadd(target, member)
            await pipe.execute()
    else:
        return
    if ttl > 0:
        for target in targets:
            await redis.pexpire(target, ttl)
    await redis.delete(name)


async def spell_out_runs(redis: Redis, *, batch: int = 500) -> dict[str, int]:
    """Before a rollback across run records without their id or compact finished runs (docs/deploy.md):
    every run record rewritten in the form the versions before read (plain, its id written in it, its
    trail's kinds as words), its expiry kept.
    With every process of this version stopped (one still writing would write today's form again). Returns
    how many were ``rewritten``, ``kept`` (in that form already), ``expired`` (between the scan and the
    rewrite) and ``unreadable`` (left as they are). At most ``batch`` records are held at once. It can be
    run again."""
    counts = {"rewritten": 0, "kept": 0, "expired": 0, "unreadable": 0}
    names: list[str] = []

    async def flush() -> None:
        pipe = redis.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        olds = await pipe.execute()
        pipe = redis.pipeline(transaction=False)
        for name, raw in zip(names, olds, strict=True):
            if raw is None:
                counts["expired"] += 1
                continue
            try:
                run = Run.from_json(raw, name.rpartition(":run:")[2])
            except ValueError:
                counts["unreadable"] += 1
                continue
            spelled = replace(run, trail=[[e[0], trail.kind_of(e), *e[2:]] for e in run.trail])
            before = msgspec.json.encode(spelled)
            if before == (raw if isinstance(raw, bytes) else raw.encode()):
                counts["kept"] += 1
                continue
            pipe.set(name, before, keepttl=True, xx=True)  # XX: one that expired meanwhile stays gone
        for done in await pipe.execute():
            counts["rewritten" if done else "expired"] += 1
        names.clear()

    # A run's own key (hb:{s}:run:{id}) is its one string whose name has ":run:" (its lists and zsets are
    # hb:{s}:run:{id}:events, :outbox, :deliveries).
    async for raw_name in redis.scan_iter(match=f"{keys.ANY_SHARD}run:*", count=batch, _type="string"):
        names.append(text(raw_name))
        if len(names) >= batch:
            await flush()
    if names:
        await flush()
    return counts


async def spell_out_events(redis: Redis, *, batch: int = 500) -> dict[str, int]:
    """Before a rollback across short feed entries and bodies packed against their run's id
    (docs/deploy.md): what the versions before read, with every process of this version stopped (one still
    writing would write today's forms again).

    - Every client's feed is rewritten in the old form (``feedform.spelled_out``), each entry under its own
      id (every iterator a client holds still points where it did), the bodies it carries packed as ``~2``,
      the feed's expiry kept. It is copied into a key beside it in its slot, ``batch`` entries at a time,
      and renamed over the original: a reader sees the old feed or the new one whole.
    - Every body of a run's event packed against the run's id (``bodies.RUN_MARKS``) is packed as ``~2``:
      those the run's record names and its list of progress events name (under the events' own keys, their
      expiry kept), and those in its outbox (a relay that had not run).
    - Every delivery's first attempt that its hash keeps (``Attempt.short``) goes to the head of its
      attempt list, in the list's form, with the hash's expiry.

    Returns how many ``feeds`` were rewritten and ``feeds_kept`` (no entry of today's form), the
    ``entries`` rewritten, the ``bodies`` packed again and those ``unreadable`` (left as they are), and the
    ``attempts`` moved. It can be run again."""
    counts = {"feeds": 0, "feeds_kept": 0, "entries": 0, "bodies": 0, "unreadable": 0, "attempts": 0}
    feeds = [
        text(raw)
        async for raw in redis.scan_iter(match=f"{keys.ANY_SHARD}client:*:feed", count=batch, _type="stream")
    ]
    for feed in feeds:
        await _spell_out_feed(redis, feed, batch, counts)
    # A run's own key (hb:{s}:run:{id}) is its one string whose name has ":run:".
    async for raw_name in redis.scan_iter(match=f"{keys.ANY_SHARD}run:*", count=batch, _type="string"):
        await _spell_out_run_bodies(redis, text(raw_name).rpartition(":run:")[2], counts)
    first = DELIVERY_HASH_INTERNAL["first_attempt"]
    async for raw_name in redis.scan_iter(match=f"{keys.ANY_SHARD}dlv:*", count=batch, _type="hash"):
        delivery = text(raw_name)
        if (short := await redis.hget(delivery, first)) is None:  # type: ignore[misc]
            continue
        attempts = keys.delivery_attempts(delivery.rpartition(":dlv:")[2])
        # Its expiry as a time, not a TTL: a TTL read now and set a moment later would outlive the hash.
        expires_at = int(await redis.pexpiretime(delivery))  # type: ignore[misc]
        if expires_at == -2:  # expired since: a list pushed now would have no expiry
            continue
        pipe = redis.pipeline(transaction=True)  # in the delivery's slot: both keys carry its shard's tag
        pipe.lpush(attempts, Attempt.from_short(short).to_json())
        pipe.hdel(delivery, first)
        if expires_at > 0:
            pipe.pexpireat(attempts, expires_at)
        await pipe.execute()
        counts["attempts"] += 1
    return counts


def _repacked(stored: bytes, run_id: str, counts: dict[str, int]) -> bytes | None:
    """``stored`` packed as ``~2`` when it is packed against ``run_id`` (counted), else None (as it is)."""
    if not stored.startswith(bodies.RUN_MARKS):
        return None
    try:
        body = bodies.unpacked(stored, run_id)
    except ValueError:
        counts["unreadable"] += 1
        return None
    counts["bodies"] += 1
    return bodies.packed(body.decode())


async def _spell_out_feed(redis: Redis, feed: str, batch: int, counts: dict[str, int]) -> None:
    if not await _holds_todays_form(redis, feed, batch):
        counts["feeds_kept"] += 1  # read once, nothing written
        return
    copy = f"{feed}:spelling"  # in the feed's slot: the name carries its shard's tag
    await redis.delete(copy)  # what an interrupted run left
    after = "-"
    while rows := await redis.xrange(feed, after, "+", count=batch):
        pipe = redis.pipeline(transaction=False)
        for entry_id, fields in rows:
            spelled = feedform.spelled_out(fields)
            body = spelled.get("b")
            if isinstance(body, bytes) and (old := _repacked(body, str(spelled.get("r", "")), counts)):
                spelled["b"] = old
            pipe.xadd(copy, spelled, id=entry_id)  # type: ignore[arg-type]
        await pipe.execute()
        counts["entries"] += len(rows)
        after = "(" + text(rows[-1][0])
    ttl = await redis.pttl(feed)
    await redis.rename(copy, feed)
    if ttl > 0:
        await redis.pexpire(feed, ttl)
    counts["feeds"] += 1


async def _holds_todays_form(redis: Redis, feed: str, batch: int) -> bool:
    """Whether an entry of ``feed`` is of today's form (or carries a body packed against its run): read
    until the first one, so a feed that needs nothing is never copied."""
    after = "-"
    while rows := await redis.xrange(feed, after, "+", count=batch):
        for _, fields in rows:
            spelled = feedform.spelled_out(fields)
            body = spelled.get("b")
            if _encoded(spelled) != _encoded(fields) or (
                isinstance(body, bytes) and body.startswith(bodies.RUN_MARKS)
            ):
                return True
        after = "(" + text(rows[-1][0])
    return False


async def _spell_out_run_bodies(redis: Redis, run_id: str, counts: dict[str, int]) -> None:
    """The run's event bodies packed against its id, packed as ``~2``: in its outbox (a relay that had not
    run or not finished), and under the keys of the events its record, its progress list and its outbox
    name (their expiry kept; a relay stores a progress body under its key before it lists it)."""
    raw = await redis.get(keys.run(run_id))
    try:
        named = Run.from_json(raw, run_id).event_ids if raw is not None else []
    except ValueError:
        named = []
    listed = [text(i) for i in await redis.lrange(keys.run_events(run_id), 0, -1)]  # type: ignore[misc]
    outbox = keys.run_outbox(run_id)
    for at, item in enumerate(await redis.lrange(outbox, 0, -1)):  # type: ignore[misc]
        if (old := _repacked(item, run_id, counts)) is not None:
            await redis.lset(outbox, at, old)  # type: ignore[misc, arg-type]
        elif item[:1] == b"{":  # an entry's ops: its events
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                listed += [str(e["id"]) for e in json.loads(item)["events"]]
    for event_id in dict.fromkeys([*named, *listed]):
        stored = await redis.get(keys.event(event_id))
        if stored is not None and (old := _repacked(stored, run_id, counts)) is not None:
            await redis.set(keys.event(event_id), old, keepttl=True, xx=True)


def _encoded(fields: Mapping[Any, Any]) -> dict[str, bytes]:
    """An entry's fields as bytes, to compare one read from Redis with one to be written."""
    return {text(k): v if isinstance(v, bytes) else str(v).encode() for k, v in fields.items()}
