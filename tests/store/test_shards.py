"""The virtual shards' table (issue 26, keys.py): 16 tags, one in each sixteenth of the slot space, so
that any even split of the slots over up to 16 primaries gives each 16 / N shards give or take one;
``shard_of`` stable across processes; ids minted into a chosen shard stay deterministic; a run's keys, its
shard's indexes, its events' bodies and its idempotency record share its tag's slot. Checked with
redis-py's own CRC16 and on the real 3-primary cluster (tests/redis_cluster.py)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
import redis.asyncio.cluster as aiocluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from service.core import domain
from service.store import fanout, keys
from service.store.runs import Runs
from tests.redis_cluster import RedisCluster, _slot_range


def test_sixteen_short_tags_one_in_each_sixteenth_of_the_slots() -> None:
    assert keys.SHARDS == len(keys.TAGS) == 16
    width = REDIS_CLUSTER_HASH_SLOTS // keys.SHARDS
    for shard, tag in enumerate(keys.TAGS):
        slot = key_slot(tag.encode())
        # In the middle half of its own range: never at an edge a split could cut.
        assert shard * width + width // 4 <= slot < shard * width + 3 * width // 4, (shard, tag, slot)
        assert len(tag) <= 6 and tag.isalnum()
    assert len(set(keys.TAGS)) == keys.SHARDS


@pytest.mark.parametrize("primaries", [1, 2, 3, 4, 5, 8, 16])
def test_an_even_split_of_the_slots_gives_each_primary_its_share_of_shards(primaries: int) -> None:
    ranges = [_slot_range(i, primaries) for i in range(primaries)]
    owners = Counter(
        next(i for i, (lo, hi) in enumerate(ranges) if lo <= key_slot(t.encode()) <= hi) for t in keys.TAGS
    )
    share = keys.SHARDS / primaries
    assert len(owners) == primaries
    assert all(share - 1 <= n <= share + 1 for n in owners.values()), owners


def test_the_table_is_computed_the_same_everywhere() -> None:
    assert keys.balanced_tags() == keys.TAGS
    # Another interpreter (its own hash seed) computes the same tags and shards.
    code = "from service.store import keys; print(keys.TAGS, keys.shard_of('run_01J0000000000000000000000A'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{keys.TAGS} {keys.shard_of('run_01J0000000000000000000000A')}"


def test_shard_of_is_stable_and_spreads_ids() -> None:
    # Golden values: a change of the function would move every stored run and subscription.
    assert [keys.shard_of(i) for i in ("run_a", "sub_a", "alice", "")] == [3, 7, 7, 0]
    counts = Counter(keys.shard_of(domain.new_id("run")) for _ in range(4000))
    assert len(counts) == 16 and max(counts.values()) < 2 * 4000 / 16


def test_a_prefix_puts_every_key_of_a_shard_in_its_tags_slot() -> None:
    for shard, tag in enumerate(keys.TAGS):
        prefix = keys.shard_prefix(shard)
        assert prefix == f"hb:{{{tag}}}:"
        slots = {key_slot(f"{prefix}{kind}:x".encode()) for kind in ("run", "due:runs:nutrient", "outbox")}
        assert slots == {key_slot(tag.encode())}


def test_of_names_the_prefix_of_the_ids_shard() -> None:
    """``keys.of`` looks its prefix up (for speed): it must be that of ``shard_of``'s shard, for any id or
    name."""
    names = [domain.new_id("run") for _ in range(2000)] + ["", "alice", "client-é", "tenant:ключ", "a\x00b"]
    for name in names:
        assert keys.of(name) == keys.shard_prefix(keys.shard_of(name)), name


def _run_keys(run_id: str, event_id: str) -> list[str]:
    """What the scripts of one run declare together (create_run.lua, transition.lua, relay_done.lua): the
    run's own keys, its shard's due set, unfinished runs and outbox, and an event's body."""
    shard = keys.shard_of(run_id)
    return [
        keys.run(run_id),
        keys.document(run_id),
        keys.result(run_id),
        keys.run_events(run_id),
        keys.run_outbox(run_id),
        keys.run_deliveries(run_id),
        keys.due_runs("nutrient", shard),
        keys.active_runs(shard),
        keys.outbox(shard),
        keys.event(event_id),
    ]


def test_a_runs_keys_its_shards_indexes_and_its_events_share_its_tags_slot() -> None:
    seen = set()
    for n in range(300):
        # A run minted for an Idempotency-Key lands beside the key's record; one without, anywhere.
        run_id = Runs.new_run_id("alice", f"key-{n}") if n % 2 else Runs.new_run_id("alice", None)
        shard = keys.shard_of(run_id)
        seen.add(shard)
        ks = _run_keys(run_id, domain.new_id_beside("evt", run_id))
        if n % 2:
            ks.append(keys.idempotency("alice", f"key-{n}"))
        assert {key_slot(k.encode()) for k in ks} == {key_slot(keys.TAGS[shard].encode())}, ks
        assert all(k.startswith(keys.shard_prefix(shard)) for k in ks)
    assert len(seen) == keys.SHARDS  # the runs spread over every shard


def test_a_delivery_id_minted_in_its_subscriptions_shard_is_deterministic_and_well_formed() -> None:
    for n in range(200):
        event, sub = f"evt_{n}", domain.new_id("sub")
        dlv = fanout.delivery_id_in_shard(event, sub)
        assert keys.shard_of(dlv) == keys.shard_of(sub)
        assert dlv == fanout.delivery_id_in_shard(event, sub)
        assert domain.is_id("dlv", dlv)
    # The first candidate is today's id: a delivery already in its subscription's shard keeps it.
    first = fanout.delivery_id("evt_0", "sub_0")
    if keys.shard_of(first) == keys.shard_of("sub_0"):
        assert fanout.delivery_id_in_shard("evt_0", "sub_0") == first


@pytest.mark.parametrize("client", ["alice", "bob", "c" * 64])
def test_a_clients_subscriptions_spread_over_the_shards_and_the_primaries(client: str) -> None:
    shards = [keys.spread_shard(client, n) for n in range(16)]
    assert sorted(shards) == list(range(16)) and shards[0] == keys.shard_of(client)
    assert [keys.spread_shard(client, n) for n in range(16, 21)] == shards[:5]
    # On N primaries (the slots in N equal ranges, each shard's tag in the middle of its sixteenth), any N
    # consecutive subscriptions of a client put at most 2 on one primary (a step of 1 would put them all
    # on one).
    for primaries in range(2, 7):
        primary = [int((s + 0.5) * primaries / 16) for s in range(16)]
        for n in range(16):
            on = Counter(primary[shards[(n + k) % 16]] for k in range(primaries))
            assert max(on.values()) <= 2, (primaries, n, shards)


async def test_the_tags_spread_over_the_primaries_of_a_real_cluster(redis_cluster: RedisCluster) -> None:
    client = aiocluster.RedisCluster.from_url(redis_cluster.url)
    try:
        await client.initialize()
        owners = Counter(client.get_node_from_key(keys.shard_prefix(s) + "x").port for s in range(16))
        assert sorted(owners.values()) == [5, 5, 6]
        for shard in range(keys.SHARDS):  # the server's slot is the table's
            name = keys.shard_prefix(shard) + "run:x"
            node = client.get_node_from_key(name)
            assert await client.execute_command("CLUSTER KEYSLOT", name, target_nodes=node) == key_slot(
                keys.TAGS[shard].encode()
            )
    finally:
        await client.aclose()


def test_a_vendors_budget_and_pause_share_a_slot_of_their_own() -> None:
    # The claim takes the budget and reads the pause in one script (budget_batch.lua): one slot, the
    # vendor's, apart from the store's tag and the runs' shards (a claim reads the due sets, then takes
    # the budget, then claims in each shard), so that on a cluster the vendors' budgets spread too.
    vendors = ("nutrient", "cloudsquid", "uptiq", "azure_di", "llamaparse", "textract", "google_docai")
    slots = {v: key_slot(keys.vendor_budget(v).encode()) for v in vendors}
    assert all(key_slot(keys.vendor_pause(v).encode()) == slot for v, slot in slots.items())
    assert key_slot(keys.PREFIX.encode()) not in slots.values()
    assert key_slot(keys.vendor_budget("azure_di.read").encode()) != slots["azure_di"]  # a group: its own
    # Over the even split of 3 primaries, the seven land on all three.
    assert {slot * 3 // REDIS_CLUSTER_HASH_SLOTS for slot in slots.values()} == {0, 1, 2}
