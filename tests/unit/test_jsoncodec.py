"""The run records' JSON codec (service/store/jsoncodec.py): compact, and what orjson refuses still goes."""

from __future__ import annotations

import json

from service.store import dump_run, jsoncodec, load_run


def test_compact_and_round_trips_what_the_standard_library_did() -> None:
    value = {"a": [1, 2.5, None, True], "b": {"c": "d"}, "é": "naïve"}
    text = jsoncodec.dumps(value)
    assert jsoncodec.loads(text) == value == json.loads(text)
    assert ", " not in text and ": " not in text
    assert "naïve" in text  # UTF-8, not \\u escapes


def test_an_integer_past_64_bits_falls_back_to_the_standard_library() -> None:
    value = {"usage": {"reported": {"tokens": 2**70}}}
    assert jsoncodec.loads(jsoncodec.dumps(value)) == value


def test_a_run_record_round_trips_with_its_defaults_left_out() -> None:
    run = {"_v": 3, "id": "run_1", "status": "running", "polls": 0, "metadata": {"k": "v"}, "error": None}
    text = dump_run(run)
    assert "polls" not in text and "error" not in text
    assert load_run(text.encode())["polls"] == 0 and load_run(text)["metadata"] == {"k": "v"}
