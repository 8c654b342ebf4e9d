"""``domain.rfc3339``: the whole-millisecond shortcut gives the text datetime gives, to the millisecond."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from service.core import domain


def _datetime(ms: int | float) -> str:
    """The reference: what rfc3339 returned before its shortcut."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (999, "1970-01-01T00:00:00.999Z"),
        (1000, "1970-01-01T00:00:01.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),  # a leap day
        (1_796_415_039_817, "2026-12-04T20:10:39.817Z"),
        (4_102_444_799_999, "2099-12-31T23:59:59.999Z"),
    ],
)
def test_whole_milliseconds(ms: int, text: str) -> None:
    assert domain.rfc3339(ms) == text == _datetime(ms)


def test_whole_milliseconds_agree_with_datetime_everywhere() -> None:
    rng = random.Random(30)
    for _ in range(20_000):
        ms = rng.randint(-2_208_988_800_000, 4_102_444_800_000)  # 1900 to 2100
        assert domain.rfc3339(ms) == _datetime(ms), ms


@pytest.mark.parametrize("ms", [1.5, 999.9999999, 1_796_415_039_817.6, -0.4])
def test_a_fraction_of_a_millisecond_is_rounded_as_datetime_rounds_it(ms: float) -> None:
    assert domain.rfc3339(ms) == _datetime(ms)


def test_none_is_none() -> None:
    assert domain.rfc3339(None) is None
