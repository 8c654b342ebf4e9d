"""The transition arguments' JSON codec (service/store/jsoncodec.py): compact, and what orjson refuses still
goes. The run record's own codec is pydantic's (tests/unit/test_records.py)."""

from __future__ import annotations

import json

from service.store import jsoncodec


def test_compact_and_round_trips_what_the_standard_library_did() -> None:
    value = {"a": [1, 2.5, None, True], "b": {"c": "d"}, "é": "naïve"}
    text = jsoncodec.dumps(value)
    assert jsoncodec.loads(text) == value == json.loads(text)
    assert ", " not in text and ": " not in text
    assert "naïve" in text  # UTF-8, not \\u escapes


def test_an_integer_past_64_bits_falls_back_to_the_standard_library() -> None:
    value = {"usage": {"reported": {"tokens": 2**70}}}
    assert jsoncodec.loads(jsoncodec.dumps(value)) == value
