"""The vendor request budget (MAX_RPS) holds across the vendor's 429s, and every run still ends."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from service.simulator import SimulatorConfig
from tests.conftest import Stack, StackFactory, eventually

pytestmark = pytest.mark.slow


@pytest.fixture
def sim_config() -> SimulatorConfig:
    # The vendor's own limit (a token bucket per key, polls and submits together, no Retry-After) is a
    # little under our budget, so some requests are answered 429; runs finish almost at once.
    return SimulatorConfig(duration_s=(0.01, 0.05), seed=11, nutrient_rps=4.5, nutrient_burst=3)


async def test_fifty_runs_finish_within_five_requests_per_second(make_stack: StackFactory) -> None:
    stack: Stack = await make_stack(HOOKBRIDGE_NUTRIENT_MAX_RPS="5")
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        await sim.delete("/_sim/requests")
        runs = [await stack.submit("nutrient", filename=f"budget-{i}.pdf") for i in range(50)]

        async def all_ended() -> bool:
            listed = (await stack.api.get("/v1/runs", params={"limit": 200})).json()["data"]
            return len(listed) == 50 and all(r["status"] in ("succeeded", "failed") for r in listed)

        await eventually(all_ended, timeout=110, interval=0.5, what="50 runs ended")
        log = (await sim.get("/_sim/requests", params={"vendor": "nutrient"})).json()["data"]

    statuses = {r["id"]: (await stack.api.get(f"/v1/runs/{r['id']}")).json()["status"] for r in runs}
    per_second = Counter(int(entry["t"]) for entry in log)
    # Six requests in a row span a second at 5 per second. Their send slots are exactly 200 ms apart; what the
    # simulator sees is each slot plus the worker's scheduling delay, so one late request followed by five on
    # time shortens a window by that delay. A stall of the worker's loop past several slots once sent them
    # together (seen: six in 181 ms on a loaded 2-core machine); the worker's own pace now spaces them
    # (worker/budget.py: paced; tests/unit/test_budget_pace.py), at worst half an interval for one pair.
    times = sorted(entry["t"] for entry in log)
    tightest = min(times[i + 5] - times[i] for i in range(len(times) - 5))
    rate_limited = sum(1 for entry in log if entry["status"] == 429)
    print(
        f"budget: {len(log)} requests, {rate_limited} answered 429, "
        f"busiest second {max(per_second.values())}, "
        f"span {max(per_second) - min(per_second) + 1}s, tightest 6 in {tightest:.3f}s, "
        f"{Counter(statuses.values())}"
    )
    assert set(statuses.values()) == {"succeeded"}
    assert rate_limited > 0
    # Scheduling delays on a loaded machine shift single requests but cannot raise the average rate, and
    # without the budget six requests land within milliseconds: the rate over the whole run is the
    # budget's, and no six requests come in a burst.
    assert (len(times) - 1) / (times[-1] - times[0]) <= 5 * 1.05
    assert tightest >= 0.25
