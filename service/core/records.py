"""The core records: a run, a subscription, a delivery and a delivery attempt, as typed values.

Each record has one name per field, from the store to the API, and one codec each way:

- a run is stored as JSON (``hb:run:{id}``), written by :meth:`Run.to_json` (fields at their default left
  out, and the id, which the key names: a run in flight is most of Redis's memory; a finished run's
  fields after its version deflated, :mod:`service.core.compact`) and read by :meth:`Run.from_json` with
  the key's id;
- a subscription and a delivery are Redis hashes that the Lua scripts read and write field by field.
  Their storage names are the scripts' (short, and shared with every ``HSET`` in ``store/lua``), so
  :data:`SUBSCRIPTION_HASH` and :data:`DELIVERY_HASH` map each record field to its hash field: the only
  place the two spellings meet;
- ``public_*`` give the shape the API answers and the events carry, the fields of its model in
  :mod:`service.core.shapes` (times in RFC 3339, internals left out).

Records are frozen: a change is a new record (:func:`replace`), so a run read by one step is never edited
under another. The run, read and written on every worker step, is a msgspec struct: decode ~1.8 us, encode
~0.9, a change ~0.3 (``python -m bench.records_codec``), where pydantic took ~6.6, ~4.3 and ~1.5 (about
5 % of a poll); so is an event, made by most polls of a vendor that reports progress and never read back
(only its body is stored). The others are pydantic v2 models, read and written far less often. Both check
the types of what is read from Redis.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel, ConfigDict, Field

from service.core import compact, domain, shapes

__all__ = [
    "DELIVERY_HASH",
    "DELIVERY_HASH_INTERNAL",
    "STORED_NAMES",
    "SUBSCRIPTION_HASH",
    "Attempt",
    "Delivery",
    "Event",
    "Run",
    "Subscription",
    "Transition",
    "public_delivery",
    "public_run",
    "public_subscription",
    "replace",
    "result_in_event",
]

Json = dict[str, Any]
R = TypeVar("R", bound=BaseModel | msgspec.Struct)


def replace(record: R, **changes: Any) -> R:
    """A copy of ``record`` with ``changes`` (not validated again: they come from our own code)."""
    if isinstance(record, msgspec.Struct):
        return msgspec.structs.replace(record, **changes)
    return record.model_copy(update=changes)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


# The run's stored names (``Run.to_json``): short, since a run is most of Redis's memory (the names were
# about 190 of a finished record's ~950 bytes). Those the scripts read in the record keep their own (id,
# vendor, status, version, vendor_cancel_pending, vendor_delete_pending: service/store/lua/, and
# store/upkeep.py's vendor). A record written with the long names (before this, and hookbridge 0.x's with a
# ``_``) still reads (``Run.from_json``).
STORED_NAMES = {
    "client": "c",
    "operation": "op",
    "created_at": "ca",
    "updated_at": "ua",
    "vendor_run_id": "vr",
    "vendor_status": "vs",
    "progress": "p",
    "metadata": "m",
    "zero_retention": "zr",
    "completed_at": "co",
    "polls": "n",
    "error": "er",
    "usage": "us",
    "vendor_deleted": "vd",
    "vendor_delete_error": "vde",
    "options": "o",
    "subscription_ids": "s",
    "document": "d",
    "state": "st",
    "delay_s": "ds",
    "transient": "tf",
    "progress_event_at": "pe",
    "vendor_attempts": "va",
    "result_type": "rt",
    "traceparent": "tp",
    "trail": "t",
    "trail_dropped": "td",
    "rate_limited": "rl",
    "event_ids": "e",
}


class Run(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename=STORED_NAMES):
    """One run: what the client submitted, what the vendor said, and the worker's bookkeeping.

    The one record read and written on every worker step (a claim decodes it, a transition encodes it), so
    it is a msgspec struct, not a pydantic model like the others: decode ~1.8 us against ~6.6, encode ~0.9
    against ~4.3, a change ~0.3 against ~1.5 (``python -m bench.records_codec``), about 5 % of a poll. It
    checks the types on the way in (:meth:`from_json`) as pydantic did; a field at its default is left out
    of the stored JSON, as ``exclude_defaults`` did, and the stored bytes are the same."""

    id: str
    client: str  # the API key's client name: the tenant that owns the run
    vendor: str
    operation: str
    created_at: int  # ms since the epoch, as every time in a record
    updated_at: int
    status: str  # domain.RUN_STATUSES
    # Incremented by every change; the store applies a change only at the version it was made from.
    version: int
    vendor_run_id: str | None = None
    vendor_status: str | None = None  # the vendor's own word for the status, as it said it
    progress: Json | None = None  # {percent, phase, message}
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    zero_retention: bool = False
    completed_at: int | None = None
    polls: int = 0
    error: Json | None = None  # {code, message, vendor_status[, details]}
    usage: Json | None = None  # what the vendor reports the run cost
    vendor_deleted: bool | None = None  # zero retention: whether the vendor's copy is gone ...
    vendor_delete_error: str | None = None  # ... and why not
    options: Json = msgspec.field(default_factory=dict)  # the vendor's options, passed through
    subscription_ids: list[str] = msgspec.field(default_factory=list)  # empty: every matching subscription
    # Internals, never shown by the API:
    document: Json | None = None  # how to read the document (url, filename, media_type) until submitted
    state: Json = msgspec.field(default_factory=dict)  # the adapter's own (Cloudsquid's row)
    delay_s: float | None = None  # the planned poll interval
    transient: int = 0  # transient faults in a row
    progress_event_at: int = 0  # the last run.progress
    vendor_cancel_pending: bool = False  # canceled here; the vendor still has to be told
    vendor_delete_pending: bool = False  # zero retention: the vendor's copy is still to be deleted
    vendor_attempts: int = 0  # failed attempts at telling the vendor (cancel, delete)
    result_type: str | None = None  # a file result's media type
    # The API request's span (W3C traceparent) when tracing is on: the worker's spans join its trace.
    traceparent: str | None = None
    # The vendor trail (service/core/trail.py): compact entries, the first and the last ones, and how many of
    # those in between were dropped; the vendor's 429s for this run.
    trail: list[list[Any]] = msgspec.field(default_factory=list)
    trail_dropped: int = 0
    rate_limited: int = 0
    # The ids of the run's events but run.progress (a few: submitted, its end), oldest first: on the record,
    # not in a list key of their own (~250 bytes a run in flight). Progress events, as many as the vendor
    # reports, go to ``hb:run:{id}:events`` when kept (service/store/lua/_fanout.lua), as every event of a
    # run written before this field did.
    event_ids: list[str] = msgspec.field(default_factory=list)

    @property
    def terminal(self) -> bool:
        return self.status in domain.TERMINAL

    def to_json(self) -> str:
        """The stored form: JSON without the fields that hold their default, nor the id, which the key
        names (``hb:run:{id}``; ~40 bytes a run). A finished run's is compact (:mod:`service.core.compact`)
        once nothing is left to tell its vendor: the pending tells ``repair.lua`` reads stay plain fields."""
        raw = _RUN_ENCODER.encode(self)
        # msgspec writes the fields in their order, the id first and always: {"id":"<id>",...
        plain = b"{" + raw[len(_ID_START) + len(_RUN_ENCODER.encode(self.id)) + 1 :]
        if self.terminal and not (self.vendor_cancel_pending or self.vendor_delete_pending):
            return compact.compacted(plain).decode()
        return plain.decode()

    @classmethod
    def from_json(cls, raw: bytes | str, run_id: str | None = None) -> Run:
        """The run from its stored form (plain or compact), given ``run_id``, the id of the key it was read
        from (or from a form that names its id itself: one written before the id was left out, one with the
        long names, hookbridge 0.x's); raises ValueError for anything else."""
        try:
            data = compact.expanded(raw.encode() if isinstance(raw, str) else raw)
        except ValueError as exc:
            raise ValueError(f"not a run record: {exc}") from None
        if run_id is not None and not data.startswith(_ID_START):
            data = _ID_START + _RUN_ENCODER.encode(run_id) + b"," + data[1:]
        try:
            return _RUN_DECODER.decode(data)
        except msgspec.ValidationError as exc:
            old = _long_names(data)
            if old is None:
                raise ValueError(f"not a run record: {exc}") from None
            try:
                return msgspec.convert({STORED_NAMES.get(k, k): v for k, v in old.items()}, cls)
            except msgspec.ValidationError as exc:
                raise ValueError(f"not a run record: {exc}") from None
        except msgspec.DecodeError as exc:
            raise ValueError(f"not a run record: {exc}") from None


_RUN_ENCODER = msgspec.json.Encoder()
_ID_START = b'{"id":'
_RUN_DECODER = msgspec.json.Decoder(Run)
# hookbridge 0.x spelled a run's internals with a leading "_", and these four by other names.
_NAMES_0X = {
    "_v": "version",
    "_delay": "delay_s",
    "_vendor_cancel": "vendor_cancel_pending",
    "_vendor_delete": "vendor_delete_pending",
}


def _long_names(raw: bytes | str) -> dict[str, Any] | None:
    """A run record written with the fields' own names (``created_at``: before ``STORED_NAMES``), or as
    hookbridge 0.x wrote it (no ``version``, a ``_v``), under the fields' own names; else None."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        return None
    if "version" not in data and "_v" in data:
        return {_NAMES_0X.get(k, k[1:] if k.startswith("_") else k): v for k, v in data.items()}
    return data if "created_at" in data else None


# What the API and the events show of each record: the fields of its public shape (service/core/shapes.py),
# in their order, under the same names; the times among them are shown in RFC 3339.
PUBLIC_RUN = tuple(shapes.Run.model_fields)
PUBLIC_SUBSCRIPTION = tuple(shapes.Subscription.model_fields)
PUBLIC_DELIVERY = tuple(shapes.Delivery.model_fields)
_TIMES = frozenset(
    name
    for shape in (shapes.Run, shapes.Subscription, shapes.Delivery)
    for name, field in shape.model_fields.items()
    if field.annotation in (datetime, datetime | None)
)


def _public(record: _Record | Run, names: tuple[str, ...]) -> Json:
    out = {name: getattr(record, name) for name in names}
    for name in _TIMES.intersection(out):
        out[name] = domain.rfc3339(out[name])
    return out


def public_run(run: Run) -> Json:
    """The run as the API and the events show it."""
    return _public(run, PUBLIC_RUN)


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """One event as a state change emits it: its body is the exact bytes every subscription is sent.

    A msgspec struct, as the run is: one is made for every event (a ``run.progress`` on most polls of a
    vendor that reports progress), ~0.2 us where a pydantic model took ~2 with its checks (our own code
    makes every one)."""

    id: str
    type: str  # domain.EVENT_TYPES
    created: int  # ms since the epoch
    body: str  # {"type", "timestamp", "data"} as JSON; stored packed (hb:evt:{id}, store/bodies.py)
    vendor: str | None = None  # the run's vendor: the feed's filter
    # Zero retention: the body the feed keeps (without the result, which only the callback carries).
    feed: str | None = None


def result_in_event(body: bytes | str) -> bytes | None:
    """The result a terminal event's body carries inline, as ``GET /v1/runs/{id}/result`` serves it (the
    compact JSON ``lifecycle.finished`` keeps), or None when the body carries none (a ``result_url``, or a
    null). A run whose result is inline in its ``run.succeeded`` keeps it there alone, not in a key of its
    own as well: the finish keeps the separate copy only when this gives back other bytes than it would have
    kept (``lifecycle.finished``), so the two readings never differ."""
    event = json.loads(body)
    data = event.get("data") if isinstance(event, dict) else None
    if not isinstance(data, dict) or data.get("result_url") is not None or data.get("result") is None:
        return None
    return json.dumps(data["result"], separators=(",", ":")).encode()


# Subscriptions ---------------------------------------------------------------------------------------


class Subscription(_Record):
    """Where a client's callbacks go, what it wants, and how its endpoint has been doing."""

    id: str
    client: str
    url: str
    secrets: str  # [[secret, expires_ms | None], ...] as JSON, sealed when SECRET_KEYS is set
    created_at: int
    updated_at: int
    event_types: tuple[str, ...] | None = None  # None: the default set (domain.DEFAULT_EVENT_TYPES)
    description: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    disabled: bool = False
    disabled_reason: str | None = None  # store.OWNER_DISABLED, or why hookbridge disabled it
    max_in_flight: int | None = None  # None: SUBSCRIPTION_MAX_IN_FLIGHT
    rate_limit_per_s: float | None = None  # None: no limit
    consecutive_failures: int = 0
    failing_since: int | None = None  # the first failed delivery of the current failing streak

    def to_hash(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """The stored hash (every field, or only ``names``)."""
        return {SUBSCRIPTION_HASH[n]: _SUB_ENCODE[n](getattr(self, n)) for n in names or SUBSCRIPTION_HASH}

    @classmethod
    def from_hash(cls, raw: Mapping[str, str]) -> Subscription:
        types = raw.get("event_types")
        return cls(
            id=raw["id"],
            client=raw["client"],
            url=raw.get("url", ""),
            secrets=raw.get("secrets") or "[]",
            created_at=int(raw["created"]),
            updated_at=int(raw.get("updated") or raw["created"]),
            event_types=tuple(json.loads(types)) if types else None,
            description=raw.get("description") or None,
            metadata=json.loads(raw.get("metadata") or "{}"),
            disabled=raw.get("disabled") == "1",
            disabled_reason=raw.get("disabled_reason") or None,
            max_in_flight=int(raw["max_in_flight"]) if raw.get("max_in_flight") else None,
            rate_limit_per_s=float(raw["rate_per_s"]) if raw.get("rate_per_s") else None,
            consecutive_failures=int(raw.get("consecutive_failures") or 0),
            failing_since=int(raw["failing_since"]) if raw.get("failing_since") else None,
        )


def _opt(value: Any) -> str:
    return "" if value is None else str(value)


# Record field -> hash field, as the Lua scripts spell it.
SUBSCRIPTION_HASH = {
    "id": "id",
    "client": "client",
    "url": "url",
    "secrets": "secrets",
    "created_at": "created",
    "updated_at": "updated",
    "event_types": "event_types",
    "description": "description",
    "metadata": "metadata",
    "disabled": "disabled",
    "disabled_reason": "disabled_reason",
    "max_in_flight": "max_in_flight",
    "rate_limit_per_s": "rate_per_s",
    "consecutive_failures": "consecutive_failures",
    "failing_since": "failing_since",
}
_SUB_ENCODE: dict[str, Any] = {
    **dict.fromkeys(SUBSCRIPTION_HASH, _opt),
    "event_types": lambda v: json.dumps(list(v)) if v else "",
    "metadata": json.dumps,
    "disabled": lambda v: "1" if v else "0",
    "rate_limit_per_s": lambda v: "" if v is None else str(float(v)),
}


def public_subscription(sub: Subscription) -> Json:
    view = _public(sub, PUBLIC_SUBSCRIPTION)
    view["event_types"] = list(sub.event_types) if sub.event_types else None
    return view


# Changes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change of a run: the new record and what it implies. The store applies it atomically, and
    only while the stored run is still at ``expect_v``. Built by :mod:`service.core.lifecycle` (which
    exports it too); declared here, beside the records it carries, so that the store reads it without
    importing the lifecycle."""

    run: Run  # the new run, its version already incremented
    expect_v: int
    events: list[Event] = field(default_factory=list)
    due_ms: float | None = None  # next step due at; None with remove_due=False leaves it alone
    remove_due: bool = False
    result: bytes | None = None
    delete_document: bool = False
    ttl_ms: int | None = None  # set on the run's end: it is kept for the retention from then


# Deliveries ------------------------------------------------------------------------------------------


class Delivery(_Record):
    """One event on its way to one subscription. Written by the Lua scripts only (the fan-out creates it,
    ``delivery_result`` records each attempt), so it has no encoder here."""

    id: str
    event_id: str
    event_type: str
    subscription_id: str
    client: str
    status: str  # pending, succeeded, failed
    created_at: int
    updated_at: int
    run_id: str | None = None  # None for events of no run (subscription.test)
    attempts: int = 0
    series: int = 0  # attempts made before its last manual retry: the retry schedule restarts there
    last_status_code: int | None = None
    next_attempt_at: int | None = None

    @classmethod
    def from_hash(cls, raw: Mapping[str, str]) -> Delivery:
        """Lenient: a hash that lost a field (edited by hand, half expired) still reads, so that the claim
        can fail it and a listing can show it."""
        f = {name: raw.get(field) or "" for name, field in DELIVERY_HASH.items()}
        return cls(
            id=raw[DELIVERY_HASH["id"]],
            event_id=f["event_id"],
            event_type=f["event_type"],
            subscription_id=f["subscription_id"],
            client=f["client"],
            status=f["status"],
            created_at=int(f["created_at"] or 0),
            updated_at=int(f["updated_at"] or f["created_at"] or 0),
            run_id=f["run_id"] or None,
            attempts=int(f["attempts"] or 0),
            series=int(f["series"] or 0),
            last_status_code=int(f["last_status_code"]) if f["last_status_code"] else None,
            next_attempt_at=int(f["next_attempt_at"]) if f["next_attempt_at"] else None,
        )


# Record field -> hash field: the one declaration of the delivery hash's fields. Delivery.from_hash reads
# it, and so do the Lua scripts, through the ``DF`` table that store/scripts.py generates from it and
# from DELIVERY_HASH_INTERNAL (``DF.event_id`` is ``'event'``), so no script spells a field.
DELIVERY_HASH = {
    "id": "id",
    "event_id": "event",
    "event_type": "type",
    "subscription_id": "sub",
    "client": "client",
    "status": "status",
    "created_at": "created",
    "updated_at": "updated",
    "run_id": "run",
    "attempts": "attempts",
    "series": "series",
    "last_status_code": "last_code",
    "next_attempt_at": "next_at",
}


# The scripts' own bookkeeping fields of the hash, outside the record: whether the delivery is still in its
# run's chain, and whether its end was counted against its event's pending count (zero retention); and its
# first attempt in its short form (Attempt.short), the head of its attempt log.
DELIVERY_HASH_INTERNAL = {"chained": "chained", "counted": "counted", "first_attempt": "a1"}


def public_delivery(d: Delivery) -> Json:
    return _public(d, PUBLIC_DELIVERY)


class Attempt(_Record):
    """One try at delivering: kept in the delivery's attempt log, shown as is by the API (every field).
    Stored without the fields at their default (no status code, no error, an empty response body: most
    attempts have one or two of them), which read back as the same defaults."""

    at: str  # RFC 3339
    status_code: int | None = None
    duration_ms: float
    error: str | None = None  # why it failed, with the callback URL's secrets redacted
    response_body: str = ""

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Attempt:
        return cls.model_validate_json(raw)

    def short(self) -> str | None:
        """The attempt as its delivery's hash keeps it when it is the first (most deliveries end at their
        first, and need no list of their own): ``<at in ms>,<status code>,<duration_ms>``, 20-odd bytes
        where its JSON takes ~70, past what a hash keeps in its compact encoding (64). None for one that
        carries more (an error, a response body) or whose time would not read back the same: it goes to
        the list."""
        if self.error is not None or self.response_body:
            return None
        try:
            ms = round(datetime.fromisoformat(self.at.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
        if domain.rfc3339(ms) != self.at:
            return None
        code = "" if self.status_code is None else str(self.status_code)
        return f"{ms},{code},{self.duration_ms!r}"

    @classmethod
    def from_short(cls, raw: bytes | str) -> Attempt:
        """The attempt :meth:`short` wrote."""
        ms, code, duration = (raw.decode() if isinstance(raw, bytes) else raw).split(",")
        return cls(
            at=domain.rfc3339(int(ms)) or "",
            status_code=int(code) if code else None,
            duration_ms=float(duration),
        )

    def public(self) -> Json:
        return self.model_dump()
