"""The rename rule of `hookbridge migrate-keys` (service/store/layout.py) as a table: a key of an earlier
layout (hookbridge 2's untagged, an earlier hookbridge 3's under ``{hb}``) -> today's, or None for a key
that is today's already or not ours; and which indexes of runs and of deliveries are split over their
shards (each member to its own shard's: a run's, a delivery's)."""

from __future__ import annotations

import pytest

from service.store import keys
from service.store.layout import split, tagged

ROWS = [
    ("hb:run:run_1", keys.run("run_1")),  # a run's keys: its shard
    ("hb:{hb}:run:run_1", keys.run("run_1")),
    ("hb:{hb}:run:run_1:outbox", keys.run_outbox("run_1")),
    ("hb:{hb}:run:run_1:deliveries", keys.run_deliveries("run_1")),
    ("hb:{hb}:doc:run_1", keys.document("run_1")),
    ("hb:result:run_1", keys.result("run_1")),
    ("hb:{hb}:evt:evt_1", keys.event("evt_1")),  # an event's body: the event's shard
    # Zero retention's count of the event's deliveries not yet final: beside the body it drops.
    ("hb:{hb}:evt:evt_1:pending", keys.event_pending("evt_1")),
    ("hb:evt:evt_1:pending", keys.event_pending("evt_1")),
    ("hb:{hb}:idem:alice:" + "a" * 64, keys.of("alice:" + "a" * 64) + "idem:alice:" + "a" * 64),
    # A client's keys (feed, directory, listing, rates, ...): the client's shard, told by its name.
    ("hb:client:alice:feed", keys.client_feed("alice")),
    ("hb:{hb}:client:alice:feed", keys.client_feed("alice")),
    ("hb:client:alice:subs", keys.client_subs("alice")),
    ("hb:{hb}:client:alice:runs", keys.client_runs("alice")),
    ("hb:{hb}:client:alice:streams", keys.client_streams("alice")),
    ("hb:{hb}:client:alice:relayed:run_1", keys.relayed("alice", "run_1")),
    ("hb:client:alice:meta:" + "b" * 32, keys.of("alice") + "client:alice:meta:" + "b" * 32),
    ("hb:rate:submit:alice", keys.client_rate("submit", "alice")),
    ("hb:{hb}:rate:feed_scan:alice", keys.client_rate("feed_scan", "alice")),
    ("hb:worker:w1", keys.worker("w1")),  # a worker's heartbeat: the store's tag
    # A subscription's keys, its chains and its rate: the subscription's shard.
    ("hb:sub:sub_1", keys.subscription("sub_1")),
    ("hb:{hb}:sub:sub_1", keys.subscription("sub_1")),
    ("hb:{hb}:sub:sub_1:deliveries", keys.sub_deliveries("sub_1")),
    ("hb:sub:sub_1:inflight", keys.sub_inflight("sub_1")),
    ("hb:{hb}:sub:sub_1:parked", keys.sub_parked("sub_1")),
    ("hb:chain:sub_1:run_1", keys.chain("sub_1", "run_1")),  # the subscription's, not the run's
    ("hb:{hb}:chain:sub_1:run_1", keys.chain("sub_1", "run_1")),
    ("hb:budget:sub:sub_1", keys.sub_budget("sub_1")),
    ("hb:{hb}:budget:sub:sub_1", keys.sub_budget("sub_1")),
    # A delivery's keys: its own id's shard (one made before its id was minted in its subscription's
    # shard may land elsewhere: migrate-keys runs on one Redis, where a script may touch both).
    ("hb:dlv:dlv_1", keys.delivery("dlv_1")),
    ("hb:{hb}:dlv:dlv_1", keys.delivery("dlv_1")),
    ("hb:{hb}:dlv:dlv_1:attempts", keys.delivery_attempts("dlv_1")),
    ("hb:budget:nutrient", "hb:{v:nutrient}:budget"),  # a vendor's budget and pause: the vendor's tag
    ("hb:pause:nutrient", "hb:{v:nutrient}:pause"),
    ("hb:budget:azure_di.read", keys.vendor_budget("azure_di.read")),  # a budget group's
    ("hb:{hb}:budget:nutrient", keys.vendor_budget("nutrient")),  # as an earlier hookbridge 3 named it
    ("hb:{hb}:pause:nutrient", keys.vendor_pause("nutrient")),
    (keys.client_feed("alice"), None),  # today's already
    (keys.worker("w1"), None),
    (keys.client_rate("submit", "alice"), None),
    ("hb:{v:nutrient}:budget", None),
    (keys.run("run_1"), None),  # a shard's key: today's
    (keys.subscription("sub_1"), None),
    (keys.sub_budget("sub_1"), None),
    (keys.chain("sub_1", "run_1"), None),
    (keys.delivery("dlv_1"), None),
    (keys.event_pending("evt_1"), None),
    ("hb:{hb}:due:runs:nutrient", None),  # split, not renamed
    ("hb:{hb}:due:deliveries", None),
    ("hb:active:deliveries", None),
    ("hb:{hb}:dlvclient:alice:inflight", None),
    ("hb:dlvclient:alice:parked", None),
    ("hookbridge:{arq:abort}:health-check", None),  # arq's keys were never renamed
    ("other:key", None),
]


@pytest.mark.parametrize(("old", "new"), ROWS)
def test_a_key_of_an_earlier_layout_gets_todays_name(old: str, new: str | None) -> None:
    assert tagged(old) == new


@pytest.mark.parametrize(
    ("old", "shard_3"),
    [
        ("hb:{hb}:due:runs:nutrient", keys.due_runs("nutrient", 3)),
        ("hb:due:runs:azure_di", keys.due_runs("azure_di", 3)),
        ("hb:{hb}:active:runs", keys.active_runs(3)),
        ("hb:outbox", keys.outbox(3)),
        # The indexes of deliveries, split by member as well: a delivery to its own id's shard.
        ("hb:{hb}:due:deliveries", keys.due_deliveries(3)),
        ("hb:due:deliveries", keys.due_deliveries(3)),
        ("hb:{hb}:active:deliveries", keys.active_deliveries(3)),
        ("hb:{hb}:dlvclient:alice:inflight", keys.client_inflight("alice", 3)),
        ("hb:dlvclient:alice:parked", keys.client_parked("alice", 3)),
        # A client id is the tenant's name: one with a colon stays whole.
        ("hb:{hb}:dlvclient:team:a:inflight", keys.client_inflight("team:a", 3)),
        ("hb:{hb}:dlvclient:alice:feed", None),  # not an index of deliveries
        ("hb:{hb}:run:run_1", None),
        ("hb:{hb}:sub:sub_1:deliveries", None),  # a subscription's log: moved whole, to its shard
        (keys.due_runs("nutrient", 3), None),
        (keys.due_deliveries(3), None),  # today's
        (keys.client_inflight("alice", 3), None),
    ],
)
def test_an_index_of_runs_or_deliveries_is_split_over_the_shards(old: str, shard_3: str | None) -> None:
    builder = split(old)
    assert (builder(3) if builder else None) == shard_3


@pytest.mark.parametrize(
    ("key", "owner"),
    [
        (keys.run("r"), "r"),
        (keys.subscription("s"), "s"),
        (keys.sub_deliveries("s"), "s"),
        (keys.chain("s", "r"), "s"),
        (keys.sub_budget("s"), "s"),
        (keys.delivery("d"), "d"),
        (keys.delivery_attempts("d"), "d"),
        (keys.event_pending("e"), "e"),
    ],
)
def test_the_new_name_is_what_the_key_builders_make(key: str, owner: str) -> None:
    """The name after the prefix is what an earlier layout spelled: the rule finds the owner's id in it."""
    assert tagged("hb:" + key.removeprefix(keys.of(owner))) == key
