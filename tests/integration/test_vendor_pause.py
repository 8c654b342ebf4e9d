"""One 429 pauses the whole vendor, for every worker, with the default MAX_RPS=0 (issue 11, finding 2).

Twenty Nutrient runs are in flight, polled by two workers, when the vendor answers 429 to everything for
8 s. The vendor must see the first round, then about one probe per pause, not every run each time; and no
run may fail for it.

The storm comes from a proxy of the test's own in front of the simulator (service/testing/proxy.py):
the simulator's 429s are being turned into token buckets on another branch, and a storm needs an exact
window of time in which *every* request is refused, which a rate or a bucket does not give. Everything
outside the window is the simulator's own answer.
"""

from __future__ import annotations

import itertools

import pytest

from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.simulator import SimulatorConfig
from service.testing.proxy import FaultProxy
from service.worker.runtime import WorkerRuntime
from tests.conftest import ClockedFactory

RUNS = 20
STORM_S = 8.0
TICK_S = 0.05


@pytest.fixture
def sim_config() -> SimulatorConfig:
    # Runs last well past the storm, so that all twenty are polled through it.
    return SimulatorConfig(duration_s=(13.0, 14.0), seed=3)


async def _storm(
    make_clocked: ClockedFactory, servers: Servers, retry_after: str | None, **env: str
) -> tuple[FaultProxy, float]:
    """Two workers and the simulator on one clock, moved in ticks of ``TICK_S``; each tick both workers
    work what is due. The vendor's times in the proxy's log are the clock's, so they are exact."""
    proxy = FaultProxy("")
    proxy_url = await servers.start(proxy, free_port())
    c = await make_clocked(HOOKBRIDGE_NUTRIENT_BASE_URL=proxy_url + "/nutrient", **env)
    proxy.target, proxy.clock = c.stack.simulator_url, c.clock
    second = WorkerRuntime(c.stack.settings, clock=c.clock)
    try:
        runs = [await c.stack.submit("nutrient", filename=f"storm-{i}.pdf") for i in range(RUNS)]

        async def statuses() -> list[str]:
            return [(await c.stack.api.get(f"/v1/runs/{r['id']}")).json()["status"] for r in runs]

        async def tick() -> None:
            c.clock.advance(TICK_S)
            await c.step()
            await second.step_until_idle()

        await c.step()
        while not all(s == "running" for s in await statuses()):
            await tick()
        c.clock.advance(TICK_S / 2)  # the storm starts between two ticks, as it would between requests
        started = proxy.storm(STORM_S, retry_after)
        while c.clock.time() < started + 20:  # runs last 13 to 14 s
            await tick()
        final = await statuses()
        assert "failed" not in final, final  # a 429 never fails a run
        assert all(s == "succeeded" for s in final), final
    finally:
        await second.close()
    return proxy, started


def _report(name: str, proxy: FaultProxy, started: float, pause_ends: list[float]) -> tuple[list[float], int]:
    """Prints the figure: requests the vendor saw during the storm against the ideal, which is the first
    round (what was already on its way when the first 429 came back: the requests of the storm's first
    tick with any, since the clock stands still within a tick) plus one probe per pause that ends within
    the storm (``pause_ends``, seconds after that first 429).

    The runs were submitted together and their jitter is shorter than a tick, so they are polled in one
    group: the storm may start just after one round, and the first 429 then answers the next, up to an
    interval later. The pauses count from there."""
    during = proxy.between(started, started + STORM_S)
    before = proxy.between(started - STORM_S, started)
    times = [e.t - started for e in during]
    first_round = [t for t in times if t == times[0]]
    probes = times[len(first_round) :]
    first_429 = times[0] if times else 0.0
    ideal = len(first_round) + len([t for t in pause_ends if first_429 + t < STORM_S])
    print(
        f"\n{name}: {len(during)} vendor requests during the {STORM_S:g}s storm, ideal {ideal} (first round "
        f"{len(first_round)} of {RUNS} runs in flight, then one probe at each pause end "
        f"{pause_ends}); probes at {[round(t, 2) for t in probes]}; "
        f"{len(before)} requests in the {STORM_S:g}s before the storm"
    )
    assert all(e.status == 429 for e in during), [e for e in during if e.status != 429]
    assert len(first_round) <= RUNS
    return probes, len(during)


async def test_a_storm_of_429s_with_retry_after_holds_every_worker(
    make_clocked: ClockedFactory, servers: Servers
) -> None:
    proxy, started = await _storm(make_clocked, servers, retry_after="1")
    probes, total = _report("Retry-After: 1", proxy, started, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    # Without the shared pause every run comes back after its own Retry-After: ~20 requests a second.
    assert total <= RUNS + STORM_S + 2
    # About one probe per second of storm, never two within one Retry-After.
    assert STORM_S - 3 <= len(probes) <= STORM_S + 1, probes
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert all(gap >= 0.95 for gap in gaps), gaps


async def test_without_retry_after_the_pause_grows_to_its_cap(
    make_clocked: ClockedFactory, servers: Servers
) -> None:
    # The pause starts at the vendor's minimum interval (POLL_INITIAL_S, 250 ms here) and doubles while
    # the probes are refused, up to PAUSE_MAX_S (2 s): probes at about .25, .75, 1.75, 3.75, 5.75, 7.75 s.
    proxy, started = await _storm(
        make_clocked,
        servers,
        retry_after=None,
        HOOKBRIDGE_NUTRIENT_POLL_INITIAL_S="250ms",
        HOOKBRIDGE_NUTRIENT_POLL_MAX_S="250ms",
        HOOKBRIDGE_NUTRIENT_PAUSE_MAX_S="2s",
    )
    probes, total = _report("no Retry-After", proxy, started, [0.25, 0.75, 1.75, 3.75, 5.75, 7.75])
    assert total <= RUNS + 6 + 2
    assert 4 <= len(probes) <= 7, probes
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert all(gap >= 0.45 for gap in gaps), gaps  # never below the second pause (500 ms)
    assert all(later >= earlier - 0.1 for earlier, later in itertools.pairwise(gaps)), gaps
    assert max(gaps) <= 2.0 + 0.5, gaps  # capped by PAUSE_MAX_S
    assert proxy.log[-1].t > started + STORM_S
