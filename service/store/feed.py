"""A client's event feed: one Redis Stream per client (``keys.client_feed``), appended by the same Lua step
that emits each event (``lua/_fanout.lua``), so the feed holds exactly the events that callbacks get.

Read a page at a time by ``lua/read_feed.lua`` (filter, the bodies the entries carry and the retention
check in one round trip; the bodies kept under the events' own keys in one MGET after). A reader that
waits for the next event blocks in ``XREAD BLOCK`` on a Redis client of its own, in short slices: a
waiting reader holds one of that client's connections, never one of the pool that every other request
shares. The number of waiting readers and open streams per client is bounded by slots
(``lua/stream_slot.lua``) held across every API pod.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from redis.asyncio import Redis

from service.store import bodies, feedform, keys
from service.store.connection import blocking_read, limit_pool, pool_size
from service.store.scripts import source

T = TypeVar("T")

# An iterator is a stream entry id: milliseconds and a sequence number, both unsigned 64-bit.
# ASCII digits only: ``\d`` also takes Unicode digits (Arabic-Indic, fullwidth), which Lua refuses.
_ID = re.compile(r"^([0-9]{1,20})-([0-9]{1,20})$")
_U64 = 2**64 - 1
# How far past Redis's clock an iterator may point before it is refused as none of ours.
FUTURE_MS = 60_000
# Entries one read scans at most: a rare filter costs bounded work per call (and the callers hold a budget
# per request: events.SCAN_BUDGET).
SCAN = 1000
# A page's bodies stop growing past this many bytes (a page always has its first match): what one open
# stream or one page holds in memory is bounded by bytes, not only by its count of events (inline results
# are up to MAX_INLINE_RESULT_BYTES each).
PAGE_BYTES = 256 * 1024
# A read charged to a client's scan rate waits until it may scan at least this many entries (or all it
# asked for): no loop of reads of a few entries each while the rate refills.
MIN_SCAN = 100


class IteratorTrimmed(Exception):
    """The iterator is older than the retention window: events after it may be gone."""


class IteratorInvalid(Exception):
    """The iterator is not a position in this feed."""


@dataclass(frozen=True)
class ScanRate:
    """A client's feed entries scanned per second across every API pod (a GCRA in Redis, charged in the
    same script that scans), and how many it may scan at once."""

    per_s: float
    burst: int


def valid_iterator(value: str) -> bool:
    """Whether ``value`` has the shape of a stream entry id (``<ms>-<seq>``)."""
    match = _ID.fullmatch(value)
    return match is not None and all(int(part) <= _U64 for part in match.groups())


@dataclass(frozen=True)
class FeedEntry:
    id: str  # the stream entry id: the iterator after this event, the SSE id
    event_id: str  # evt_...: the callbacks' webhook-id
    body: bytes  # the callback body (type, timestamp, data)

    def envelope(self) -> dict[str, Any]:
        """The callback's body with the feed's ``id`` and the ``event_id`` (what receivers deduplicate on)."""
        body = json.loads(self.body)
        return {
            "id": self.id,
            "event_id": self.event_id,
            "type": body["type"],
            "timestamp": body["timestamp"],
            "data": body["data"],
        }


@dataclass(frozen=True)
class FeedRead:
    events: list[FeedEntry]
    iterator: str  # pass it back for what comes next
    done: bool  # the page reached the feed's end: nothing more right now
    scanned: int = 0  # feed entries read for this page (filtered out included)
    # When > 0, nothing was read: the client's scan rate is spent for this long (``ScanRate``).
    throttled_s: float = 0.0


@dataclass(frozen=True)
class FeedFilter:
    types: tuple[str, ...] = ()  # exact types or "run.*"; empty = all
    run_id: str = ""
    vendor: str = ""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Feed:
    def __init__(
        self, redis: Redis, blocking: Redis, retention_s: float, *, lanes: Lanes | None = None
    ) -> None:
        self.redis = redis
        self.blocking = blocking
        self.lanes = lanes or Lanes(pool_size(blocking))
        # Never more blocking connections than lanes: every lane holder gets one, nobody else waits for one.
        limit_pool(blocking, self.lanes.size)
        self._retention_ms = int(retention_s * 1000)
        self._read = redis.register_script(source("read_feed"))
        self._slot = redis.register_script(source("stream_slot"))

    async def close(self) -> None:
        await self.blocking.aclose()

    async def read(
        self,
        client: str,
        after: str,
        *,
        limit: int,
        now_ms: int,
        only: FeedFilter = FeedFilter(),
        scan: int = SCAN,
        max_bytes: int = PAGE_BYTES,
        rate: ScanRate | None = None,
    ) -> FeedRead:
        """Events after ``after`` ("" = from the oldest kept), up to ``limit`` of those that match; with
        ``rate``, at most what the client has left of it is scanned, and what was scanned is charged; when
        it has less than ``MIN_SCAN`` (or ``scan``) left, nothing is read, and the answer
        says how long until it has (``throttled_s``): no read of a few entries at a time.

        Raises IteratorTrimmed or IteratorInvalid."""
        scan = max(1, min(scan, SCAN))
        run_id, run_short, run_stored = feedform.run_filter(only.run_id)
        vendor, vendor_code = feedform.vendor_filter(only.vendor)
        reply = await _whole(
            self._read(
                keys=[keys.client_feed(client), keys.client_rate("feed_scan", client)],
                args=[
                    after,
                    limit,
                    scan,
                    now_ms - self._retention_ms,
                    json.dumps(feedform.types_filter(only.types)),
                    run_id,
                    vendor,
                    FUTURE_MS,
                    max_bytes,
                    1000.0 / rate.per_s if rate else 0,
                    rate.burst if rate else 0,
                    min(scan, rate.burst, MIN_SCAN) if rate else 0,
                    run_short,
                    run_stored,
                    vendor_code,
                ],
            )
        )
        outcome = _s(reply[0])
        if outcome == "throttled":
            return FeedRead([], after, False, 0, throttled_s=int(reply[1]) / 1000)
        if outcome == "expired":
            raise IteratorTrimmed(after)
        if outcome == "invalid":
            raise IteratorInvalid(after)
        rows = [
            (
                _s(reply[i]),
                feedform.event_id(reply[i + 1]),
                feedform.run_id(reply[i + 2]),
                reply[i + 3],
            )
            for i in range(4, len(reply), 4)
        ]
        # The bodies the entries do not carry are kept under the events' keys, which a script may not
        # name from the entries it read, and which lie in their runs' shards: one pipeline of GETs here.
        # An event whose body expired is past retention.
        kept = [event_id for _, event_id, _, raw in rows if not raw]
        found: dict[str, Any] = {}
        if kept:
            pipe = self.redis.pipeline(transaction=False)
            for event_id in kept:
                pipe.get(keys.event(event_id))
            stored = await _whole(pipe.execute())
            found = dict(zip(kept, stored, strict=True))
        events = [
            FeedEntry(entry_id, event_id, body)
            for entry_id, event_id, run_id, raw in rows
            if (packed := raw or found.get(event_id))
            and (body := bodies.unpacked_or_none(packed, run_id)) is not None
        ]
        return FeedRead(events, _s(reply[1]), bool(int(reply[2])), int(reply[3]))

    async def wait(self, client: str, after: str, timeout_s: float) -> bool:
        """Blocks until an entry past ``after`` is in the client's feed (True) or ``timeout_s`` passed."""
        block_ms = max(1, int(timeout_s * 1000))
        feed = keys.client_feed(client)
        read = ("XREAD", "COUNT", 1, "BLOCK", block_ms, "STREAMS", feed, after or "0-0")
        return bool(await blocking_read(self.blocking, feed, *read, timeout_s=timeout_s + 5.0))

    async def take_slot(self, client: str, token: str, *, now_ms: int, lease_s: float, cap: int) -> bool:
        """One of the client's ``cap`` stream slots for ``lease_s`` (renew it before then), or False."""
        args: list[str | int] = ["take", token, now_ms, int(lease_s * 1000), cap]
        return bool(await _whole(self._slot(keys=[keys.client_streams(client)], args=args)))

    async def renew_slot(self, client: str, token: str, *, now_ms: int, lease_s: float) -> bool:
        """False when the lease had run out and the slot may have gone to another stream."""
        args: list[str | int] = ["renew", token, now_ms, int(lease_s * 1000), 0]
        return bool(await _whole(self._slot(keys=[keys.client_streams(client)], args=args)))

    async def drop_slot(self, client: str, token: str) -> None:
        await _whole(self._slot(keys=[keys.client_streams(client)], args=["drop", token, 0, 0, 0]))


def admit(held: int, in_use: int, size: int, share: int, reserve: int) -> bool:
    """Whether a client that holds ``held`` of the pod's ``size`` blocking lanes (``in_use`` taken in all)
    may take one more: never past its ``share``, and the last ``reserve`` free lanes only for a client that
    holds none, so that clients at their share cannot keep every other client's first reader out."""
    if in_use >= size or held >= share:
        return False
    return held == 0 or size - in_use > reserve


class Lanes:
    """This pod's blocking readers (streams and waiting long-polls), one lane each for their whole life,
    at most ``size`` (the blocking client's connections), shared fairly between clients (``admit``)."""

    def __init__(self, size: int, *, share: int | None = None, reserve: int | None = None) -> None:
        self.size = max(1, size)
        self.share = self.size if share is None else max(1, share)
        # A quarter of the pool, by default, is kept for clients with no reader on this pod yet.
        self.reserve = self.size // 4 if reserve is None else reserve
        self.held: dict[str, int] = {}

    @property
    def in_use(self) -> int:
        return sum(self.held.values())

    def take(self, client: str) -> bool:
        held = self.held.get(client, 0)
        if not admit(held, self.in_use, self.size, self.share, self.reserve):
            return False
        self.held[client] = held + 1
        return True

    def give_back(self, client: str) -> None:
        held = self.held.get(client, 0) - 1
        if held > 0:
            self.held[client] = held
        else:
            self.held.pop(client, None)


async def _whole(command: Awaitable[T]) -> T:
    """Runs a short command to the end of its reply even when the caller is cancelled meanwhile (a reader
    hung up; the cancellation takes effect right after): a reply cut off mid-read would leave its
    connection open for the garbage collector."""
    with anyio.CancelScope(shield=True):
        result = await command
    return result
