"""The rename rule of `hookbridge migrate-keys` (service/store/layout.py) as a table: a key of an earlier
layout (hookbridge 2's untagged, an earlier hookbridge 3's under ``{hb}``) -> today's, or None for a key
that is today's already or not ours; and which indexes of runs are split over their shards."""

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
    ("hb:{hb}:evt:evt_1:pending", None),  # zero retention's count stays with the deliveries
    ("hb:evt:evt_1:pending", "hb:{hb}:evt:evt_1:pending"),
    ("hb:{hb}:idem:alice:" + "a" * 64, keys.of("alice:" + "a" * 64) + "idem:alice:" + "a" * 64),
    ("hb:client:alice:feed", "hb:{hb}:client:alice:feed"),
    ("hb:chain:sub_1:run_1", "hb:{hb}:chain:sub_1:run_1"),
    ("hb:budget:nutrient", "hb:{v:nutrient}:budget"),  # a vendor's budget and pause: the vendor's tag
    ("hb:pause:nutrient", "hb:{v:nutrient}:pause"),
    ("hb:budget:azure_di.read", keys.vendor_budget("azure_di.read")),  # a budget group's
    ("hb:budget:sub:sub_1", "hb:{hb}:budget:sub:sub_1"),  # a subscription's rate: the store's tag
    ("hb:{hb}:budget:nutrient", keys.vendor_budget("nutrient")),  # as an earlier hookbridge 3 named it
    ("hb:{hb}:pause:nutrient", keys.vendor_pause("nutrient")),
    ("hb:{hb}:budget:sub:sub_1", None),
    ("hb:{hb}:client:alice:feed", None),  # today's already
    ("hb:{v:nutrient}:budget", None),
    (keys.run("run_1"), None),  # a shard's key: today's
    ("hb:{hb}:due:runs:nutrient", None),  # split, not renamed
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
        ("hb:{hb}:due:deliveries", None),
        ("hb:{hb}:run:run_1", None),
        (keys.due_runs("nutrient", 3), None),
    ],
)
def test_an_index_of_runs_is_split_over_the_shards(old: str, shard_3: str | None) -> None:
    builder = split(old)
    assert (builder(3) if builder else None) == shard_3


def test_the_new_name_is_what_the_key_builders_make() -> None:
    assert tagged("hb:" + keys.run("r").removeprefix(keys.of("r"))) == keys.run("r")
