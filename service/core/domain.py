"""The domain's vocabulary: statuses, event types and ids. The problems the API answers are classes of
``service.api.problems``."""

from __future__ import annotations

import bisect
import functools
import os
import re
import time
import zlib
from datetime import UTC, datetime
from enum import StrEnum

# The statuses are spelled here only. Each is a StrEnum, so a member is the very string stored in Redis,
# sent in JSON and compared by the Lua scripts, which read the same values from a prelude generated from
# these classes (store/scripts.py: status_prelude()).


# A run's status (CONTRACT §4): queued → submitted → running → succeeded | failed | canceled. (No
# docstring: the API's schema shows this class, and a docstring would become its description.)
class RunStatus(StrEnum):
    QUEUED = "queued"
    SUBMITTED = "submitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


# The statuses a run never leaves: derived here once, read by Python and (through the prelude) by Lua.
TERMINAL: frozenset[RunStatus] = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELED})
RUN_STATUSES = tuple(RunStatus)

# The names the code has used all along, kept as references to the members (not second spellings).
QUEUED, SUBMITTED, RUNNING = RunStatus.QUEUED, RunStatus.SUBMITTED, RunStatus.RUNNING
SUCCEEDED, FAILED, CANCELED = RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELED


# A delivery's status: pending until it is delivered (succeeded) or given up (failed). (No docstring,
# as RunStatus.)
class DeliveryStatus(StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


DELIVERY_FINAL: frozenset[DeliveryStatus] = frozenset(set(DeliveryStatus) - {DeliveryStatus.PENDING})


class AttemptOutcome(StrEnum):
    """What one delivery attempt decided, as the deliverer tells ``delivery_result.lua``."""

    SUCCEEDED = "succeeded"  # a 2xx: the delivery succeeded
    RETRY = "retry"  # a failure with attempts left: due again at next_at
    FAILED = "failed"  # a failure with none left: the delivery failed
    GONE = "gone"  # a 410: the delivery failed and the subscription is disabled
    SKIPPED = "skipped"  # not attempted (its subscription went away): failed without counting


# The outcomes that end a delivery, and the status each leaves it in.
ATTEMPT_FINAL_STATUS: dict[AttemptOutcome, DeliveryStatus] = {
    AttemptOutcome.SUCCEEDED: DeliveryStatus.SUCCEEDED,
    AttemptOutcome.FAILED: DeliveryStatus.FAILED,
    AttemptOutcome.GONE: DeliveryStatus.FAILED,
    AttemptOutcome.SKIPPED: DeliveryStatus.FAILED,
}


class FaultKind(StrEnum):
    """What went wrong in a call to a vendor, as the decisions after a fault tell the kinds apart."""

    RATE_LIMITED = "rate_limited"  # a 429: wait (Retry-After) and try again; not the run's fault
    TRANSIENT = "transient"  # a 5xx, a timeout, a reset: try again with backoff, a bounded number of times
    REJECTED = "rejected"  # the vendor refused the request (4xx): the run fails
    EXPIRED = "expired"  # the vendor no longer has the run or its result
    TOO_LARGE = "too_large"  # the result is past MAX_DOCUMENT_BYTES
    AMBIGUOUS = "ambiguous"  # the request may or may not have taken effect (a submit that timed out)
    DOCUMENT_UNAVAILABLE = "document_unavailable"  # the run's document URL cannot be fetched, for good


EVENT_SUBMITTED = "run.submitted"
EVENT_PROGRESS = "run.progress"
EVENT_SUCCEEDED = "run.succeeded"
EVENT_FAILED = "run.failed"
EVENT_CANCELED = "run.canceled"
EVENT_TEST = "subscription.test"
RUN_EVENTS = (EVENT_SUBMITTED, EVENT_PROGRESS, EVENT_SUCCEEDED, EVENT_FAILED, EVENT_CANCELED)
EVENT_TYPES = (*RUN_EVENTS, EVENT_TEST)
DEFAULT_EVENT_TYPES = (EVENT_SUCCEEDED, EVENT_FAILED, EVENT_CANCELED)
TERMINAL_EVENT: dict[str, str] = {SUCCEEDED: EVENT_SUCCEEDED, FAILED: EVENT_FAILED, CANCELED: EVENT_CANCELED}

# The vendors, what each can do and whether it can cancel come from the vendor registry
# (service/vendors/registry.py, entry point group hookbridge.vendors), through Settings.vendors.

# Run error codes (CONTRACT §4).
VENDOR_REJECTED = "vendor_rejected"
VENDOR_FAILED = "vendor_failed"
VENDOR_UNREACHABLE = "vendor_unreachable"
TIMED_OUT = "timed_out"
VENDOR_EXPIRED = "vendor_expired"
# A submit that may have created a vendor job, to a vendor without idempotency: never sent again.
VENDOR_SUBMIT_AMBIGUOUS = "vendor_submit_ambiguous"
RESULT_TOO_LARGE = "result_too_large"  # the vendor's result asset is past MAX_DOCUMENT_BYTES
# A document URL that hookbridge fetches itself (Nutrient) could not be had: blocked, refused, too large.
DOCUMENT_UNAVAILABLE = "document_unavailable"

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_BODY = "[0-9A-HJKMNP-TV-Z]{26}"  # what new_id puts after the prefix
# The exact shapes of the ids we hand out (deliveries: a digest made by store/lua/_fanout.lua). An id from
# a request is checked before it becomes part of a key, so that "sub_X:deliveries" never names another key.
_IDS = {
    "run": re.compile(f"run_{ID_BODY}"),
    "sub": re.compile(f"sub_{ID_BODY}"),
    "dlv": re.compile(r"dlv_[0-9a-f]{26}"),
}


def new_id(prefix: str) -> str:
    """A ULID-like id: 48 bits of milliseconds, 80 random bits, Crockford base32, so ids sort by time."""
    return f"{prefix}_{crockford((int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), 'big'))}"


# Crockford's characters as the digits int() reads in base 32, for crockford_value().
_AS_BASE_32 = str.maketrans(_CROCKFORD, "0123456789abcdefghijklmnopqrstuv")


def crockford_value(text: str) -> int:
    """The number ``text`` (Crockford base32, upper case, as :func:`crockford` writes it) stands for."""
    return int(text.translate(_AS_BASE_32), 32)


# Every pair of Crockford characters (10 bits), for crockford().
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_PAIR_SHIFTS = tuple(range(120, -1, -10))


def crockford(value: int) -> str:
    """``value`` (under 2**128) as 26 Crockford base32 characters, the most significant first: 130 bits,
    the top 2 zero, ten at a time: ~1 us, where a loop over the characters took ~2.2, and every request
    id, run id and event id is one."""
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _PAIR_SHIFTS])


# Every id falls in one of SHARDS groups, CRC-32 of the id mod SHARDS (stable across processes and
# versions, unlike Python's salted ``hash``): the store keeps what an id names in its group's shard
# (service/store/keys.py), so an id alone says where its record is.
SHARDS = 16


def shard_of(identifier: str) -> int:
    """The shard of a run (by its id), an event, a subscription (by its id) or a client (by its name)."""
    return zlib.crc32(identifier.encode()) % SHARDS


def new_id_beside(prefix: str, other: str) -> str:
    """A new id in the same shard as the id ``other``: an event beside its run, so that the run's step
    writes both in one place (:func:`new_id_in_shard`)."""
    return new_id_in_shard(prefix, shard_of(other))


def new_id_in_shard(prefix: str, shard: int) -> str:
    """A new id whose shard is ``shard``: :func:`new_id` with its last two characters (random bits) the
    first of the 1,024 they may be, counting on from the drawn ones, that puts it there: still unique,
    still sorted by time to the tenth of a character.

    CRC-32 is affine, so a pair's effect on the shard is the same whatever comes before it, once the
    head's own CRC is folded in: two CRC-32s and a bisection of :data:`_TAILS_BY_SHARD`, where walking
    the pairs took ~16 CRC-32s on average (the whole call 7.5 us where 14.8, with ``new_id``'s 5).
    ``tests/unit/test_ids.py`` holds it to that walk."""
    drawn = new_id(prefix)
    head, start = drawn[:-2], _CROCKFORD.index(drawn[-2]) * 32 + _CROCKFORD.index(drawn[-1])
    crc = zlib.crc32(head.encode())
    # crc32(pair, crc) == crc32(pair) ^ crc32(b"\0\0", crc) ^ crc32(b"\0\0") for any two-byte pair, and
    # SHARDS is a power of two, so the shard of a XOR is the XOR of the shards.
    tails = _TAILS_BY_SHARD[(shard ^ zlib.crc32(b"\0\0", crc) ^ _CRC_ZEROS) % SHARDS]
    at = bisect.bisect_left(tails, start)
    return head + _TAIL_PAIRS[tails[at] if at < len(tails) else tails[0]]


# The 1,024 last pairs, by their 10 bits; and, per shard, those whose CRC-32 alone lands there, in order.
_TAIL_PAIRS = [_CROCKFORD[tail >> 5] + _CROCKFORD[tail & 31] for tail in range(1024)]
_TAILS_BY_SHARD = [
    [tail for tail, pair in enumerate(_TAIL_PAIRS) if zlib.crc32(pair.encode()) % SHARDS == shard]
    for shard in range(SHARDS)
]
_CRC_ZEROS = zlib.crc32(b"\0\0")


def is_id(kind: str, value: str) -> bool:
    """Whether ``value`` has the shape of an id of ``kind`` (``run``, ``sub``, ``dlv``) that we issue."""
    return _IDS[kind].fullmatch(value) is not None


def now_ms() -> int:
    return int(time.time() * 1000)


def rfc3339(ms: int | float | None) -> str | None:
    """``ms`` (since the epoch) as an RFC 3339 UTC time to the millisecond: ``2026-12-01T00:00:00.000Z``.

    Every run's view carries three of these and every event's body one more: a whole millisecond (what the
    records hold) is formatted from its second, which a few neighbours share (~0.7 us where datetime takes
    ~2.6); a fraction of one goes through datetime, which rounds it (tests/unit/test_domain.py holds both
    to the same text)."""
    if ms is None:
        return None
    if type(ms) is int:
        second, milli = divmod(ms, 1000)
        return f"{_utc_second(second)}.{milli:03d}Z"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@functools.lru_cache(maxsize=4096)
def _utc_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
