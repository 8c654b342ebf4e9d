"""How a feed entry stores its event (service/store/feedform.py): the short forms, the filters that match
both forms, and an entry of either form named back in full; tables, no Redis (tests/store/test_feed.py
reads both forms through read_feed.lua)."""

from __future__ import annotations

import pytest

from service.core import domain
from service.store import feedform
from service.vendors import registry

RUN = domain.new_id("run")
EVENT = domain.new_id_beside("evt", RUN)


def _bits(identifier: str) -> bytes:
    """How a minted id is stored: a zero byte, then the 128 bits its 26 characters after the prefix stand
    for (worked out here by hand, not by the code under test)."""
    value = 0
    for char in identifier[4:]:
        value = value * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".index(char)
    return b"\x00" + value.to_bytes(16, "big")


@pytest.mark.parametrize(
    ("full", "stored"),
    [
        (EVENT, _bits(EVENT)),  # as minted: 17 bytes where its text took 30
        ("evt_" + "7" + "Z" * 25, _bits("evt_" + "7" + "Z" * 25)),  # the largest that fits 128 bits
        ("evt_" + "8" + "0" * 25, b"evt_8" + b"0" * 25),  # past 128 bits: kept whole
        ("evt_test", b"evt_test"),  # any other shape is kept whole, and reads back whole
        ("evt_" + "A" * 27, b"evt_" + b"A" * 27),
        ("evt_" + "a" * 26, b"evt_" + b"a" * 26),  # not Crockford's (lower case)
        ("run_" + "A" * 26, b"run_" + b"A" * 26),  # another prefix
        ("evt_run_a_1_13", b"evt_run_a_1_13"),
        ("evt_" + "B" * 13, b"evt_" + b"B" * 13),  # 17 bytes as text: not the bits' form (no zero byte)
    ],
)
def test_an_event_id_is_stored_as_bits_only_when_it_reads_back_the_same(full: str, stored: bytes) -> None:
    assert feedform.stored_event_id(full) == stored
    assert feedform.event_id(stored) == full


@pytest.mark.parametrize("stored", [EVENT[4:], EVENT[4:].encode(), EVENT, "evt_test"])
def test_an_event_id_of_the_forms_before_reads_back_the_same(stored: str | bytes) -> None:
    # The version before stored a minted id as its 26 characters; the one before that, whole.
    full = stored if isinstance(stored, str) and stored.startswith("evt_") else EVENT
    assert feedform.event_id(stored) == full


@pytest.mark.parametrize(
    ("full", "filters"),
    [
        (RUN, (RUN, RUN[4:], _bits(RUN))),  # whole, the 26 characters, the bits: every form an entry has
        ("run_a", ("run_a", "run_a", b"run_a")),
        ("", ("", "", b"")),  # any run
        ("evt_" + "A" * 26, ("evt_" + "A" * 26, "evt_" + "A" * 26, b"evt_" + b"A" * 26)),
    ],
)
def test_a_run_id_is_matched_in_every_form_an_entry_may_store_it(
    full: str, filters: tuple[str, str, bytes]
) -> None:
    assert feedform.run_filter(full) == filters
    assert feedform.stored_run_id(full) == filters[2]
    assert feedform.run_id(filters[2]) == full


def test_every_event_type_has_its_own_one_character_code_and_the_codes_never_change() -> None:
    # Entries kept for RETENTION_S are read with these: a change would misname every one of them.
    assert feedform.TYPE_CODES == {
        "run.submitted": "s",
        "run.progress": "p",
        "run.succeeded": "d",
        "run.failed": "f",
        "run.canceled": "c",
        "subscription.test": "t",
    }
    assert set(feedform.TYPE_CODES) == set(domain.EVENT_TYPES)
    assert {feedform.type_code(t) for t in domain.EVENT_TYPES} == set(feedform.TYPES)
    assert feedform.type_code("run.unknown") == "run.unknown"  # a type of no code, as it is


def test_every_vendor_has_its_own_one_character_code_and_the_codes_never_change() -> None:
    # Entries kept for RETENTION_S are read with these: a change would misname every one of them.
    assert feedform.VENDOR_CODES == {
        "azure_di": "A",
        "cloudsquid": "C",
        "google_docai": "G",
        "llamaparse": "L",
        "nutrient": "N",
        "textract": "T",
        "uptiq": "U",
    }
    assert set(feedform.VENDOR_CODES) == set(registry.vendors())  # a vendor added takes a code
    assert not any(registry._NAME.match(code) for code in feedform.VENDORS)  # no name reads as a code
    assert feedform.vendor_filter("textract") == ("textract", "T")
    assert feedform.vendor_filter("acme_ocr") == ("acme_ocr", "acme_ocr")  # a vendor of no code, as it is
    assert feedform.vendor_filter("") == ("", "")  # any


@pytest.mark.parametrize(
    ("types", "matched"),
    [
        ((), []),  # every type
        (("run.progress",), ["run.progress", "p"]),
        (("run.succeeded", "subscription.test"), ["run.succeeded", "d", "subscription.test", "t"]),
        (("run.*",), ["run.*", "s", "p", "d", "f", "c"]),  # every run event: spelled out by its start
        (("run.unknown",), ["run.unknown"]),
    ],
)
def test_a_types_filter_names_each_type_in_both_forms(types: tuple[str, ...], matched: list[str]) -> None:
    assert feedform.types_filter(types) == matched


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # This version's: five fields, the ids as bits, the vendor's code; b a packed body, or its size in
        # digits.
        (
            {b"e": _bits(EVENT), b"t": b"p", b"r": _bits(RUN), b"v": b"N", b"b": b"~4xyz"},
            feedform.Entry(EVENT, "run.progress", RUN, "nutrient", b"~4xyz", 5),
        ),
        (
            {b"e": _bits(EVENT), b"t": b"d", b"r": _bits(RUN), b"v": b"G", b"b": b"480"},
            feedform.Entry(EVENT, "run.succeeded", RUN, "google_docai", None, 480),
        ),
        (
            {b"e": _bits(EVENT), b"t": b"p", b"r": _bits(RUN), b"v": b"acme_ocr", b"b": b"~4xyz"},
            feedform.Entry(EVENT, "run.progress", RUN, "acme_ocr", b"~4xyz", 5),  # a vendor of no code
        ),
        # The version before: the vendor spelled out.
        (
            {b"e": _bits(EVENT), b"t": b"p", b"r": _bits(RUN), b"v": b"nutrient", b"b": b"~4xyz"},
            feedform.Entry(EVENT, "run.progress", RUN, "nutrient", b"~4xyz", 5),
        ),
        (
            {b"e": _bits(EVENT), b"t": b"t", b"r": b"", b"v": b"", b"b": b"{}"},
            feedform.Entry(EVENT, "subscription.test", "", "", b"{}", 2),
        ),
        # Before that: the ids as their 26 characters.
        (
            {b"e": EVENT[4:], b"t": b"p", b"r": RUN[4:], b"v": b"nutrient", b"b": b"~2xyz"},
            feedform.Entry(EVENT, "run.progress", RUN, "nutrient", b"~2xyz", 5),
        ),
        (
            {b"e": EVENT[4:], b"t": b"s", b"r": RUN[4:], b"v": b"nutrient", b"b": b"119"},
            feedform.Entry(EVENT, "run.submitted", RUN, "nutrient", None, 119),
        ),
        (
            {b"e": EVENT[4:], b"t": b"t", b"r": b"", b"v": b"", b"b": b"{}"},
            feedform.Entry(EVENT, "subscription.test", "", "", b"{}", 2),
        ),
        # Written before: prefixes kept, the type spelled out, the size in n, no r or v when empty.
        (
            {b"e": EVENT, b"t": b"run.succeeded", b"r": RUN, b"v": b"uptiq", b"n": b"200"},
            feedform.Entry(EVENT, "run.succeeded", RUN, "uptiq", None, 200),
        ),
        (
            {"e": "evt_test", "t": "subscription.test", "b": "{}"},
            feedform.Entry("evt_test", "subscription.test", "", "", b"{}", 2),
        ),
    ],
)
def test_an_entry_of_either_form_is_named_back_in_full(
    fields: dict[object, object], expected: feedform.Entry
) -> None:
    assert feedform.entry(fields) == expected
