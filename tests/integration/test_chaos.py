"""A small run of the chaos script (``bench/chaos.py``): worker SIGKILLs and a Redis SIGKILL and restart
while runs are in flight, with a flaky receiver; nothing is lost, neither by the callbacks nor by a consumer
that long-polls the event feed."""

from __future__ import annotations

import pytest

from bench.chaos import ChaosConfig, report, run_chaos

pytestmark = pytest.mark.slow


async def test_nothing_is_lost_when_workers_and_redis_are_killed(tmp_path: object) -> None:
    cfg = ChaosConfig(
        runs=45,
        workers=2,
        kill_every_s=2.5,
        redis_restarts=1,
        receiver_fail_rate=0.2,
        sim_duration="2,4",
        timeout_s=90,
    )
    ledger = await run_chaos(cfg)
    print(report(cfg, ledger))
    assert ledger.worker_kills >= 1 and ledger.redis_restarts == 1
    assert ledger.runs_submitted == 45
    assert ledger.runs_not_terminal == []
    assert ledger.run_statuses == {"succeeded": 45}
    assert ledger.events_missing == []
    assert ledger.events_delivered == ledger.events_emitted >= 90
    # The feed, read by a long-polling consumer through all of it: every event once, in emission order.
    assert ledger.feed_read == ledger.events_emitted
    assert ledger.feed_missing == [] and ledger.feed_duplicates == 0
    assert ledger.feed_runs_out_of_order == [] and ledger.feed_positions_not_increasing == 0
