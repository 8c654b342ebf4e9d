"""Each receiver host's connections, shared between the clients and the subscriptions that call it.

aiohttp's own per-host limit is one first-come queue per host: a client whose receivers hang holds every
connection to the host, and another client's callback to the same host (internal apps often sit behind
one ingress) waits for one of those to end. Three caps apply instead, in each worker process:

- ``host``: connections to one host and port, whoever calls. This protects the receiver.
- ``client``: one client's share of a host, well under ``host``. This protects the other clients: a
  client whose receivers all hang holds its share and no more, and the rest stays free for the others.
- ``subscription``: one subscription's share of its client's, under ``client``: the same between one
  client's subscriptions.

A callback that finds its share or the host full waits; a freed connection goes to the waiter whose
client, then subscription, holds the fewest connections to that host, the earliest among equals. The
wait is part of the attempt's ``CALLBACK_TIMEOUT_S``, as aiohttp's own queue was.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Shares:
    # What the whole host allowed before (50) is now what one client may take of it; the host allows
    # four clients at their share before anyone waits.
    host: int = 200
    client: int = 50
    subscription: int = 25


@dataclass(frozen=True)
class Caller:
    host: str  # scheme, host and port: what aiohttp keys its connections by
    client: str
    subscription: str


def may_take(shares: Shares, host_held: int, client_held: int, subscription_held: int) -> bool:
    """Whether one more connection fits, given what the host, the caller's client and its subscription
    hold of that host."""
    return host_held < shares.host and client_held < shares.client and subscription_held < shares.subscription


def first_in_line(shares: Shares, host_held: int, waiting: Sequence[tuple[int, int]]) -> int | None:
    """The index of the waiter a free connection goes to, or None when none may take one.

    ``waiting`` holds, in arrival order, what each waiter's client and subscription hold of the host.
    """
    if host_held >= shares.host:
        return None
    best: int | None = None
    for i, (client_held, sub_held) in enumerate(waiting):
        if client_held < shares.client and sub_held < shares.subscription:
            if best is None or (client_held, sub_held) < waiting[best]:
                best = i
    return best


class HostShares:
    """The counts and the waiters of one worker's connections to receiver hosts."""

    def __init__(self, shares: Shares) -> None:
        self.shares = shares
        # Keys: (host,), (host, client), (host, client, subscription); an entry at zero is removed.
        self._held: Counter[tuple[str, ...]] = Counter()
        self._waiting: dict[str, list[tuple[Caller, asyncio.Future[None]]]] = {}

    def held(self, host: str, client: str | None = None, subscription: str | None = None) -> int:
        key = (
            (host,)
            if client is None
            else (host, client)
            if subscription is None
            else (host, client, subscription)
        )
        return self._held[key]

    def waiting(self, host: str) -> int:
        return sum(1 for _, fut in self._waiting.get(host, ()) if not fut.done())

    @contextlib.asynccontextmanager
    async def hold(self, caller: Caller) -> AsyncIterator[None]:
        """One connection's place at ``caller.host``, waited for when its shares are full."""
        await self._acquire(caller)
        try:
            yield
        finally:
            self._release(caller)

    def _counts(self, caller: Caller) -> tuple[int, int, int]:
        h, c, s = caller.host, caller.client, caller.subscription
        return self._held[(h,)], self._held[(h, c)], self._held[(h, c, s)]

    async def _acquire(self, caller: Caller) -> None:
        # No waiter may take a place at any quiet moment (each release hands its place on at once), so a
        # caller that fits goes ahead of them without passing anyone it should not.
        if may_take(self.shares, *self._counts(caller)):
            self._take(caller)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (caller, fut)
        self._waiting.setdefault(caller.host, []).append(entry)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self._release(caller)  # given a place as the attempt was cancelled: hand it on
            else:
                self._drop(entry)
            raise

    def _take(self, caller: Caller) -> None:
        h, c, s = caller.host, caller.client, caller.subscription
        for key in ((h,), (h, c), (h, c, s)):
            self._held[key] += 1

    def _release(self, caller: Caller) -> None:
        h, c, s = caller.host, caller.client, caller.subscription
        for key in ((h,), (h, c), (h, c, s)):
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]
        self._hand_on(h)

    def _drop(self, entry: tuple[Caller, asyncio.Future[None]]) -> None:
        line = self._waiting.get(entry[0].host)
        if line is not None:
            with contextlib.suppress(ValueError):
                line.remove(entry)
            if not line:
                del self._waiting[entry[0].host]

    def _hand_on(self, host: str) -> None:
        line = self._waiting.get(host)
        while line:
            line[:] = [(c, f) for c, f in line if not f.done()]  # cancelled while waiting
            counts = [self._counts(c)[1:] for c, _ in line]
            i = first_in_line(self.shares, self._held[(host,)], counts)
            if i is None:
                break
            caller, fut = line.pop(i)
            self._take(caller)
            fut.set_result(None)
        if not line:
            self._waiting.pop(host, None)
