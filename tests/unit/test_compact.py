"""A finished run's record in its compact form (service/core/compact.py): written once nothing is left to
tell the vendor, read back field for field, its head still the scripts', a damaged one an error."""

from __future__ import annotations

import base64
import json
import random
import re
import zlib
from typing import Any

import msgspec
import pytest

from service.core import compact
from service.core.records import STORED_NAMES, Run, replace
from tests.unit.test_records import T0, _run

_TRAIL = [
    [40, 0, "queued", 6],
    [2040, 3, "running", 4, "7% preprocessing"],
    [90040, 3, 0, 4, "42% ocr"],
    [300040, 4, "done", 5],
]


def _finished(**changes: Any) -> Run:
    run = _run()  # a queued run: test_records' own
    ended = {
        "status": "succeeded",
        "version": 14,
        "document": None,
        "vendor_run_id": "9eace8b4-a161-7068-0acc-495b16d1823c",
        "vendor_status": "done",
        "progress": {"percent": 100, "phase": "extraction", "message": None},
        "completed_at": T0 + 300_040,
        "updated_at": T0 + 300_040,
        "polls": 13,
        "usage": {"credits": 1.0},
        "trail": _TRAIL,
        "trail_dropped": 4,
        "event_ids": ["evt_01M97YRYV1CF711CQXRHA7F5Z8", "evt_01M97YRZ1FM4V8HNG0T2R9NMK1"],
    }
    return replace(run, **{**ended, **changes})


def _is_compact(stored: str) -> bool:
    return set(json.loads(stored)) == {"c", "vendor", "op", "ca", "ua", "status", "version", "z"}


@pytest.mark.parametrize(
    ("changes", "compact_form"),
    [
        ({}, True),
        (
            {
                "status": "failed",
                "error": {"code": "vendor_failed", "message": "bad scan", "vendor_status": "x"},
            },
            True,
        ),
        ({"status": "canceled", "vendor_run_id": None, "trail": []}, True),
        # What the sweeper reads (repair.lua) stays plain until the vendor is told.
        ({"status": "canceled", "vendor_cancel_pending": True}, False),
        ({"zero_retention": True, "vendor_delete_pending": True}, False),
        ({"zero_retention": True, "vendor_deleted": True}, True),
        # In flight: written on every step, so never packed.
        ({"status": "running", "completed_at": None}, False),
        ({"status": "queued", "version": 0}, False),
        # A tenant's text spelling the compact form's own marks: escaped in its values, never read as them.
        ({"client": 'a","version":1,"z":"', "metadata": {"version": "1", "z": "x"}}, True),
        ({"metadata": {"ключ": "значение 😀", "q": 'a"b\\c'}, "options": {"z": 1}}, True),
        # A nested object with a version of its own, and a z after it: the head's version is the first.
        ({"options": {"a": 1, "version": 2, "z": "x"}, "usage": {"b": 1, "version": 3}}, True),
        ({"status": "running", "options": {"a": 1, "version": 2, "z": "eA=="}}, False),
        ({"version": 7}, True),  # a version of one digit, and of three
        ({"version": 123}, True),
        # A tenant's random text: the compact form would be longer, so it stays plain.
        ({"metadata": {"r": base64.b64encode(random.Random(5).randbytes(3000)).decode()}}, False),
        # Large values past the form's bound stay plain.
        ({"metadata": {"big": "x" * (compact.MAX_REST + 1)}}, False),
        (
            {
                "usage": {"n": 2**70, "r": 0.1},
                "state": {"row": [1, None, True]},
                "traceparent": "00-ab-cd-01",
            },
            True,
        ),
    ],
)
def test_a_finished_run_is_stored_compact_and_read_back_field_for_field(
    changes: dict[str, Any], compact_form: bool
) -> None:
    run = _finished(**changes)
    stored = run.to_json()
    assert _is_compact(stored) is compact_form, stored[:200]
    assert Run.from_json(stored, run.id) == run and Run.from_json(stored.encode(), run.id) == run
    head = json.loads(stored)  # the fields the scripts read, plain in both forms
    assert (head["vendor"], head["status"], head["version"]) == (run.vendor, run.status, run.version)


def test_the_fields_past_the_version_take_well_under_their_plain_bytes() -> None:
    run = _finished()
    plain = msgspec.json.encode(run)  # with its id: the head's length is taken from the compact form
    stored = run.to_json().encode()
    head = stored.index(compact.MARK)
    rest = plain[plain.index(b',"version":14,') + len(b',"version":14,') :]
    assert len(stored) - head < 0.65 * len(rest), (len(stored) - head, len(rest))


def _rest_of(run: Run) -> bytes:
    plain = msgspec.json.encode(run)
    return plain[plain.index(b',"version":') :].split(b",", 2)[2]  # past the version and its comma


@pytest.mark.parametrize(("over", "compact_form"), [(0, True), (1, False)])
def test_a_rest_of_at_most_max_rest_bytes_is_packed(over: int, compact_form: bool) -> None:
    short = _finished(metadata={"pad": ""})
    run = _finished(metadata={"pad": "x" * (compact.MAX_REST - len(_rest_of(short)) + over)})
    assert len(_rest_of(run)) == compact.MAX_REST + over
    assert _is_compact(run.to_json()) is compact_form
    assert Run.from_json(run.to_json(), run.id) == run


def test_a_run_ended_with_no_field_past_its_version_stays_plain() -> None:
    plain = b'{"c":"a","vendor":"v","op":"o","ca":1,"ua":1,"status":"succeeded","version":3}'
    assert compact.compacted(plain) == plain and compact.expanded(plain) == plain


def test_no_stored_field_is_named_as_the_compact_forms_own() -> None:
    names = {STORED_NAMES.get(f.name, f.name) for f in msgspec.structs.fields(Run)}
    assert "z" not in names


def test_the_dictionary_is_frozen() -> None:
    # Stored records depend on its bytes: a new one needs a new field name, and readers keep this one.
    assert zlib.adler32(compact._DICTIONARY) == 0x08E3C6B7


def _stored() -> bytes:
    return _finished().to_json().encode()


def _with_packed(edit: Any) -> bytes:
    stored = _stored()
    at = stored.index(compact.MARK) + len(compact.MARK)
    packed = edit(base64.b64decode(stored[at:-2]))
    return stored[:at] + base64.b64encode(packed) + b'"}'


def _repacked(rest: bytes, crc: bytes | None = None) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -12, 4, zdict=compact._DICTIONARY)
    return _with_packed(
        lambda _: (crc or zlib.crc32(rest).to_bytes(4, "big")) + deflate.compress(rest) + deflate.flush()
    )


_DAMAGED = "fails its check: damaged"
_NOT_INFLATED = "does not inflate: .+"
_SHORT_OR_LONG = "is cut short or longer than one can be"


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        (_stored()[:-2] + b'=="}', _NOT_INFLATED),  # base64 padding in the middle
        (_stored().replace(compact.MARK, compact.MARK + b"!"), _NOT_INFLATED),  # not base64
        (_with_packed(lambda p: p[:-3]), _SHORT_OR_LONG),  # the deflate stream cut short
        (_with_packed(lambda p: p + b"\x00"), _SHORT_OR_LONG),  # a byte past its end
        (_with_packed(lambda p: p[:4] + bytes([p[4] ^ 0x40]) + p[5:]), f"{_NOT_INFLATED}|{_DAMAGED}"),
        (_with_packed(lambda p: bytes([p[0] ^ 1]) + p[1:]), _DAMAGED),  # its check damaged
        (_with_packed(lambda p: p[:4]), _SHORT_OR_LONG),  # nothing but its check
        (_repacked(b'"n":1}', crc=b"\x00\x00\x00\x00"), _DAMAGED),
        (_repacked(b'"m":{"k":"' + b"x" * compact.MAX_REST + b'"}}'), _SHORT_OR_LONG),  # past the bound
    ],
)
def test_a_damaged_compact_record_is_an_error_never_another_run(stored: bytes, why: str) -> None:
    with pytest.raises(ValueError) as raised:
        Run.from_json(stored, "run_1")
    assert re.fullmatch(f"not a run record: a compact run record ({why})", str(raised.value)), raised.value


def test_a_compact_record_cut_short_is_not_a_run_record() -> None:
    for cut in (1, 2, 10):
        with pytest.raises(ValueError, match=r"^not a run record: "):
            Run.from_json(_stored()[:-cut], "run_1")


def test_a_compact_record_inflating_to_max_rest_bytes_reads() -> None:
    rest = b'"m":{"k":"' + b"x" * (compact.MAX_REST - 13) + b'"}}'
    assert len(rest) == compact.MAX_REST
    assert Run.from_json(_repacked(rest), "run_1").metadata["k"] == "x" * (compact.MAX_REST - 13)


def test_a_compact_record_with_a_rest_of_its_own_reads_as_that_rest() -> None:
    # What the form promises: the head as written, then exactly the rest that was packed.
    stored = _repacked(b'"n":5}')
    assert Run.from_json(stored, "run_1").polls == 5
