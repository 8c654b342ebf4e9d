"""Which of a vendor's 16 due sets a worker reads at a claim: what it knows of each shard's next due run,
so that a claim reads the shards with runs due and not all 16 every turn.

A worker learns a shard's next due time from every claim's reply there (``claim_runs.lua``) and from the
head it reads when nothing was due. Other processes change the sets meanwhile: an API's submit adds a
run due now, another worker claims. So every shard is read again once ``refresh_ms`` has passed since
the last time all were (``WORKER_IDLE_S``: an idle worker already waits that long before it looks
again), and in between only those this worker believes due. What that costs: a run submitted to a
shard this worker believed empty, or due later, waits at most ``refresh_ms`` longer than it would on one
due set, and an idle worker reads 16 heads per vendor per ``refresh_ms``: every vendor's in one call
(a vendor's look takes along those of the others that are half due: :meth:`DueShards.join_look`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from service.store import keys


def shards_to_read(
    next_due: Sequence[float | None], now_ms: float, refreshed_ms: float, refresh_ms: float
) -> list[int]:
    """The shards to read now: every one when the last full read is ``refresh_ms`` old (or never was),
    else those whose next due run (None: none known) is due."""
    if now_ms - refreshed_ms >= refresh_ms:
        return list(range(len(next_due)))
    return [s for s, due in enumerate(next_due) if due is not None and due <= now_ms]


@dataclass
class DueShards:
    """One vendor's due sets as this worker knows them (:func:`shards_to_read`)."""

    refresh_ms: float
    next_due: list[float | None] = field(default_factory=lambda: [None] * keys.SHARDS)
    refreshed_ms: float = float("-inf")
    # Per shard, the ids its last claim saw still due: the next claim's candidates there, not read again.
    ahead: dict[int, list[str]] = field(default_factory=dict)
    # The shards whose list in ``ahead`` is cut at the share the claim asked for: more may be due behind it.
    cut: set[int] = field(default_factory=set)

    def to_read(self, now_ms: float) -> list[int]:
        shards = shards_to_read(self.next_due, now_ms, self.refreshed_ms, self.refresh_ms)
        if len(shards) == len(self.next_due):
            self.refreshed_ms = now_ms
        return shards

    def left(self, shard: int, ids: list[str], share: int) -> None:
        """What a claim's reply in ``shard`` saw still due: at most ``share`` ids, so a list of that many
        may have more behind it."""
        if ids:
            self.ahead[shard] = ids
        else:
            self.ahead.pop(shard, None)
        if len(ids) >= share > 0:
            self.cut.add(shard)
        else:
            self.cut.discard(shard)

    def unclaimed(self, shard: int, ids: list[str]) -> None:
        """Ids read in ``shard`` and not claimed (past the claim's limit, or no budget slot): the next
        claim's candidates there, with as many more behind them as may be."""
        self.left(shard, ids, len(ids))

    def take_ahead(self, shards: Sequence[int], limit: int) -> tuple[dict[int, list[str]], list[int]]:
        """This claim's candidates among the ids the last ones left due in ``shards`` (at most ``limit`` a
        shard), and the shards to read again instead. Together they may fill the claim: then they are all
        taken. Short of ``limit``, a shard's list that was cut at its share is read again: behind it more
        may have been due all along, and a claim that comes back short is taken as all there was (the
        pump waits ``WORKER_CLAIM_GAP_S`` before the next one). In a burst's backlog, taking those short
        lists alone made every other claim short, and the backlog drained at half its pace."""
        lists = {s: ids for s in shards if (ids := self.ahead.pop(s, []))}
        cut = [s for s in lists if s in self.cut]
        self.cut.difference_update(lists)
        if sum(len(ids) for ids in lists.values()) >= limit or not cut:
            return {s: ids[:limit] for s, ids in lists.items()}, []
        return {s: ids[:limit] for s, ids in lists.items() if s not in cut}, cut

    def join_look(self, now_ms: float) -> bool:
        """Whether this vendor's every-shard look goes with another vendor's made now: when its own is
        half due or more. Then it counts as made now (its shards are read in that call: :meth:`read`), so
        an idle worker's vendors look together, one call a ``refresh_ms`` where one a vendor. A head read
        so may be a little older than what this vendor's own claim saw meanwhile; either way every shard
        is read again within ``refresh_ms``, the bound the looks keep anyway."""
        if now_ms - self.refreshed_ms < self.refresh_ms / 2:
            return False
        self.refreshed_ms = now_ms
        return True

    def read(self, heads: Sequence[float | None]) -> None:
        """Every shard's head, read by a look this vendor joined: each shard's next due run."""
        self.next_due = list(heads)

    def earliest(self) -> float | None:
        known = [due for due in self.next_due if due is not None]
        return min(known) if known else None


def read_per_shard(limit: int, shards: int) -> int:
    """How many due ids a claim of ``limit`` reads in each of ``shards`` due sets: twice its share, so that
    shards that hold fewer leave room to the others, and not ``limit`` in each (16 shards of a busy vendor
    were 3,200 ids read and decoded for a claim of 200). Where the due runs sit in a few shards the claim
    may come back short of its limit; their lists are cut (:meth:`DueShards.take_ahead`), so the next
    claim reads those shards alone, at a larger share."""
    return min(limit, -(-2 * limit // max(shards, 1)))


def interleaved(found: dict[int, list[str]], limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` of the ids found per shard, one shard's after another's in turn (a busy shard
    does not take the whole batch), each shard's in its own order."""
    out: list[tuple[int, str]] = []
    depth = 0
    while len(out) < limit:
        row = [(s, ids[depth]) for s, ids in found.items() if depth < len(ids)]
        if not row:
            break
        out += row[: limit - len(out)]
        depth += 1
    return out
