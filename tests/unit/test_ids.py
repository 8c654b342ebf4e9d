"""``domain.new_id_beside``: an id minted into the shard of another (an event beside its run, a run beside
its Idempotency-Key's record), that is still a :func:`domain.new_id` in every other respect: its shape,
its uniqueness, its order by time."""

from __future__ import annotations

import re
import zlib
from types import SimpleNamespace

import pytest

from service.core import domain

SHAPE = re.compile(r"^evt_[0-9A-HJKMNP-TV-Z]{26}$")
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _in_shard(shard: int) -> str:
    """A run id in ``shard``."""
    while True:
        run_id = domain.new_id("run")
        if domain.shard_of(run_id) == shard:
            return run_id


def _millis(identifier: str) -> int:
    """The milliseconds an id was minted at: its first 10 characters (50 bits, the top 2 zero)."""
    value = 0
    for char in identifier.split("_", 1)[1][:10]:
        value = value * 32 + CROCKFORD.index(char)
    return value


@pytest.mark.parametrize("shard", range(domain.SHARDS))
def test_an_id_minted_beside_another_lands_in_its_shard_and_keeps_the_shape(shard: int) -> None:
    run_id = _in_shard(shard)
    minted = [domain.new_id_beside("evt", run_id) for _ in range(300)]
    assert {domain.shard_of(e) for e in minted} == {shard}
    assert all(SHAPE.fullmatch(e) for e in minted), [e for e in minted if not SHAPE.fullmatch(e)]
    assert len(set(minted)) == len(minted)
    # Any id or name may be the other: a client's Idempotency-Key anchor, a run's id.
    assert domain.is_id("run", beside := domain.new_id_beside("run", f"alice:{shard}"))
    assert domain.shard_of(beside) == domain.shard_of(f"alice:{shard}")


def test_ids_minted_beside_are_unique_over_every_shard() -> None:
    minted = [domain.new_id_beside("evt", _in_shard(n % domain.SHARDS)) for n in range(4000)]
    assert len(set(minted)) == len(minted)


def test_the_last_two_characters_reach_every_shard_whatever_comes_before() -> None:
    """Why new_id_beside never runs out of candidates: over the 1,024 last pairs, whatever the head, the
    CRC-32 mod 16 takes every value (CRC-32 is affine in the last bytes)."""
    for _ in range(200):
        head = domain.new_id("evt")[:-2]
        crc = zlib.crc32(head.encode())
        reached = {zlib.crc32((a + b).encode(), crc) % domain.SHARDS for a in CROCKFORD for b in CROCKFORD}
        assert reached == set(range(domain.SHARDS)), head


def test_only_the_random_tail_changes_so_ids_sort_by_time_with_new_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Minted a millisecond apart, in turn by new_id and new_id_beside (to every shard): they sort in the
    order they were minted, and each says the millisecond it was minted at."""
    others = [_in_shard(shard) for shard in range(domain.SHARDS)]
    told: list[float] = []

    def clock() -> float:  # a millisecond later at each call
        told.append(1_800_000_000 + (len(told) + 0.5) / 1000)
        return told[-1]

    monkeypatch.setattr(domain, "time", SimpleNamespace(time=clock))
    minted = []
    for n in range(400):
        identifier = domain.new_id_beside("evt", others[n % domain.SHARDS]) if n % 2 else domain.new_id("evt")
        assert _millis(identifier) == int(told[-1] * 1000)  # the time new_id drew
        minted.append(identifier)
    assert len(told) == len(minted)  # one reading of the clock each
    assert sorted(minted) == minted
    assert [domain.shard_of(e) for e in minted[1::2]] == [domain.shard_of(o) for o in others[1::2]] * 25


def _crockford_by_loop(value: int) -> str:
    """What new_id did before :func:`domain.crockford`: five bits at a time, from the least significant."""
    chars = []
    for _ in range(26):
        chars.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


@pytest.mark.parametrize(
    "value",
    [
        0,
        1,
        31,
        32,
        2**80 - 1,
        2**80,
        1_800_000_000_000 << 80,
        2**128 - 1,
        *(7**n % 2**128 for n in range(40, 60)),
    ],
)
def test_crockford_spells_a_value_as_the_loop_over_its_characters_did(value: int) -> None:
    """Ten bits at a time give the characters the loop gave: the same ids, the same order by time."""
    assert domain.crockford(value) == _crockford_by_loop(value)


def _walked(drawn: str, shard: int) -> str:
    """The id new_id_in_shard makes of the drawn ``drawn``, the long way: the last pairs in turn from the
    drawn one, the first whose CRC-32 lands in ``shard``."""
    head, start = drawn[:-2], CROCKFORD.index(drawn[-2]) * 32 + CROCKFORD.index(drawn[-1])
    for n in range(1024):
        tail = (start + n) % 1024
        candidate = head + CROCKFORD[tail >> 5] + CROCKFORD[tail & 31]
        if zlib.crc32(candidate.encode()) % domain.SHARDS == shard:
            return candidate
    raise AssertionError("unreachable: the pairs reach every shard")


def test_the_shard_is_reached_by_the_first_pair_the_walk_would_find(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table and the bisection give what walking the pairs from the drawn one gives, for drawn ids
    whose last pair is anywhere, the last one (1,023: the walk wraps around) included."""
    drawn_ids = [domain.new_id("evt") for _ in range(3000)]
    drawn_ids += [d[:-2] + "ZZ" for d in drawn_ids[:200]] + [d[:-2] + "00" for d in drawn_ids[:200]]
    for n, drawn in enumerate(drawn_ids):
        shard = n % domain.SHARDS
        monkeypatch.setattr(domain, "new_id", lambda prefix, drawn=drawn: drawn)
        assert domain.new_id_in_shard("evt", shard) == _walked(drawn, shard), (drawn, shard)
