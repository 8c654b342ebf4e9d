"""The rename rule of `hookbridge migrate-keys` (service/store/layout.py) as a table: hookbridge 2's key
-> today's, or None for a key that is not one of hookbridge 2's."""

from __future__ import annotations

import pytest

from service.store import keys
from service.store.layout import tagged

ROWS = [
    ("hb:run:run_1", "hb:{hb}:run:run_1"),
    ("hb:client:alice:feed", "hb:{hb}:client:alice:feed"),
    ("hb:chain:sub_1:run_1", "hb:{hb}:chain:sub_1:run_1"),
    ("hb:due:runs:nutrient", keys.due_runs("nutrient")),
    ("hb:budget:nutrient", "hb:{v:nutrient}:budget"),  # a vendor's budget and pause: the vendor's tag
    ("hb:pause:nutrient", "hb:{v:nutrient}:pause"),
    ("hb:budget:azure_di.read", keys.vendor_budget("azure_di.read")),  # a budget group's
    ("hb:budget:sub:sub_1", "hb:{hb}:budget:sub:sub_1"),  # a subscription's rate: the store's tag
    ("hb:{hb}:budget:nutrient", keys.vendor_budget("nutrient")),  # as an earlier hookbridge 3 named it
    ("hb:{hb}:pause:nutrient", keys.vendor_pause("nutrient")),
    ("hb:{hb}:budget:sub:sub_1", None),
    ("hb:{v:nutrient}:budget", None),
    ("hb:{hb}:run:run_1", None),  # today's already
    ("hb:{hb03b}:run:run_1", None),  # a shard's key of stage two
    ("hookbridge:{arq:abort}:health-check", None),  # arq's keys were never renamed
    ("other:key", None),
]


@pytest.mark.parametrize(("old", "new"), ROWS)
def test_a_hookbridge_2_key_gets_the_store_tag(old: str, new: str | None) -> None:
    assert tagged(old) == new


def test_the_new_name_is_what_the_key_builders_make() -> None:
    assert tagged("hb:" + keys.run("r").removeprefix(keys.PREFIX)) == keys.run("r")
