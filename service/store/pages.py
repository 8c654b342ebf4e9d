"""Listings, newest first, one page at a time: the cursor is the last (score, member) a page showed."""

from __future__ import annotations

import base64
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from redis.asyncio import Redis

from service.store.codec import text

T = TypeVar("T")


@dataclass(frozen=True)
class Listing(Generic[T]):
    data: list[T]
    next_cursor: str | None


def encode_cursor(score: float, member: str) -> str:
    return base64.urlsafe_b64encode(f"{score!r}|{member}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """Raises ValueError (or UnicodeDecodeError) on a cursor we did not make."""
    padded = cursor + "=" * (-len(cursor) % 4)
    score, _, member = base64.urlsafe_b64decode(padded.encode()).decode().partition("|")
    value = float(score)
    if not math.isfinite(value):
        raise ValueError("not a cursor")
    return value, member


async def page(
    redis: Redis,
    index: str,
    limit: int,
    cursor: str | None,
    fetch: Callable[[Sequence[str]], Awaitable[Sequence[T | None]]],
    keep: Callable[[T], bool] | None,
    *,
    low: int | None = None,
    high: int | None = None,
) -> Listing[T]:
    """One page of the records in the zset ``index``, newest first, scored in [``low``, ``high``) (None:
    no bound; the range is read from the index, not filtered), that ``keep`` keeps. Scans at most 20
    chunks so that a rare filter cannot make one request unbounded; the cursor then points past what was
    scanned."""
    max_score: float | str = "+inf" if high is None else f"({high}"
    min_score: float | str = "-inf" if low is None else low
    after: str | None = None
    if cursor:
        score, member = decode_cursor(cursor)
        # A cursor from a listing of another range never reaches past this one's end.
        if high is None or score < high:
            max_score, after = score, member
    out: list[T] = []
    last: tuple[float, str] | None = None
    chunk = max(limit, 50)
    for _ in range(20):
        rows = await redis.zrevrangebyscore(
            index, max_score, min_score, start=0, num=chunk + 1, withscores=True
        )
        members = [(text(m), float(s)) for m, s in rows]
        if after is not None:
            # Skip up to and including the cursor's member (several may share its score).
            skip = next((i + 1 for i, (m, _) in enumerate(members) if m == after), 0)
            members = members[skip:]
        if not members:
            return Listing(out, None)
        records = await fetch([m for m, _ in members])
        for (member, score), record in zip(members, records, strict=True):
            last = (score, member)
            if record is not None and (keep is None or keep(record)):
                out.append(record)
                if len(out) == limit:
                    return Listing(out, encode_cursor(score, member))
        if len(rows) <= chunk:
            return Listing(out, None)
        assert last is not None
        max_score, after = last
    return Listing(out, encode_cursor(*last) if last else None)


# Deliveries one ``recover`` call reads at most (one ZRANGEBYSCORE, one pipeline of as many HGETALLs, as
# many retries): a delivery log of any length is recovered a page per request, never in one.
RECOVER_SCAN = 500


async def oldest_first(
    redis: Redis, index: str, low_ms: int, high_ms: int | None, cursor: str | None, scan: int
) -> tuple[list[str], str | None]:
    """Up to ``scan`` members of the zset ``index`` scored in [``low_ms``, ``high_ms``) (None: no end),
    oldest first, after ``cursor``; and the cursor of what comes next (None: nothing)."""
    low: float = low_ms
    after: str | None = None
    if cursor:
        score, after = decode_cursor(cursor)
        low = max(low, score)
    high = "+inf" if high_ms is None else f"({high_ms}"
    rows = await redis.zrangebyscore(index, low, high, start=0, num=scan + 1, withscores=True)
    members = [(text(m), float(s)) for m, s in rows]
    if after is not None:
        # Skip up to and including the cursor's member (several may share its score).
        skip = next((i + 1 for i, (m, s) in enumerate(members) if m == after and s == low), 0)
        members = members[skip:]
    taken = members[:scan]
    more = len(rows) > scan or len(members) > scan
    return [m for m, _ in taken], (encode_cursor(taken[-1][1], taken[-1][0]) if more and taken else None)
