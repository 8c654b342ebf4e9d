"""Event bodies in their stored form (``service/store/bodies.py``): any body comes back byte for byte, a
body written before the packing reads as it is, and a damaged one is an error, not a wrong body."""

from __future__ import annotations

import base64
import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.store import bodies

SUBMITTED = (
    '{"type":"run.submitted","timestamp":"2026-12-01T06:28:08.971Z","data":{"run":{"id":'
    '"run_01M8R4M346Q4F8GCQE2261V99C","status":"submitted","vendor":"nutrient","operation":"extract",'
    '"vendor_run_id":"23X4PDC53Z1T7XSSG8KCHZ4SZM","vendor_status":"queued","progress":null,"metadata":'
    '{"team":"billing"},"zero_retention":false,"created_at":"2026-12-01T06:28:08.966Z","updated_at":'
    '"2026-12-01T06:28:08.971Z","completed_at":null,"polls":0,"error":null,"usage":null,"vendor_deleted":'
    'null,"vendor_delete_error":null},"result":null,"result_url":null}}'
)

# SUBMITTED as the sixth round packed it (mark ~1, its dictionary): bodies written then still read.
SUBMITTED_1 = (
    "~1OKw8qUM0IzlqzayMLKwMLPQszQ3xR62vRZCJr7GJWaCJm4W7c6CrkZGZYZilpTP1o9zIOMIkwMXZ1DjKMMQ8IjjY3cLb2SPKJDjKF0t"
    "iKCxNLSVUnCuVpCbmAtUmZebkgFINGQkDHkxmZngTBlpwDp6EAQC/fK1E"
)
PROGRESS = (
    '{"type":"run.progress","timestamp":"2026-12-02T16:41:09.305Z","data":{"run":{"id":'
    '"run_01M8VT4NE8S9R7C0FX0W5Q3YJZ","status":"running","vendor":"nutrient","operation":"extract",'
    '"vendor_run_id":"5d41402a-bc4b-2a76-b971-9d911017c592","vendor_status":"running","progress":{"percent":'
    '40.0,"phase":"ocr","message":null},"metadata":{"i":"4182"},"zero_retention":false,"created_at":'
    '"2026-12-02T16:40:08.071Z","updated_at":"2026-12-02T16:41:09.305Z","completed_at":null,"polls":5,'
    '"error":null,"usage":null,"vendor_deleted":null,"vendor_delete_error":null},"result":null,'
    '"result_url":null}}'
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_comes_back_byte_for_byte(body: str) -> None:
    stored = bodies.packed(body)
    assert bodies.unpacked(stored) == body.encode()
    assert bodies.unpacked(bytearray(stored)) == body.encode()


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
    )
)
def test_any_json_comes_back_byte_for_byte(value: object) -> None:
    body = json.dumps({"type": "run.progress", "data": value}, ensure_ascii=False)
    assert bodies.unpacked(bodies.packed(body)) == body.encode()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096) | st.sampled_from([SUBMITTED.encode(), PROGRESS.encode()]))
def test_a_body_is_packed_as_a_deflate_set_up_for_it_alone_would_pack_it(raw: bytes) -> None:
    # The packing copies one primed deflate state per body: the bytes must be a fresh state's, so no
    # body leaves anything behind for the next.
    fresh = zlib.compressobj(
        bodies._LEVEL,
        zlib.DEFLATED,
        bodies._WBITS_2,
        bodies._MEM_LEVEL,
        zlib.Z_DEFAULT_STRATEGY,
        bodies._DICTIONARY_2,
    )
    assert bodies._deflated(raw) == bodies.MARK + fresh.compress(raw) + fresh.flush()
    assert bodies._deflated(raw) == bodies._deflated(raw)


def test_an_event_body_is_stored_in_under_a_quarter_of_its_bytes() -> None:
    stored = bodies.packed(SUBMITTED)
    assert stored.startswith(bodies.MARK)
    assert len(stored) < len(SUBMITTED) / 4, (len(stored), len(SUBMITTED))


def test_a_progress_body_is_stored_in_under_a_third_of_its_bytes() -> None:
    # The feed keeps one for every run.progress that no subscription asked for: ~1 took 242 of these
    # 580 bytes (over two fifths), ~2 takes ~140.
    stored = bodies.packed(PROGRESS)
    assert stored.startswith(b"~2") and bodies.unpacked(stored) == PROGRESS.encode()
    assert len(stored) < len(PROGRESS) / 3, (len(stored), len(PROGRESS))


def test_a_body_packed_with_the_first_dictionary_still_reads() -> None:
    assert bodies.unpacked(SUBMITTED_1) == SUBMITTED.encode()
    assert bodies.unpacked(SUBMITTED_1.encode()) == SUBMITTED.encode()
    assert bodies.unpacked_or_none(SUBMITTED_1[:-8]) is None  # ~1's check still holds


def test_a_body_written_before_packing_reads_as_it_is() -> None:
    assert bodies.unpacked(SUBMITTED.encode()) == SUBMITTED.encode()
    assert bodies.unpacked(SUBMITTED) == SUBMITTED.encode()


def test_a_body_over_the_limit_is_stored_as_it_is() -> None:
    big = json.dumps({"type": "run.succeeded", "data": {"result": "x" * bodies.MAX_PACKED}})
    assert bodies.packed(big) == big.encode()
    assert bodies.unpacked(bodies.packed(big)) == big.encode()
    # The largest packed one still comes back.
    edge = "y" * bodies.MAX_PACKED
    assert (
        bodies.packed(edge).startswith(bodies.MARK) and bodies.unpacked(bodies.packed(edge)) == edge.encode()
    )


@pytest.mark.parametrize(
    "damaged",
    [
        b"~1!!not base64!!",
        b"~1AAAA",  # base64, not deflate
        bodies.MARK + b"\x00\x01 not deflate",
        bodies.packed(SUBMITTED)[:-8],  # cut short
        bodies.packed(SUBMITTED) + b"\x00",  # a byte past its end
        bodies.MARK + bodies.packed(SUBMITTED)[len(bodies.MARK) :][::-1],
        SUBMITTED_1[:2].encode() + base64.b64encode(bodies.packed(SUBMITTED)[2:]),  # ~2's under ~1's mark
    ],
)
def test_a_damaged_body_is_an_error_and_readers_treat_it_as_gone(damaged: bytes) -> None:
    with pytest.raises(ValueError):
        bodies.unpacked(damaged)
    assert bodies.unpacked_or_none(damaged) is None


def test_a_key_that_inflates_past_a_packed_body_is_refused_not_inflated_whole() -> None:
    # Not one of ours (packed() keeps bodies over MAX_PACKED as they are): a megabyte of zeros in the
    # packed form inflates only as far as the limit.
    bomb = bodies._deflated(b"0" * 2**20)
    assert len(bomb) < 2_000  # the kind of key that would inflate a thousandfold
    with pytest.raises(ValueError, match="longer than a packed body"):
        bodies.unpacked(bomb)


# ~3: a run's event packed against its run's id ---------------------------------------------------------
RUN_S = json.loads(SUBMITTED)["data"]["run"]["id"]
RUN_P = json.loads(PROGRESS)["data"]["run"]["id"]


@settings(max_examples=200, deadline=None)
@given(st.text(), st.from_regex(r"run_[0-9A-HJKMNP-TV-Z]{26}", fullmatch=True))
def test_a_runs_event_comes_back_byte_for_byte_given_its_run(body: str, run_id: str) -> None:
    stored = bodies.packed(body, run_id)
    assert stored.startswith(bodies.RUN_MARKS) or len(body.encode()) > bodies.MAX_PACKED
    assert bodies.unpacked(stored, run_id) == body.encode()


def _ended(word: str) -> str:
    """SUBMITTED as the run's end of that kind would carry it."""
    body = SUBMITTED.replace("run.submitted", f"run.{word}")
    body = body.replace('"status":"submitted"', f'"status":"{word}"')
    body = body.replace('"completed_at":null', '"completed_at":"2026-12-01T06:29:08.966Z"')
    if word == "failed":
        error = (
            '{"code":"vendor_failed","message":"the file is encrypted","vendor_status":"failed",'
            '"details":null}'
        )
        body = body.replace('"error":null', f'"error":{error}')
    return body


@pytest.mark.parametrize(
    "reader_run",
    [
        "",  # read without its run: an error, never the packed bytes as a body
        RUN_P,  # another run's id: the check (the run's id and the body) does not match
        RUN_S[:-1] + ("A" if RUN_S[-1] != "A" else "B"),  # one character off
    ],
)
def test_a_runs_event_read_without_its_own_run_is_an_error_never_another_body(reader_run: str) -> None:
    stored = bodies.packed(SUBMITTED, RUN_S)
    with pytest.raises(ValueError):
        bodies.unpacked(stored, reader_run)
    assert bodies.unpacked_or_none(stored, reader_run) is None


def test_bodies_packed_before_read_the_same_whatever_run_the_reader_gives() -> None:
    # A reader of a run's events gives the run's id for every body; those packed before ~3 ignore it.
    for stored in (bodies.packed(SUBMITTED), SUBMITTED_1, SUBMITTED):
        assert bodies.unpacked(stored, RUN_S) == SUBMITTED.encode()


# ~4: ~3 with a body's UUIDs and times as tokens -----------------------------------------------------------
_UUIDS = st.from_regex(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", fullmatch=True)
_TIMES = st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text() | _UUIDS | _TIMES | _UUIDS.map(json.dumps) | _TIMES.map(json.dumps)))
def test_text_of_uuids_and_times_comes_back_byte_for_byte(pieces: list[str]) -> None:
    # Tokens next to each other, inside other text, in any order (a time before an earlier one), any digits.
    raw = "".join(pieces).encode()
    if not any(byte < 0x20 for byte in raw):
        assert bodies.untokenized(bodies.tokenized(raw)) == raw
    body = "".join(pieces)
    assert bodies.unpacked(bodies.packed(body, RUN_S), RUN_S) == body.encode()


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        # A JSON string of exactly a lowercase UUID: its marker and 16 bytes, the quotes included.
        (
            b'{"a":"5d41402a-bc4b-2a76-b971-9d911017c592"}',
            b'{"a":\x01' + bytes.fromhex("5d41402abc4b2a76b9719d911017c592") + b"}",
        ),
        # A time: its 17 digits as a number, less the time before it (zigzag, LEB128): 0, then +1 ms, -1 ms.
        (b'["0000-00-00T00:00:00.000Z"]', b"[\x02\x00]"),
        (b'["0000-00-00T00:00:00.001Z","0000-00-00T00:00:00.000Z"]', b"[\x02\x02,\x02\x01]"),
        # Seven bits a byte, the last without its high bit: +64 ms (zigzag 128), then -64 (127, one byte).
        (b'["0000-00-00T00:00:00.064Z","0000-00-00T00:00:00.000Z"]', b"[\x02\x80\x01,\x02\x7f]"),
        # Not a whole string, upper case, or another shape of time: text as it is.
        (b'{"a":"x5d41402a-bc4b-2a76-b971-9d911017c592"}', b'{"a":"x5d41402a-bc4b-2a76-b971-9d911017c592"}'),
        (b'"5D41402A-BC4B-2A76-B971-9D911017C592"', b'"5D41402A-BC4B-2A76-B971-9D911017C592"'),
        (
            b'"2026-12-01T06:29:08Z" 2026-12-01T06:29:08.966Z',
            b'"2026-12-01T06:29:08Z" 2026-12-01T06:29:08.966Z',
        ),
    ],
)
def test_what_becomes_a_token(text: bytes, tokens: bytes) -> None:
    assert bodies.tokenized(text) == tokens
    assert bodies.untokenized(tokens) == text


def _packed_as(mark: bytes, dictionary: bytes, raw: bytes, run_id: str, wbits: int = 12) -> bytes:
    """``raw`` deflated as a form packed against its run is (``~3``, or ``~4`` given its tokens; raw
    deflate with ``wbits`` -12), by hand."""
    deflate = zlib.compressobj(
        3, zlib.DEFLATED, wbits, 2, zlib.Z_DEFAULT_STRATEGY, dictionary + run_id.encode()
    )
    return mark + deflate.compress(raw) + deflate.flush()


def _as_5(raw: bytes, run_id: str, check: int | None = None) -> bytes:
    """``raw`` in the ``~5`` form, by hand: the CRC-32 of the run's id and the body (or ``check``), then
    ``raw``'s tokens deflated raw."""
    if check is None:
        check = zlib.crc32(run_id.encode() + raw)
    tokens = _packed_as(b"", bodies._DICTIONARY_4, bodies.tokenized(raw), run_id, wbits=-12)
    return bodies.RAW_MARK + check.to_bytes(4, "big") + tokens


@pytest.mark.parametrize(
    ("body", "run_id", "fewer_than_2", "fewer_than_3"),
    [
        (SUBMITTED, RUN_S, 21, 14),  # its vendor run id is not a UUID: against ~3, the times alone
        (PROGRESS, RUN_P, 21, 31),
        (_ended("succeeded"), RUN_S, 11, 18),
        (_ended("failed"), RUN_S, 11, 18),
        (_ended("canceled"), RUN_S, 11, 18),
    ],
)
def test_a_runs_event_is_stored_in_fewer_bytes_than_in_the_forms_before(
    body: str, run_id: str, fewer_than_2: int, fewer_than_3: int
) -> None:
    # The feed keeps a run.progress body for RETENTION_S (most of a run's bytes while the vendor reports
    # progress). Against ~2: its run's id, which no shared dictionary holds, took ~20 of its ~140 bytes
    # (every other kind is smaller too: the run's forms' own dictionary holds a failed run's error).
    # Against ~3: a UUID took ~36 bytes and a time ~10, as literals. Against ~4: the zlib format's header
    # and trailer (10 bytes) where a CRC-32 takes 4.
    now = bodies.packed(body, run_id)
    as_3 = _packed_as(bodies.RUN_MARK, bodies._DICTIONARY_3, body.encode(), run_id)
    as_4 = _packed_as(bodies.TOKEN_MARK, bodies._DICTIONARY_4, bodies.tokenized(body.encode()), run_id)
    assert now == _as_5(body.encode(), run_id) and bodies.unpacked(now, run_id) == body.encode()
    assert bodies.unpacked_or_none(now, run_id) == body.encode()
    assert bodies.unpacked(as_3, run_id) == bodies.unpacked(as_4, run_id) == body.encode()  # both still read
    assert len(now) <= len(bodies.packed(body)) - fewer_than_2, (len(now), len(bodies.packed(body)))
    assert len(now) <= len(as_3) - fewer_than_3, (len(now), len(as_3))
    assert len(now) == len(as_4) - 6


_RIGHT = zlib.crc32(RUN_P.encode() + PROGRESS.encode())


@pytest.mark.parametrize(
    ("damaged", "why"),
    [
        (_as_5(PROGRESS.encode(), RUN_P)[:-3], "cut short"),
        (_as_5(PROGRESS.encode(), RUN_P) + b"\x00", "cut short"),  # a byte past its end: as unsure
        (_as_5(PROGRESS.encode(), RUN_P, check=_RIGHT ^ 1), "fails its check"),
        (_as_5(PROGRESS.encode(), RUN_P, check=zlib.crc32(PROGRESS.encode())), "fails its check"),  # no run
        (_as_5(PROGRESS.replace("ocr", "OCR").encode(), RUN_P, check=_RIGHT), "fails its check"),
        (bodies.RAW_MARK + b"\x00\x01", "cut short"),  # no deflate at all
        (bodies.RAW_MARK + b"\x00" * 4 + b"\xff" * 8, "does not inflate"),
    ],
)
def test_a_damaged_raw_body_fails_its_check_never_reads_as_another(damaged: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        bodies.unpacked(damaged, RUN_P)
    assert bodies.unpacked_or_none(damaged, RUN_P) is None
    with pytest.raises(ValueError, match="read without it"):
        bodies.unpacked(damaged)


def test_a_raw_body_as_long_as_a_packed_body_can_be_reads_and_one_byte_more_is_refused() -> None:
    edge = "y" * bodies.MAX_PACKED
    assert bodies.packed(edge, RUN_P).startswith(bodies.RAW_MARK)
    assert bodies.unpacked(bodies.packed(edge, RUN_P), RUN_P) == edge.encode()
    as_4 = _packed_as(bodies.TOKEN_MARK, bodies._DICTIONARY_4, edge.encode(), RUN_P)  # ~4 still reads it
    assert bodies.unpacked(as_4, RUN_P) == edge.encode()
    # Not one of ours (packed() keeps a longer body as it is), built by hand with a right check.
    over = "y" * (bodies.MAX_PACKED + 1)
    with pytest.raises(ValueError, match="longer than a packed body"):
        bodies.unpacked(_as_5(over.encode(), RUN_P), RUN_P)
    # Tokens that spell out past it: each time token is two bytes for 26 characters.
    spelled = '"2026-12-01T06:29:08.966Z"' * (bodies.MAX_PACKED // 26 + 1)
    with pytest.raises(ValueError, match="longer than a packed body"):
        bodies.unpacked(_as_5(spelled.encode(), RUN_P), RUN_P)


def test_a_body_with_a_control_character_is_packed_as_before() -> None:
    body = PROGRESS.replace("ocr", "o\x01cr")
    stored = bodies.packed(body, RUN_P)
    assert stored.startswith(bodies.RUN_MARK) and bodies.unpacked(stored, RUN_P) == body.encode()
    assert bodies.unpacked_or_none(stored, RUN_S) is None  # against its run's id: another's fails


@pytest.mark.parametrize(
    "tokens",
    [
        b"\x01" + b"\xab" * 15,
        b"[\x02\x80",
        b"\x03",
        b"\x00",
        b"\x02\x01",
        b"\x02\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
    ],
)
def test_a_token_cut_short_or_unknown_is_an_error(tokens: bytes) -> None:
    # Cut short; an unknown kind; a time before the year 0 or past 17 digits.
    stored = _packed_as(bodies.TOKEN_MARK, bodies._DICTIONARY_4, tokens, RUN_P)  # its Adler-32 is right
    with pytest.raises(ValueError, match="token"):
        bodies.unpacked(stored, RUN_P)
    assert bodies.unpacked_or_none(stored, RUN_P) is None


def test_the_dictionaries_are_frozen() -> None:
    # Stored bodies name their dictionary by its Adler-32: a change to ~3's bytes or to tokenized() would
    # make every body kept for RETENTION_S unreadable.
    assert zlib.adler32(bodies._DICTIONARY_3) == 0x4342780D
    assert zlib.adler32(bodies._DICTIONARY_4) == 0x7EBE58E3
