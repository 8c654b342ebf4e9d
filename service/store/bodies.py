"""Event bodies as Redis keeps them (``hb:evt:{id}``, and the feed's own copies): deflated against a
preset dictionary of what every body repeats.

An event body is the exact bytes a callback carries, and most of them are the same keys and nulls around a
few ids and times: a ``run.submitted`` of ~530 bytes deflates to ~110 against :data:`_DICTIONARY` (~155 in
base64, with the mark). It is the largest key of a run in flight, so this takes ~400 bytes off each one in
Redis (docs/performance.md, Redis memory). The body is given back byte for byte (:func:`unpacked`).

A stored body is either a mark + the body deflated against the dictionary the mark names (the zlib format,
or from ``~5`` on raw deflate after a CRC-32: either way checked, never read as another body), or the body
itself: bodies written before this (every JSON body starts with ``{``), and those over
:data:`MAX_PACKED`, which stay as they are so that an inline result never holds the worker's event loop in
deflate. A dictionary is frozen with its mark: a new one needs a new mark, and readers keep the old ones.

- ``~1`` (the sixth round): base64 of the deflated body, against the submitted, succeeded and canceled
  bodies in a 2 KiB window;
- ``~2`` (:data:`MARK`, what is written now): the deflated bytes themselves (the scripts take bodies as
  arguments of their own, not inside their JSON, so nothing needs base64's third more), against a 4 KiB
  window over the same and a ``run.progress`` and a ``run.failed`` body, the vendors' names and status
  words. A ``run.progress`` (as many a run as the vendor reports; the feed keeps each one's body for
  ``RETENTION_S`` when no subscription asked for it) is stored in ~150 bytes where ``~1`` took ~250, the
  others in 60-70 % of ``~1``'s bytes.
- ``~3`` (:data:`RUN_MARK`; a body with a control character is still written so): a dictionary of
  ~1.1 KiB (a failed run's error, then the last KiB of ``~2``'s) with the run's id after it. The id is
  the one part of a body no shared dictionary holds (~20 bytes of a packed body); every reader of a run's
  event knows its run (the feed's entry names it, a delivery, the run's own history and result), and
  gives it to :func:`unpacked`. The zlib header names the dictionary by its Adler-32, so a body read with
  another run's id fails to inflate: never another body. An event of no run
  (``subscription.test``) is still ``~2``.
- ``~4`` (:data:`TOKEN_MARK`): ``~3`` over the body with each JSON
  string that is a lowercase UUID or a time of ``lifecycle``'s form (``2026-12-01T06:29:08.966Z``) as a
  token of bytes (:func:`tokenized`): deflate codes a literal in 8-9 bits, so a vendor's run id took ~36
  bytes of a packed body and three times ~10 each, where a token takes 17 and 1-9. A ``run.progress`` is
  stored in ~90 bytes where ``~3`` took ~116; the dictionary is ``~3``'s, tokenized the same way. A body
  with a control character (no JSON text has one, but :func:`packed` takes any text) stays ``~3``.
- ``~5`` (:data:`RAW_MARK`, what a run's events are written in now): ``~4`` without the zlib format's ten
  bytes of header and trailer: the CRC-32 of the run's id and the body (4 bytes), then the raw deflate of
  the tokens against ``~4``'s dictionary and the run's id. The check does what the header's Adler-32 of the
  dictionary and the trailer's of the body did: a body read with another run's id, or damaged, is an
  error, never another body. A ``run.progress`` is stored in ~82 bytes where ``~4`` took ~88.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib

from service.observability import logs

__all__ = [
    "MARK",
    "MAX_PACKED",
    "RAW_MARK",
    "RUN_MARKS",
    "packed",
    "tokenized",
    "unpacked",
    "unpacked_or_none",
    "untokenized",
]

log = logs.get("hookbridge.store")

MARK = b"~2"  # "~" starts no JSON; "2" names the form and the dictionary bodies are packed with
MAX_PACKED = 16 * 1024  # bytes of body; larger ones are stored as they are
# The zlib format (a 2 KiB window for ~1, 4 KiB for ~2: the whole of each dictionary): its header names the
# dictionary and its Adler-32 checks the body, so a damaged key is an error, never another body signed and
# sent. 10 bytes more than raw deflate (~5 keeps 4 of them: a CRC-32).
_WBITS = 11
_WBITS_2 = 12
_LEVEL = 6
_MEM_LEVEL = 2  # the deflate state's size: small bodies need little, and a smaller one is set up faster

# What event bodies repeat (service/core/lifecycle.py, service/api/subscriptions.py), the most common last:
# deflate finds a match at a shorter distance there. Never edit either: stored bodies depend on these bytes.
# ~1's, read only:
_DICTIONARY = (
    b'{"type":"subscription.test","timestamp":"2026-01-01T00:00:00.000Z","data":{"subscription_id":"sub_'
    b'","message":"This is a test event from hookbridge."}}'
    b'"error":{"code":"vendor_failed","message":"","vendor_status":"failed","details":'
    b'"progress":{"percent":50,"phase":"","message":""},'
    b'"usage":{"pages":1},"result_url":"/v1/runs/run_/result"'
    b'{"type":"run.canceled","timestamp":"2026-01-01T00:00:00.000Z","data":{"run":{"id":"run_",'
    b'"status":"canceled","vendor":"cloudsquid","operation":"extract","vendor_run_id":"","vendor_status":'
    b'"completed","progress":null,"metadata":{},"zero_retention":true,"created_at":"2026-01-01T00:00:00.000Z",'
    b'"updated_at":"2026-01-01T00:00:00.000Z","completed_at":"2026-01-01T00:00:00.000Z","polls":1,"error":'
    b'null,"usage":null,"vendor_deleted":true,"vendor_delete_error":null},"result":{},"result_url":null}}'
    b'{"type":"run.succeeded","timestamp":"2026-12-01T00:00:00.000Z","data":{"run":{"id":"run_01",'
    b'"status":"succeeded","vendor":"uptiq","operation":"extract","vendor_run_id":"","vendor_status":'
    b'"processing","progress":null,"metadata":{},"zero_retention":false,"created_at":"2026-12-01T00:00:00.000Z",'
    b'"updated_at":"2026-12-01T00:00:00.000Z","completed_at":null,"polls":0,"error":null,"usage":null,'
    b'"vendor_deleted":null,"vendor_delete_error":null},"result":null,"result_url":null}}'
    b'{"type":"run.submitted","timestamp":"2026-12-01T00:00:00.000Z","data":{"run":{"id":"run_01",'
    b'"status":"submitted","vendor":"nutrient","operation":"extract","vendor_run_id":"","vendor_status":'
    b'"processing","progress":null,"metadata":{},"zero_retention":false,"created_at":"2026-12-01T00:00:00.000Z",'
    b'"updated_at":"2026-12-01T00:00:00.000Z","completed_at":null,"polls":0,"error":null,"usage":null,'
    b'"vendor_deleted":null,"vendor_delete_error":null},"result":null,"result_url":null}}'
)
# ~2's: ~1's test event and pieces, the vendors' names and status words, then a body of each run event
# (a run.progress last: the most common) as lifecycle._event writes them, around empty ids.
_DICTIONARY_2 = (
    b'{"type":"subscription.test","timestamp":"2026-12-01T00:00:00.000Z","data":{"subscription_id":"sub_'
    b'","message":"This is a test event from hookbridge."}}"example":true, azure_di textract google_doca'
    b"i llamaparse cloudsquid uptiq analyze process parse classify split expense in_progress IN_PROGRESS"
    b' SUCCEEDED notStarted completed processing PENDING"usage":{"credits":1.0,"reported":{"pages":1}},"'
    b'result_url":"/v1/runs/run_/result"{"type":"run.canceled","timestamp":"2026-12-01T00:00:00.000Z","d'
    b'ata":{"run":{"id":"run_01","status":"canceled","vendor":"cloudsquid","operation":"extract","vendor'
    b'_run_id":"","vendor_status":"completed","progress":null,"metadata":{},"zero_retention":true,"creat'
    b'ed_at":"2026-12-01T00:00:00.000Z","updated_at":"2026-12-01T00:00:00.000Z","completed_at":"2026-12-'
    b'01T00:00:00.000Z","polls":1,"error":null,"usage":null,"vendor_deleted":true,"vendor_delete_error":'
    b'null},"result":{},"result_url":null}}{"type":"run.failed","timestamp":"2026-12-01T00:00:00.000Z","'
    b'data":{"run":{"id":"run_01","status":"failed","vendor":"uptiq","operation":"extract","vendor_run_i'
    b'd":"","vendor_status":"failed","progress":null,"metadata":{},"zero_retention":false,"created_at":"'
    b'2026-12-01T00:00:00.000Z","updated_at":"2026-12-01T00:00:00.000Z","completed_at":"2026-12-01T00:00'
    b':00.000Z","polls":1,"error":{"code":"vendor_failed","message":"","vendor_status":"failed","details'
    b'":null},"usage":null,"vendor_deleted":null,"vendor_delete_error":null},"result":null,"result_url":'
    b'null}}{"type":"run.succeeded","timestamp":"2026-12-01T00:00:00.000Z","data":{"run":{"id":"run_01",'
    b'"status":"succeeded","vendor":"nutrient","operation":"extract","vendor_run_id":"","vendor_status":'
    b'"done","progress":{"percent":100,"phase":"extraction","message":null},"metadata":{},"zero_retentio'
    b'n":false,"created_at":"2026-12-01T00:00:00.000Z","updated_at":"2026-12-01T00:00:00.000Z","complete'
    b'd_at":"2026-12-01T00:00:00.000Z","polls":1,"error":null,"usage":{"credits":1.0,"reported":{}},"ven'
    b'dor_deleted":null,"vendor_delete_error":null},"result":null,"result_url":null}}{"type":"run.submit'
    b'ted","timestamp":"2026-12-01T00:00:00.000Z","data":{"run":{"id":"run_01","status":"submitted","ven'
    b'dor":"nutrient","operation":"extract","vendor_run_id":"","vendor_status":"queued","progress":null,'
    b'"metadata":{"":""},"zero_retention":false,"created_at":"2026-12-01T00:00:00.000Z","updated_at":"20'
    b'26-12-01T00:00:00.000Z","completed_at":null,"polls":0,"error":null,"usage":null,"vendor_deleted":n'
    b'ull,"vendor_delete_error":null},"result":null,"result_url":null}}{"type":"run.progress","timestamp'
    b'":"2026-12-01T00:00:00.000Z","data":{"run":{"id":"run_01","status":"running","vendor":"nutrient","'
    b'operation":"extract","vendor_run_id":"","vendor_status":"running","progress":{"percent":50.0,"phas'
    b'e":"","message":null},"metadata":{},"zero_retention":false,"created_at":"2026-12-01T00:00:00.000Z"'
    b',"updated_at":"2026-12-01T00:00:00.000Z","completed_at":null,"polls":1,"error":null,"usage":null,"'
    b'vendor_deleted":null,"vendor_delete_error":null},"result":null,"result_url":null}}'
)

# Each mark's dictionary, window, and whether its bytes are base64.
_PACKINGS = {b"~1": (_DICTIONARY, _WBITS, True), b"~2": (_DICTIONARY_2, _WBITS_2, False)}
# ~3: a run's event, against its run's id after a dictionary of its own: the bytes of a run.failed's error
# and an end's time, then the last KiB of ~2's (a run.progress body, the most common, and the end of a
# run.submitted). The id is what no shared dictionary can hold (the body names its run once, a result_url
# twice); it goes last, where deflate finds it at the least distance, and the reader gives it (every reader
# of a run's event knows its run): the zlib header names the dictionary by its Adler-32, so another run's id
# fails to inflate, never gives another body. A deflate state is set up for
# each body (a dictionary of its own cannot be primed once), and loading ~1.1 KiB at level 3 takes less
# than copying ~2's primed state: ~8.5 us a body where ~2 took ~10.5, and 5-23 bytes fewer for every kind of
# run event (~2's whole dictionary would save 0-9 bytes more, at ~12 us). Never edit it: stored bodies
# depend on these bytes.
RUN_MARK = b"~3"
_LEVEL_3 = 3
_DICTIONARY_3 = (
    b'"error":{"code":"vendor_failed","message":"","vendor_status":"failed","details":null},"completed_at":'
    b'"2026-12-01T00:00:00.000Z"' + _DICTIONARY_2[-1024:]
)


def packed(body: str, run_id: str = "") -> bytes:
    """The stored form of ``body`` (an event's JSON): bytes, passed to the scripts as an argument of their
    own (never inside their JSON). An event of a run is packed against its run's id (``~5``, or ``~3`` for
    a text with a control character), which :func:`unpacked` is then given; one of no run
    (``subscription.test``) as ``~2``."""
    raw = body.encode()
    if len(raw) > MAX_PACKED:
        return raw
    if not run_id:
        return _deflated(raw)
    run = run_id.encode()
    if len(raw.translate(None, _CONTROLS)) == len(raw):  # no control byte (a scan 4x faster than a regex's)
        check = zlib.crc32(raw, zlib.crc32(run)).to_bytes(4, "big")
        deflate = zlib.compressobj(
            _LEVEL_3, zlib.DEFLATED, -_WBITS_2, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, _DICTIONARY_4 + run
        )
        return RAW_MARK + check + deflate.compress(tokenized(raw)) + deflate.flush()
    deflate = zlib.compressobj(
        _LEVEL_3, zlib.DEFLATED, _WBITS_2, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, _DICTIONARY_3 + run
    )
    return RUN_MARK + deflate.compress(raw) + deflate.flush()


# ~4's tokens: a JSON string (its quotes included) that is a lowercase UUID, or a time as lifecycle writes
# them (any digits in that shape: they come back as they were). No JSON text has a byte under 0x20, so a
# token's first byte cannot be text; what follows it is its own length.
TOKEN_MARK = b"~4"
RAW_MARK = b"~5"  # ~4's tokens and dictionary, raw deflate after a CRC-32 of the run's id and the body
RUN_MARKS = (RUN_MARK, TOKEN_MARK, RAW_MARK)  # the forms packed against their run's id
_UUID_TOKEN = 1  # then the 16 bytes
_TIME_TOKEN = 2  # then the time's 17 digits as a number, less the body's time before it, zigzag, LEB128
_UUID_BYTE, _TIME_BYTE = bytes((_UUID_TOKEN,)), bytes((_TIME_TOKEN,))
# The JSON string's quotes are the token's; its text is the split's group: 36 characters a UUID, 24 a time.
_TOKENS = re.compile(
    rb'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"'
)
_CONTROL = re.compile(rb"[\x00-\x1f]")
_CONTROLS = bytes(range(0x20))
_TIME_MARKS = b"-:.TZ"  # what a time has besides its 17 digits


def tokenized(text: bytes) -> bytes:
    """``text`` (no byte under 0x20) with its UUIDs and times as tokens: :func:`untokenized` gives it back.
    The regex splits the text in C; only the tokens are Python's (~6.4 us a ``run.progress`` where a
    substitution's callbacks took ~8)."""
    parts = _TOKENS.split(text)
    before = 0
    for at in range(1, len(parts), 2):
        token = parts[at]
        if len(token) == 36:
            parts[at] = _UUID_BYTE + binascii.unhexlify(token.replace(b"-", b""))
        else:
            value = int(token.translate(None, _TIME_MARKS))
            delta, before = value - before, value
            parts[at] = _TIME_BYTE + _leb128(delta << 1 if delta >= 0 else (~delta << 1) | 1)
    return b"".join(parts)


def _leb128(number: int) -> bytes:
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def untokenized(data: bytes) -> bytes:
    """The text :func:`tokenized` made ``data`` of. Raises ValueError for a token cut short or unknown."""
    out: list[bytes] = []
    at = before = 0
    try:
        while (found := _CONTROL.search(data, at)) is not None:
            start = found.start()
            out.append(data[at:start])
            kind = data[start]
            if kind == _UUID_TOKEN:
                digits = data[start + 1 : start + 17].hex()
                if len(digits) != 32:
                    raise IndexError
                out.append(
                    f'"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"'.encode()
                )
                at = start + 17
            elif kind == _TIME_TOKEN:
                number = shift = 0
                at = start + 1
                while True:
                    byte = data[at]
                    at += 1
                    number |= (byte & 0x7F) << shift
                    shift += 7
                    if byte < 0x80:
                        break
                before += number >> 1 if not number & 1 else ~(number >> 1)
                d = b"%017d" % before
                if before < 0 or len(d) != 17:  # no time of that shape: not a body tokenized() made
                    raise IndexError
                out.append(
                    b'"%s-%s-%sT%s:%s:%s.%sZ"' % (d[:4], d[4:6], d[6:8], d[8:10], d[10:12], d[12:14], d[14:])
                )
            else:
                raise IndexError
    except IndexError:
        raise ValueError("a stored event body has a token cut short or unknown") from None
    out.append(data[at:])
    return b"".join(out)


# ~4's dictionary: ~3's, tokenized as the bodies are (its times and the run id's place as they were).
# Never edit ~3's or tokenized(): stored bodies depend on these bytes.
_DICTIONARY_4 = tokenized(_DICTIONARY_3)


# A deflate state with the dictionary loaded, copied for each body: the same bytes as a fresh one, for
# about 7 us a body where setting one up took about 10.
_PRIMED = zlib.compressobj(
    _LEVEL, zlib.DEFLATED, _WBITS_2, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, _DICTIONARY_2
)


def _deflated(raw: bytes) -> bytes:
    """``raw`` in the packed form, whatever its size (:func:`packed` gives it only to small bodies)."""
    deflate = _PRIMED.copy()
    return MARK + deflate.compress(raw) + deflate.flush()


def unpacked(stored: bytes | str, run_id: str = "") -> bytes:
    """The body's exact bytes from its stored form (or from a body stored as it is); ``run_id``, the run
    of the event, for a body packed against it (:data:`RUN_MARKS`).

    Raises ValueError when a packed body does not inflate (a damaged key, or not the run's)."""
    data = stored.encode() if isinstance(stored, str) else bytes(stored)
    mark = data[:2]
    if mark in RUN_MARKS:
        if not run_id:
            raise ValueError("a stored event body packed against its run's id, read without it")
        run = run_id.encode()
        if mark == RAW_MARK:  # after the mark, the CRC-32 of the run's id and the body, then raw deflate
            body = untokenized(_inflated(data[6:], -_WBITS_2, _DICTIONARY_4 + run))
            if len(body) <= MAX_PACKED and zlib.crc32(body, zlib.crc32(run)).to_bytes(4, "big") != data[2:6]:
                raise ValueError("a stored event body fails its check: damaged, or not the run's")
        elif mark == TOKEN_MARK:
            body = untokenized(_inflated(data[2:], _WBITS_2, _DICTIONARY_4 + run))
        else:
            body = _inflated(data[2:], _WBITS_2, _DICTIONARY_3 + run)
    elif (packing := _PACKINGS.get(mark)) is not None:
        dictionary, wbits, base64_text = packing
        try:
            deflated = base64.b64decode(data[2:], validate=True) if base64_text else data[2:]
        except binascii.Error as exc:
            raise ValueError(f"a stored event body does not inflate: {exc}") from None
        body = _inflated(deflated, wbits, dictionary)
    else:
        return data
    if len(body) > MAX_PACKED:  # tokens spelled out past it
        raise ValueError("a stored event body is longer than a packed body can be")
    return body


def _inflated(deflated: bytes, wbits: int, dictionary: bytes) -> bytes:
    """``deflated`` inflated whole against ``dictionary``: never more than a packed body can hold (a key
    that inflates past it is not one of ours), nor a stream cut short or with bytes past its end."""
    try:
        inflate = zlib.decompressobj(wbits, dictionary)
        out = inflate.decompress(deflated, MAX_PACKED + 1)
    except zlib.error as exc:
        raise ValueError(f"a stored event body does not inflate: {exc}") from None
    if not inflate.eof or inflate.unused_data or len(out) > MAX_PACKED:
        raise ValueError("a stored event body is cut short or longer than a packed body can be")
    return out


def unpacked_or_none(stored: bytes | str, run_id: str = "") -> bytes | None:
    """:func:`unpacked`, or None (logged) for a body that does not inflate: the readers treat it as an
    event no longer kept, as they do an expired one."""
    try:
        return unpacked(stored, run_id)
    except ValueError as exc:
        log.warning("event body unreadable", error=str(exc))
        return None
