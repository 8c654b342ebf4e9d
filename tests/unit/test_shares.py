"""A receiver host's connections shared between clients and subscriptions (service/delivery/shares.py):
the two decisions as tables, then the waiting line on a real event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from service.delivery.shares import Caller, HostShares, Shares, first_in_line, may_take
from service.worker.pumps import client_in_flight_cap

SMALL = Shares(host=4, client=2, subscription=1)


@pytest.mark.parametrize(
    ("host", "client", "sub", "expected"),
    [
        (0, 0, 0, True),
        (3, 1, 0, True),  # the last place at the host
        (4, 0, 0, False),  # the host is full: the receiver's cap, whoever asks
        (2, 2, 0, False),  # the client holds its share
        (1, 1, 1, False),  # the subscription holds its share
    ],
)
def test_may_take(host: int, client: int, sub: int, expected: bool) -> None:
    assert may_take(SMALL, host, client, sub) is expected


@pytest.mark.parametrize(
    ("host", "waiting", "expected"),
    [
        (4, [(0, 0)], None),  # host full: nobody, however little they hold
        (3, [], None),
        (3, [(2, 0), (1, 1)], None),  # one at its client's share, one at its subscription's
        (3, [(1, 0), (0, 0)], 1),  # the client holding the fewest goes first, though it came later
        (3, [(1, 0), (1, 0)], 0),  # equals: the earliest
        (3, [(2, 0), (1, 0), (0, 0)], 2),
    ],
)
def test_first_in_line(host: int, waiting: list[tuple[int, int]], expected: int | None) -> None:
    assert first_in_line(SMALL, host, waiting) == expected


@pytest.mark.parametrize(
    ("client_max", "concurrency", "expected"),
    [(100, 500, 100), (100, 12, 6), (4, 12, 4), (100, 1, 1), (1, 1, 1)],
)
def test_one_client_never_holds_more_than_half_a_workers_delivery_slots(
    client_max: int, concurrency: int, expected: int
) -> None:
    assert client_in_flight_cap(client_max, concurrency) == expected


class Holders:
    """Tasks that take a place and keep it until told to let go."""

    def __init__(self, shares: HostShares) -> None:
        self.shares = shares
        self.got: list[str] = []
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.done: dict[str, asyncio.Event] = {}

    def start(self, name: str, caller: Caller) -> None:
        self.done[name] = asyncio.Event()

        async def hold() -> None:
            async with self.shares.hold(caller):
                self.got.append(name)
                await self.done[name].wait()

        self.tasks[name] = asyncio.create_task(hold())

    async def settle(self) -> None:
        # Each hand-on wakes its task on the loop's next turn; a few turns let every one run.
        for _ in range(5):
            await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def holders(shares: Shares) -> AsyncIterator[Holders]:
    h = Holders(HostShares(shares))
    try:
        yield h
    finally:
        for task in h.tasks.values():
            task.cancel()
        await asyncio.gather(*h.tasks.values(), return_exceptions=True)


async def test_a_client_at_its_share_waits_and_the_others_go() -> None:
    async with holders(Shares(host=4, client=2, subscription=2)) as h:
        for name in ("b1", "b2", "b3"):
            h.start(name, Caller("h", "bob", "s_b"))
        h.start("a1", Caller("h", "alice", "s_a"))
        await h.settle()
        assert h.got == ["b1", "b2", "a1"]  # b3 waits for a place of Bob's own
        assert h.shares.held("h") == 3 and h.shares.waiting("h") == 1
        h.start("c1", Caller("h", "carol", "s_c"))  # the last place at the host
        await h.settle()
        assert h.got[-1] == "c1" and h.shares.waiting("h") == 1
        h.done["b1"].set()  # Bob's own place, back to Bob
        await h.settle()
        assert h.got[-1] == "b3" and h.shares.waiting("h") == 0


async def test_a_full_host_gives_a_freed_place_to_the_client_holding_the_fewest() -> None:
    async with holders(Shares(host=4, client=4, subscription=4)) as h:
        for name in ("b1", "b2", "b3"):
            h.start(name, Caller("h", "bob", "s_b"))
        h.start("a1", Caller("h", "alice", "s_a"))
        await h.settle()
        h.start("b4", Caller("h", "bob", "s_b"))
        await h.settle()
        h.start("c1", Caller("h", "carol", "s_c"))
        await h.settle()
        assert h.shares.waiting("h") == 2
        # Alice's place goes to Carol (none held) before Bob's fourth (three held), though his came first.
        h.done["a1"].set()
        await h.settle()
        assert h.got[-1] == "c1"
        h.done["c1"].set()
        await h.settle()
        assert h.got[-1] == "b4" and h.shares.waiting("h") == 0


async def test_a_subscription_at_its_share_leaves_its_clients_other_subscriptions_room() -> None:
    async with holders(Shares(host=10, client=4, subscription=2)) as h:
        for name in ("x1", "x2", "x3"):
            h.start(name, Caller("h", "alice", "s_x"))
        h.start("y1", Caller("h", "alice", "s_y"))
        await h.settle()
        assert h.got == ["x1", "x2", "y1"]
        assert h.shares.held("h", "alice") == 3 and h.shares.held("h", "alice", "s_x") == 2


async def test_hosts_are_counted_apart_and_counts_go_when_unused() -> None:
    async with holders(SMALL) as h:
        h.start("a", Caller("h1", "bob", "s"))
        h.start("b", Caller("h2", "bob", "s"))
        await h.settle()
        assert h.got == ["a", "b"]
        for name in ("a", "b"):
            h.done[name].set()
        await asyncio.gather(*h.tasks.values())
        assert h.shares._held == {} and h.shares._waiting == {}


async def test_a_waiter_cancelled_by_its_timeout_leaves_the_line_and_takes_nothing() -> None:
    async with holders(Shares(host=1, client=1, subscription=1)) as h:
        h.start("first", Caller("h", "bob", "s"))
        h.start("late", Caller("h", "alice", "s_a"))
        h.start("next", Caller("h", "carol", "s_c"))
        await h.settle()
        assert h.shares.waiting("h") == 2
        h.tasks["late"].cancel()
        await h.settle()
        assert h.shares.waiting("h") == 1
        h.done["first"].set()
        await h.settle()
        assert h.got == ["first", "next"] and h.shares.held("h") == 1


async def test_a_place_given_as_its_waiter_is_cancelled_is_handed_on() -> None:
    async with holders(Shares(host=1, client=1, subscription=1)) as h:
        h.start("first", Caller("h", "bob", "s"))
        h.start("second", Caller("h", "alice", "s_a"))
        h.start("third", Caller("h", "carol", "s_c"))
        await h.settle()
        # The place is given to "second" and, before it runs, its attempt's timeout cancels it.
        h.done["first"].set()
        await asyncio.sleep(0)  # "first" leaves and hands its place on
        h.tasks["second"].cancel()
        await h.settle()
        assert h.got == ["first", "third"] and h.shares.held("h") == 1 and h.shares.waiting("h") == 0
