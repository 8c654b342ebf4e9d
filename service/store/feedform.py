"""How an entry of a client's feed (``keys.client_feed``, a Redis Stream kept for ``RETENTION_S``) stores
its event: written by ``lua/_fanout.lua``'s ``append_feed`` with what ``fanout.feed_call`` gives it (the
stored forms below), read by ``lua/read_feed.lua`` with the filters :func:`types_filter` and
:func:`run_filter` give it, and named back by :func:`event_id` and :func:`run_id`.

The feed is most of what a run costs Redis while the vendor reports progress: one entry per ``run.progress``
(at most one per ``PROGRESS_MIN_INTERVAL_S``), most of them carrying their body, kept for ``RETENTION_S``
(docs/performance.md, Redis memory). So an entry is written short, five fields, always the same five:

- ``e``: the event id as 17 bytes, :data:`BINARY` then the 128 bits that ``domain.new_id`` writes as 26
  Crockford characters after the prefix (:func:`stored_event_id`); an id of another shape as it is;
- ``t``: the type as one character (:data:`TYPE_CODES`), a type of no code as it is;
- ``r``: the run id the same way, or ``""`` for an event of no run (``subscription.test``);
- ``v``: the run's vendor as one character (:data:`VENDOR_CODES`), a vendor of no code as it is, or ``""``;
- ``b``: the packed body (``bodies.packed``: it starts with ``~``, or ``{`` when kept as it is) when the
  feed keeps it, else the body's size in decimal digits (the event's own key keeps it; a page's bound).

Every entry having the fields of the first entry of its stream node lets Redis store them once a node,
not once an entry. Together these take ~40 bytes off an entry of ~250 (``python -m bench.memory``).

Entries written before still read, and match the same filters (each filter names every form):

- the vendor spelled out, where it is now one character (~7 bytes an entry);
- before that, the ids as 26 characters, without their prefix, where the stored form is now 17 bytes;
- before that, the ``evt_`` and ``run_`` kept, the type spelled out, ``r`` and ``v`` left out when empty,
  the size in a field ``n``.

No text id has the byte :data:`BINARY`, so the forms never meet. Stored entries depend on these codes and
forms: never change one; a new type takes a new code."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.core import domain

# One character per event type, in the stream's field ``t``. Never change one: entries kept for
# RETENTION_S are read with these.
TYPE_CODES: dict[str, str] = {
    domain.EVENT_SUBMITTED: "s",
    domain.EVENT_PROGRESS: "p",
    domain.EVENT_SUCCEEDED: "d",
    domain.EVENT_FAILED: "f",
    domain.EVENT_CANCELED: "c",
    domain.EVENT_TEST: "t",
}
TYPES = {code: event_type for event_type, code in TYPE_CODES.items()}
# One character per vendor (service/vendors/), in the stream's field ``v``: its name took 5-12 of an entry's
# ~160 bytes. Never change one: entries kept for RETENTION_S are read with these; a new vendor takes a new
# code. A code is upper case and a vendor's name never is (service/vendors/registry.py), so a name of no
# code, spelled out, is never read as one.
VENDOR_CODES: dict[str, str] = {
    "azure_di": "A",
    "cloudsquid": "C",
    "google_docai": "G",
    "llamaparse": "L",
    "nutrient": "N",
    "textract": "T",
    "uptiq": "U",
}
VENDORS = {code: vendor for vendor, code in VENDOR_CODES.items()}
EVENT_PREFIX = "evt_"
RUN_PREFIX = "run_"
# What new_id puts after its prefix: an id of exactly that shape is stored without its prefix.
_BODY = re.compile(domain.ID_BODY)


BINARY = b"\x00"  # starts an id stored as its 128 bits


def _stored(identifier: str, prefix: str) -> bytes:
    rest = identifier[len(prefix) :]
    if (
        identifier.startswith(prefix)
        and _BODY.fullmatch(rest)
        and (value := domain.crockford_value(rest)) >> 128 == 0
    ):
        return BINARY + value.to_bytes(16, "big")
    return identifier.encode()


def _named(stored: bytes | str, prefix: str) -> str:
    if isinstance(stored, bytes):
        if len(stored) == 17 and stored[:1] == BINARY:
            return prefix + domain.crockford(int.from_bytes(stored[1:], "big"))
        stored = stored.decode()
    return prefix + stored if _BODY.fullmatch(stored) else stored  # the 26 characters of the form before


def stored_event_id(event_id: str) -> bytes:
    """The event id as the entry stores it (``e``)."""
    return _stored(event_id, EVENT_PREFIX)


def stored_run_id(run_id: str) -> bytes:
    """The run id as the entry stores it (``r``; ``""`` stays empty)."""
    return _stored(run_id, RUN_PREFIX) if run_id else b""


def event_id(stored: bytes | str) -> str:
    """The event id an entry's ``e`` names, in any of its forms."""
    return _named(stored, EVENT_PREFIX)


def run_id(stored: bytes | str) -> str:
    """The run id an entry's ``r`` names, in any of its forms (empty: none)."""
    return _named(stored, RUN_PREFIX) if stored else ""


def type_code(event_type: str) -> str:
    """The type as the entry stores it (``t``)."""
    return TYPE_CODES.get(event_type, event_type)


def vendor_code(vendor: str) -> str:
    """The vendor as the entry stores it (``v``; ``""`` stays empty)."""
    return VENDOR_CODES.get(vendor, vendor)


def vendor_filter(vendor: str) -> tuple[str, str]:
    """A reader's vendor (``""``: any) as ``read_feed.lua`` matches it against ``v``: spelled out (the form
    before) and stored."""
    return vendor, vendor_code(vendor)


def types_filter(types: Iterable[str]) -> list[str]:
    """A reader's types (exact types, or ``run.*``) as ``read_feed.lua`` matches them against ``t``: each
    type and its code, and for ``run.*`` (which matches a spelled-out ``run.`` type by its start) the
    codes of every run event; empty stays empty (every type)."""
    out: list[str] = []
    for wanted in types:
        out.append(wanted)
        if wanted == "run.*":
            out.extend(TYPE_CODES[t] for t in domain.RUN_EVENTS)
        elif wanted in TYPE_CODES:
            out.append(TYPE_CODES[wanted])
    return out


def run_filter(run_id: str) -> tuple[str, str, bytes]:
    """A reader's run id (``""``: any) as ``read_feed.lua`` matches it against ``r``: in every form (whole,
    the 26 characters without its prefix, stored)."""
    rest = run_id.removeprefix(RUN_PREFIX)
    short = rest if run_id.startswith(RUN_PREFIX) and _BODY.fullmatch(rest) else run_id
    return run_id, short, stored_run_id(run_id)


@dataclass(frozen=True)
class Entry:
    """One stored entry, in either form, named back in full: what a tool or a test reads (the API reads
    a page through ``read_feed.lua``, which matches and bounds it in Redis)."""

    event_id: str
    type: str
    run_id: str  # "" for an event of no run
    vendor: str  # "" for none
    body: bytes | None  # the packed body the entry carries, or None when the event's key keeps it
    size: int  # the body's size in bytes (that of the packed body the entry carries, else as stored)


def entry(fields: Mapping[Any, Any]) -> Entry:
    """An entry's fields (``XRANGE``'s, as bytes or text) named back in full."""
    got = {_text(k): v for k, v in fields.items()}
    raw = got.get("b")
    body = raw.encode() if isinstance(raw, str) else raw
    if body is not None and body[:1].isdigit():
        size, body = int(body), None
    else:
        size = len(body) if body is not None else int(_text(got.get("n", "0")))
    stored_type, stored_vendor = _text(got.get("t", "")), _text(got.get("v", ""))
    return Entry(
        event_id=event_id(got.get("e", "")),
        type=TYPES.get(stored_type, stored_type),
        run_id=run_id(got.get("r", "")),
        vendor=VENDORS.get(stored_vendor, stored_vendor),
        body=body,
        size=size,
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def spelled_out(fields: Mapping[Any, Any]) -> dict[str, str | bytes]:
    """An entry of any form as the versions before the short form wrote it (``hookbridge
    spell-out-events``, before a rollback across this change): the ids with their prefixes, the type and
    the vendor spelled out, ``r`` and ``v`` only when not empty, the size in ``n`` when the event's key
    keeps the body."""
    full = entry(fields)
    out: dict[str, str | bytes] = {"e": full.event_id, "t": full.type}
    if full.run_id:
        out["r"] = full.run_id
    if full.vendor:
        out["v"] = full.vendor
    if full.body is not None:
        out["b"] = full.body
    else:
        out["n"] = str(full.size)
    return out
