"""A run's vendor trail when the vendor rate-limits: the 429s are in it and counted, beside the polls."""

from __future__ import annotations

import pytest

from service.simulator import SimulatorConfig
from tests.conftest import StackFactory


@pytest.fixture
def sim_config() -> SimulatorConfig:
    # Nutrient's bucket: three requests, then three a second; the run polls every 50-200 ms: some 429s.
    return SimulatorConfig(duration_s=(1.0, 1.5), seed=5, nutrient_rps=3, nutrient_burst=3)


async def test_the_trail_records_the_vendors_429s(make_stack: StackFactory) -> None:
    stack = await make_stack(HOOKBRIDGE_NUTRIENT_PAUSE_MAX_S="1")
    run = await stack.submit("nutrient")
    done = await stack.wait_status(run["id"], "succeeded", timeout=60)
    shown = (await stack.api.get(f"/v1/runs/{done['id']}")).json()
    kinds = [e["kind"] for e in shown["trail"]]
    assert shown["rate_limited"] >= 1 and "rate_limited" in kinds
    limited = next(e for e in shown["trail"] if e["kind"] == "rate_limited")
    assert limited["detail"].startswith("retry after ")
    assert kinds[0] == "submitted" and kinds[-1] == "result"
