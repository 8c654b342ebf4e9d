"""Moving a store that hookbridge 2 wrote to today's key layout: `hookbridge migrate-keys`.

hookbridge 2 named its keys ``hb:<name>``; every key now carries a hash tag, so that every script runs
on a Redis Cluster: the store's, ``hb:{hb}:<name>`` (``keys.PREFIX``, stage one of the virtual shards in
docs/shards.md), or, for a vendor's budget and pause, the vendor's own (``hb:{v:<vendor>}:budget``,
``:pause``). An earlier hookbridge 3 kept those two under the store's tag; they are moved too. Where
they are not (a cluster, where this does not run) they only expire: the vendor's budget starts afresh
(one burst at most) and a pause in force is forgotten (the vendor's next 429 pauses it again). The
values and the expiries are unchanged,
so the move is a ``RENAMENX`` per key (which keeps its TTL): on one Redis or Sentinel only (hookbridge 2
never ran on a cluster), with every hookbridge 2 process stopped first (a process still writing would
write untagged keys after they were moved). It can be run again: a key moved already is not seen, and a
tagged key that exists already is never overwritten (counted as ``kept``, its untagged twin left for an
operator to look at). At most ``batch`` keys are held at once."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from service.store import keys
from service.store.codec import text


def tagged(name: str) -> str | None:
    """The key of today's layout for the hookbridge 2 key ``name`` (a vendor's budget or pause under the
    vendor's own tag, every other key under the store's), or for a vendor's budget or pause under the
    store's tag, as an earlier hookbridge 3 named them; None for any other key."""
    if not name.startswith(keys.ROOT):
        return None
    store_tagged = name.startswith(keys.PREFIX)
    if name.startswith(keys.ROOT + "{") and not store_tagged:
        return None  # under a shard's or a vendor's tag: today's already
    rest = name.removeprefix(keys.PREFIX if store_tagged else keys.ROOT)
    kind, _, vendor = rest.partition(":")
    if kind in ("budget", "pause") and vendor and not vendor.startswith("sub:"):
        return keys.vendor_budget(vendor) if kind == "budget" else keys.vendor_pause(vendor)
    return None if store_tagged else keys.PREFIX + rest


async def move_untagged_keys(redis: Redis, *, batch: int = 500) -> dict[str, int]:
    """Renames every hookbridge 2 key to its tagged name; returns how many were ``moved``, ``kept`` (the
    tagged one existed) and ``expired`` (between the scan and the rename)."""
    counts = {"moved": 0, "kept": 0, "expired": 0}
    names: list[tuple[str, str]] = []

    async def flush() -> None:
        pipe = redis.pipeline(transaction=False)
        for name, new in names:
            pipe.renamenx(name, new)
        for done in await pipe.execute(raise_on_error=False):
            if isinstance(done, ResponseError) and "no such key" in str(done).lower():
                counts["expired"] += 1  # between the scan and its rename
            elif isinstance(done, Exception):
                raise done  # anything else (a lost connection, a refused command) ends the move: re-run it
            else:  # RENAMENX: False when the tagged key exists already
                counts["moved" if done else "kept"] += 1
        names.clear()

    async for raw in redis.scan_iter(match=f"{keys.ROOT}*", count=batch):
        name = text(raw)
        if (new := tagged(name)) is not None:
            names.append((name, new))
            if len(names) >= batch:
                await flush()
    if names:
        await flush()
    return counts
