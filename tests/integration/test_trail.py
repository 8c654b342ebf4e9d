"""A run's vendor trail when the vendor rate-limits: the 429s are in it and counted, beside the polls."""

from __future__ import annotations

from typing import Any

import pytest

from service.simulator import SimulatorConfig
from tests.conftest import StackFactory, eventually


@pytest.fixture
def sim_config() -> SimulatorConfig:
    # Nutrient's bucket: three requests, then three a second; the run polls every 50-200 ms: 429s come.
    return SimulatorConfig(duration_s=(30.0, 30.0), seed=5, nutrient_rps=3, nutrient_burst=3)


async def test_the_trail_records_the_vendors_429s(make_stack: StackFactory) -> None:
    stack = await make_stack(HOOKBRIDGE_NUTRIENT_PAUSE_MAX_S="1")
    run = await stack.submit("nutrient")

    async def limited() -> dict[str, Any] | None:
        shown: dict[str, Any] = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
        return shown if shown["rate_limited"] >= 1 and shown["polls"] >= 1 else None

    shown = await eventually(limited, timeout=30, what="a 429 and a poll in the run's trail")
    kinds = [e["kind"] for e in shown["trail"]]
    assert "rate_limited" in kinds and "submitted" in kinds and {"poll", "progress"} & set(kinds)
    entry = next(e for e in shown["trail"] if e["kind"] == "rate_limited")
    assert entry["detail"].startswith("retry after ") and entry["latency_ms"] is None
    polled = next(e for e in shown["trail"] if e["kind"] in ("poll", "progress"))
    assert isinstance(polled["latency_ms"], int) and polled["vendor_status"]
    await stack.api.post(f"/v1/runs/{run['id']}/cancel")
