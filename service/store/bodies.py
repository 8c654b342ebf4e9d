"""Event bodies as Redis keeps them (``hb:evt:{id}``, and the feed's own copies): deflated against a
preset dictionary of what every body repeats.

An event body is the exact bytes a callback carries, and most of them are the same keys and nulls around a
few ids and times: a ``run.submitted`` of ~530 bytes deflates to ~110 against :data:`_DICTIONARY` (~155 in
base64, with the mark). It is the largest key of a run in flight, so this takes ~400 bytes off each one in
Redis (docs/performance.md, Redis memory). The body is given back byte for byte (:func:`unpacked`).

A stored body is either ``MARK`` + base64 of the body deflated (zlib format), or the body itself: bodies
written before this (every JSON body starts with ``{``), and those over :data:`MAX_PACKED`, which stay as
they are so that an inline result never holds the worker's event loop in deflate. The dictionary is frozen
with its mark: a new one needs a new mark, and readers keep the old one.
"""

from __future__ import annotations

import base64
import binascii
import zlib

from service import logs

__all__ = ["MARK", "MAX_PACKED", "packed", "unpacked", "unpacked_or_none"]

log = logs.get("hookbridge.store")

MARK = "~1"  # "~" starts no JSON; "1" names the dictionary below
_MARK = MARK.encode()
MAX_PACKED = 16 * 1024  # bytes of body; larger ones are stored as they are
# The zlib format (a 2 KiB window): its header names the dictionary and its Adler-32 checks the body, so
# a damaged key is an error, never another body signed and sent. 10 bytes more than raw deflate.
_WBITS = 11
_LEVEL = 6
_MEM_LEVEL = 2  # the deflate state's size: small bodies need little, and a smaller one is set up faster

# What event bodies repeat (service/lifecycle.py, service/api/subscriptions.py), the most common last:
# deflate finds a match at a shorter distance there. Never edit: stored bodies depend on these bytes.
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


def packed(body: str) -> str:
    """The stored form of ``body`` (an event's JSON)."""
    raw = body.encode()
    return body if len(raw) > MAX_PACKED else _deflated(raw)


def _deflated(raw: bytes) -> str:
    """``raw`` in the packed form, whatever its size (:func:`packed` gives it only to small bodies)."""
    deflate = zlib.compressobj(
        _LEVEL, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, _DICTIONARY
    )
    return MARK + base64.b64encode(deflate.compress(raw) + deflate.flush()).decode("ascii")


def unpacked(stored: bytes | str) -> bytes:
    """The body's exact bytes from its stored form (or from a body stored as it is).

    Raises ValueError when a packed body does not inflate (a damaged key)."""
    data = stored.encode() if isinstance(stored, str) else bytes(stored)
    if not data.startswith(_MARK):
        return data
    try:
        inflate = zlib.decompressobj(_WBITS, _DICTIONARY)
        # Never more than a packed body can hold: a key that inflates past it is not one of ours.
        body = inflate.decompress(base64.b64decode(data[len(_MARK) :], validate=True), MAX_PACKED + 1)
    except (binascii.Error, zlib.error) as exc:
        raise ValueError(f"a stored event body does not inflate: {exc}") from None
    if not inflate.eof or len(body) > MAX_PACKED:
        raise ValueError("a stored event body is cut short or longer than a packed body can be")
    return body


def unpacked_or_none(stored: bytes | str) -> bytes | None:
    """:func:`unpacked`, or None (logged) for a body that does not inflate: the readers treat it as an
    event no longer kept, as they do an expired one."""
    try:
        return unpacked(stored)
    except ValueError as exc:
        log.warning("event body unreadable", error=str(exc))
        return None
