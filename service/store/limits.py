"""Limits shared by every pod: a client's API rate limiters, the vendor's request budget (GCRA), and the
vendor's pause after a 429 with its one probe. Each is one key and one small script."""

from __future__ import annotations

from service.store import keys
from service.store.base import Part


class OverRate(Exception):
    """The client is over its rate; ``wait_s`` until it may go again."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"over the rate for {wait_s:g} s")
        self.wait_s = wait_s


class Limits(Part):
    async def rate_limit(
        self, name: str, client: str, rate_per_s: float, burst: int, *, take: bool = True
    ) -> float:
        """Takes one request from the client's limiter ``name`` (GCRA, shared by every API pod), or with
        ``take=False`` only looks. Returns 0 when it may go, else the seconds to wait before asking again."""
        wait_ms = await self.scripts.rate_limit(
            keys=[keys.client_rate(name, client)],
            args=[1000.0 / rate_per_s, burst, "take" if take else "peek"],
        )
        return int(wait_ms) / 1000

    async def budget_take(self, vendor: str, now_ms: int, interval_ms: float) -> float:
        """Reserves the vendor's next request slot; returns when (ms) the request may go."""
        slot = await self.scripts.budget(keys=[keys.vendor_budget(vendor)], args=[now_ms, interval_ms])
        return float(slot)

    async def pause_limited(
        self,
        vendor: str,
        now_ms: int,
        retry_after_ms: float | None,
        floor_ms: float,
        cap_ms: float,
        probe: str | None,
    ) -> tuple[float, int]:
        """The vendor answered 429: pause it for every worker. Returns (until_ms, 429s in a row)."""
        untl, streak = await self.scripts.pause(
            keys=[keys.vendor_pause(vendor)],
            args=[
                "limited",
                now_ms,
                probe or "",
                -1 if retry_after_ms is None else int(retry_after_ms),
                int(floor_ms),
                int(cap_ms),
            ],
        )
        return float(untl), int(streak)

    async def pause_settle(self, vendor: str, now_ms: int, probe: str, *, answered: bool) -> bool:
        """The probe's outcome: an answer (not 429) ends the pause; no answer lets another run probe."""
        done = await self.scripts.pause(
            keys=[keys.vendor_pause(vendor)], args=["answered" if answered else "release", now_ms, probe]
        )
        return bool(done)
