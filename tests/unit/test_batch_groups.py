"""Which calls of a batched script (``base.batched``: a batch's transitions, its relays' feed steps and
last steps) go in one call of it (``base.batch_groups``): on a cluster, those whose keys share a slot (a
call's keys all carry its first key's hash tag); on one Redis server, which has no slots, all of them. The
scripts on real servers: tests/store/test_transition_batch.py and test_relay_types.py on one, every
integration test again on a cluster (.ci/run's third step)."""

from __future__ import annotations

import pytest

from service.store import keys
from service.store.base import batch_groups


def _shard_key(shard: int) -> str:
    return keys.outbox(shard)  # a key in the shard's slot: its hash tag is the shard's


@pytest.mark.parametrize(
    ("first_keys", "by_slot", "groups"),
    [
        ([], True, []),
        ([], False, []),
        ([_shard_key(3)], True, [[0]]),
        ([_shard_key(3)], False, [[0]]),
        # Two shards, interleaved: a call per shard on a cluster, each in the calls' order.
        ([_shard_key(3), _shard_key(9), _shard_key(3), _shard_key(9)], True, [[0, 2], [1, 3]]),
        # The same on one server: one call for them all.
        ([_shard_key(3), _shard_key(9), _shard_key(3), _shard_key(9)], False, [[0, 1, 2, 3]]),
        # A key without a hash tag is its own slot's.
        (["plain", "plain", "other"], True, [[0, 1], [2]]),
    ],
)
def test_batch_groups(first_keys: list[str], by_slot: bool, groups: list[list[int]]) -> None:
    assert batch_groups(first_keys, by_slot=by_slot) == groups


def test_a_shards_keys_group_together_on_a_cluster() -> None:
    # Every key of a shard carries the shard's hash tag: a run's record with its shard's due set.
    shard = 5
    run_id = next(f"run_{i}" for i in range(10_000) if keys.shard_of(f"run_{i}") == shard)
    other = next(f"run_{i}" for i in range(10_000) if keys.shard_of(f"run_{i}") != shard)
    first = [keys.run(run_id), keys.due_runs("nutrient", shard), keys.run(other)]
    assert batch_groups(first, by_slot=True) == [[0, 1], [2]]
    assert batch_groups(first, by_slot=False) == [[0, 1, 2]]
