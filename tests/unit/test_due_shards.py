"""service/store/due.py's pure parts, by table: which of a vendor's due sets a claim reads
(``shards_to_read``, ``DueShards``) and how the ids found in several are taken in turn (``interleaved``)."""

from __future__ import annotations

import pytest

from service.store import keys
from service.store.due import DueShards, interleaved, read_per_shard, shards_to_read

N = None
ALL4 = [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("next_due", "now", "refreshed", "refresh", "expected"),
    [
        # Never read in full (refreshed -inf): every shard, whatever is known.
        ([N, N, N, N], 0, float("-inf"), 50, ALL4),
        ([N, 500, N, N], 0, float("-inf"), 50, ALL4),
        # The last full read is refresh_ms old, or older: every shard again.
        ([N, N, N, N], 1050, 1000, 50, ALL4),
        ([N, N, N, N], 9000, 1000, 50, ALL4),
        # Within refresh_ms: only the shards whose next due run is due (at or before now).
        ([N, N, N, N], 1049, 1000, 50, []),
        ([10, N, 1049, 1050], 1049, 1000, 50, [0, 2]),
        ([1049, 1049, 1049, 1049], 1049, 1000, 50, ALL4),
        ([N, 2000, N, 3000], 1010, 1000, 50, []),
        # The count is the table's: 16 in production.
        ([N] * 16, 0, float("-inf"), 50, list(range(16))),
        ([N] * 15 + [5], 6, 0, 50, [15]),
    ],
)
def test_shards_to_read(
    next_due: list[float | None], now: float, refreshed: float, refresh: float, expected: list[int]
) -> None:
    assert shards_to_read(next_due, now, refreshed, refresh) == expected


@pytest.mark.parametrize(
    ("found", "limit", "expected"),
    [
        ({}, 10, []),
        ({3: []}, 10, []),
        ({3: ["a"]}, 0, []),
        # One shard: its own order.
        ({3: ["a", "b", "c"]}, 10, [(3, "a"), (3, "b"), (3, "c")]),
        ({3: ["a", "b", "c"]}, 2, [(3, "a"), (3, "b")]),
        # Several: one of each in turn, in the order the shards were found, a busy one's rest at the end.
        ({1: ["a", "b", "c"], 5: ["d"]}, 10, [(1, "a"), (5, "d"), (1, "b"), (1, "c")]),
        ({5: ["d"], 1: ["a", "b", "c"]}, 10, [(5, "d"), (1, "a"), (1, "b"), (1, "c")]),
        ({1: ["a", "b", "c"], 5: ["d"]}, 3, [(1, "a"), (5, "d"), (1, "b")]),
        # The limit cuts a turn short: the first shards of that turn.
        ({1: ["a", "b"], 2: ["c", "d"], 3: ["e", "f"]}, 4, [(1, "a"), (2, "c"), (3, "e"), (1, "b")]),
        ({1: ["a"], 2: [], 3: ["e", "f"]}, 10, [(1, "a"), (3, "e"), (3, "f")]),
    ],
)
def test_interleaved(found: dict[int, list[str]], limit: int, expected: list[tuple[int, str]]) -> None:
    assert interleaved(found, limit) == expected


def test_due_shards_reads_all_then_the_due_ones_until_the_refresh() -> None:
    known = DueShards(refresh_ms=1000)
    assert len(known.next_due) == keys.SHARDS and known.earliest() is None
    everything = list(range(keys.SHARDS))
    # (what is known, the time of the read, the shards read, the last full read after it)
    table: list[tuple[dict[int, float | None], float, list[int], float]] = [
        ({}, 0, everything, 0),  # the first read: all
        ({}, 10, [], 0),  # nothing known due: none
        ({3: 100, 7: 50}, 60, [7], 0),
        ({}, 100, [3, 7], 0),
        ({}, 999, [3, 7], 0),
        ({}, 1000, everything, 1000),  # refresh_ms since the last full read: all again
        ({3: None, 7: 2500}, 1500, [], 1000),
        ({}, 2000, everything, 2000),
        # Every shard due: a full read, which counts as one.
        (dict.fromkeys(range(keys.SHARDS), 2100), 2100, everything, 2100),
    ]
    for known_now, now, read, refreshed in table:
        for shard, due in known_now.items():
            known.next_due[shard] = due
        assert known.to_read(now) == read, now
        assert known.refreshed_ms == refreshed, now


@pytest.mark.parametrize(
    ("next_due", "earliest"),
    [
        ({}, None),
        ({4: 700}, 700),
        ({4: 700, 9: 300, 15: 900}, 300),
        ({0: 0, 9: 300}, 0),  # a shard due at 0 is known, not unknown
    ],
)
def test_due_shards_earliest_is_the_soonest_known(next_due: dict[int, float], earliest: float | None) -> None:
    known = DueShards(refresh_ms=50)
    for shard, due in next_due.items():
        known.next_due[shard] = due
    assert known.earliest() == earliest


def test_each_vendors_due_shards_are_its_own() -> None:
    one, other = DueShards(refresh_ms=50), DueShards(refresh_ms=50)
    one.next_due[2] = 10
    one.ahead[2] = ["run_x"]
    assert other.next_due == [None] * keys.SHARDS and other.ahead == {}


@pytest.mark.parametrize(
    ("refreshed", "now", "joins", "refreshed_after"),
    [
        (float("-inf"), 0, True, 0),  # never looked: joins the first look made
        (1000, 1000, False, 1000),  # looked just now
        (1000, 1024, False, 1000),  # under half of refresh_ms (50) since its look: its own comes later
        (1000, 1025, True, 1025),  # half due: joins, and counts as looked now
        (1000, 1049, True, 1049),
        (1000, 1060, True, 1060),  # overdue (its pump has not claimed since): joins
    ],
)
def test_a_vendors_look_joins_another_made_now_once_half_due(
    refreshed: float, now: float, joins: bool, refreshed_after: float
) -> None:
    known = DueShards(refresh_ms=50, refreshed_ms=refreshed)
    assert known.join_look(now) is joins
    assert known.refreshed_ms == refreshed_after
    # Until refresh_ms after the look it joined, its own claims read only the shards believed due.
    assert known.to_read(refreshed_after + 49) == []


def test_a_joined_look_sets_every_shards_next_due_and_keeps_the_ids_left_due() -> None:
    known = DueShards(refresh_ms=50)
    known.next_due[2] = 10
    known.ahead[2] = ["run_x"]
    heads: list[float | None] = [None] * keys.SHARDS
    heads[5] = 70
    known.read(heads)
    assert known.next_due == heads and known.earliest() == 70
    assert known.ahead == {2: ["run_x"]}  # candidates the next claim checks in its script, as before


# Six ids left due in each of 16 shards, each list cut at its share of a claim of 100.
BURST = {s: ([f"r{s}_{n}" for n in range(6)], True) for s in range(16)}


@pytest.mark.parametrize(
    ("left", "shards", "limit", "taken", "again"),
    [
        # (per shard: its ids left due, and whether its claim's reply cut them at the share it asked for)
        ({}, ALL4, 10, {}, []),
        # Enough to fill the claim: all of them, none read, cut or not.
        ({1: (["a", "b"], True), 2: (["c", "d"], True)}, ALL4, 4, {1: ["a", "b"], 2: ["c", "d"]}, []),
        ({1: (["a", "b"], True), 2: (["c"], False)}, ALL4, 3, {1: ["a", "b"], 2: ["c"]}, []),
        # A list longer than the claim: its first ids.
        ({1: (["a", "b", "c"], True)}, ALL4, 2, {1: ["a", "b"]}, []),
        # Short, and no list cut: that is all there was; no read.
        ({1: (["a"], False), 2: (["c"], False)}, ALL4, 4, {1: ["a"], 2: ["c"]}, []),
        # Short, with lists cut at their share: those shards are read again, the whole lists the others.
        ({1: (["a", "b"], True), 2: (["c"], False)}, ALL4, 4, {2: ["c"]}, [1]),
        ({1: (["a", "b"], True), 3: (["e", "f"], True)}, ALL4, 200, {}, [1, 3]),
        # A burst: 16 shards with 6 ids each left by a claim of 100 (its free slots); the next claim of
        # 200 reads them all again, where it took the 96 and came back short.
        (BURST, list(range(16)), 200, {}, list(range(16))),
        # Only the shards this claim reads: another's list stays for later.
        ({1: (["a"], True), 3: (["e"], True)}, [3], 5, {}, [3]),
    ],
)
def test_a_claim_takes_the_ids_left_due_or_reads_the_cut_shards_again(
    left: dict[int, tuple[list[str], bool]],
    shards: list[int],
    limit: int,
    taken: dict[int, list[str]],
    again: list[int],
) -> None:
    known = DueShards(refresh_ms=50)
    for shard, (ids, cut) in left.items():
        known.left(shard, ids, len(ids) if cut else len(ids) + 1)
    assert known.take_ahead(shards, limit) == (taken, again)
    # What it took, or read again, is no longer left for the next claim; the other shards' lists are.
    assert known.ahead == {s: ids for s, (ids, _) in left.items() if s not in shards}
    assert known.cut == {s for s, (_, cut) in left.items() if cut and s not in shards}


@pytest.mark.parametrize(
    ("ids", "share", "ahead", "cut"),
    [
        ([], 4, {}, set()),  # nothing left due
        (["a"], 4, {7: ["a"]}, set()),  # fewer than the share: all there was
        (["a", "b", "c", "d"], 4, {7: ["a", "b", "c", "d"]}, {7}),  # as many as asked: maybe more
        (["a"], 1, {7: ["a"]}, {7}),
    ],
)
def test_a_claims_reply_leaves_its_ids_due_and_whether_more_may_be(
    ids: list[str], share: int, ahead: dict[int, list[str]], cut: set[int]
) -> None:
    known = DueShards(refresh_ms=50)
    known.left(7, ["x", "y"], 2)  # an earlier claim's, replaced
    known.left(7, ids, share)
    assert (known.ahead, known.cut) == (ahead, cut)
    # Ids read and not claimed count as cut: more may be due behind them.
    known.unclaimed(7, ["z"])
    assert (known.ahead, known.cut) == ({7: ["z"]}, {7})


@pytest.mark.parametrize(
    ("limit", "shards", "per"),
    [
        (200, 16, 25),  # a busy vendor: 400 ids read for a claim of 200, not 3,200
        (200, 1, 200),  # one shard due: the whole claim from it
        (200, 2, 200),
        (200, 3, 134),  # twice the share, rounded up
        (4, 2, 4),
        (1, 16, 1),
        (0, 16, 0),
        (200, 0, 200),  # no shard: never asked, and never a division by zero
    ],
)
def test_a_claim_reads_twice_its_share_of_each_due_shard(limit: int, shards: int, per: int) -> None:
    assert read_per_shard(limit, shards) == per
