"""``body.parse_json``'s depth limit (``MAX_JSON_DEPTH``): a body nested deeper is a 400; the walk that
measures it is skipped only where the text has too few brackets to be that deep, and that shortcut never
changes the answer (checked against the walk alone, at and around the limit)."""

from __future__ import annotations

import json

import pytest

from service.api.body import _depth, parse_json
from service.api.problems import InvalidJSON


def _nested(levels: int, leaf: object = 1) -> dict[str, object]:
    """An object ``levels`` containers deep whose innermost holds ``leaf`` (depth ``levels + 1``)."""
    value: object = leaf
    for n in range(levels):
        value = {"k": value} if n % 2 else [value]
    return {"top": value}


BODIES = [
    {"vendor": "nutrient"},
    {"vendor": "nutrient", "document": {"url": "https://x/a.pdf"}, "options": {"a": [1, 2]}},
    {"text": "{[{[{[{[{[{[ brackets in a string only ]}]}]}]}]}"},
    {"list": [[], {}, [[]], {"a": {}}]},
    *(_nested(n) for n in range(9)),
    *(_nested(n, leaf="{[{[") for n in range(6)),
]


@pytest.mark.parametrize("max_depth", [1, 2, 3, 4, 5, 6, 8, 32])
@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_limit_is_the_walks_answer(body: dict[str, object], max_depth: int) -> None:
    raw = json.dumps(body).encode()
    deeper = _depth(body, max_depth + 1) > max_depth
    if deeper:
        with pytest.raises(InvalidJSON, match="nested deeper"):
            parse_json(raw, max_depth)
    else:
        assert parse_json(raw, max_depth) == body


@pytest.mark.parametrize(
    ("levels", "max_depth", "refused"), [(1, 3, False), (2, 3, True), (30, 32, False), (31, 32, True)]
)
def test_at_the_limit(levels: int, max_depth: int, refused: bool) -> None:
    raw = json.dumps(_nested(levels)).encode()  # depth levels + 2: the top object, the containers, the leaf
    if refused:
        with pytest.raises(InvalidJSON):
            parse_json(raw, max_depth)
    else:
        parse_json(raw, max_depth)
