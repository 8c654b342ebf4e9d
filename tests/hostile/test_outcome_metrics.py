"""Every terminal transition counts once in ``hookbridge_runs_total``, wherever it happens. At 9efe3c0
only the worker's own finish counted: runs canceled through the API and runs the vendor refused at submit
were never counted (and the refusal logged no "run finished" line)."""

from __future__ import annotations

import httpx

from tests.conftest import StackFactory
from tests.hostile._store_helpers import metric, scripted_worker
from tests.hostile.test_vendor_step_faults import FAST, Nutrient


async def _runs_total(client: httpx.AsyncClient, **labels: str) -> float:
    # The API and the worker run in this test's process and share one registry; deltas are what count.
    return metric((await client.get("/metrics")).text, "hookbridge_runs_total", **labels)


async def test_an_api_cancel_counts_once(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    before = await _runs_total(stack.api, vendor="cloudsquid", status="canceled")
    run = await stack.submit("cloudsquid")
    for _ in range(3):  # canceling again answers 200 and must not count again
        assert (await stack.api.post(f"/v1/runs/{run['id']}/cancel")).status_code == 200
    assert await _runs_total(stack.api, vendor="cloudsquid", status="canceled") == before + 1


async def test_a_cancel_told_to_the_vendor_counts_once(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, **FAST)
    before = await _runs_total(stack.api, vendor="nutrient", status="canceled")
    vendor = Nutrient(cancel_status=200)
    async with scripted_worker(stack.settings, vendor):
        run = await stack.submit("nutrient")
        await stack.wait_status(run["id"], "submitted", "running")
        await stack.api.post(f"/v1/runs/{run['id']}/cancel")
        from tests.hostile.test_vendor_step_faults import _leaves_due_set

        await _leaves_due_set(stack, run["id"], timeout=6)
    assert vendor.calls["cancel"] == 1
    assert await _runs_total(stack.api, vendor="nutrient", status="canceled") == before + 1


async def test_a_refusal_at_submit_counts_and_logs_its_end(make_stack: StackFactory, capsys) -> None:
    stack = await make_stack(worker=False, **FAST)
    before = await _runs_total(stack.api, vendor="nutrient", status="failed")

    def vendor(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"message": "instructions are invalid", "code": "invalid_request"})

    async with scripted_worker(stack.settings, vendor):
        runs = [await stack.submit("nutrient") for _ in range(3)]
        for run in runs:
            ended = await stack.wait_status(run["id"], "failed")
            assert ended["error"]["code"] == "vendor_rejected"
    assert await _runs_total(stack.api, vendor="nutrient", status="failed") == before + 3
    out = capsys.readouterr()
    finished = [line for line in (out.out + out.err).splitlines() if "run finished" in line]
    assert sum(any(r["id"] in line for line in finished) for r in runs) == 3


async def test_every_end_on_the_simulator_is_counted_exactly(make_stack: StackFactory) -> None:
    stack = await make_stack()
    before = await _runs_total(stack.api)
    runs = [await stack.submit(v) for v in ("nutrient", "cloudsquid", "uptiq", "cloudsquid")]
    await stack.api.post(f"/v1/runs/{runs[-1]['id']}/cancel")
    for run in runs:
        await stack.wait_status(run["id"], "succeeded", "failed", "canceled")
    assert await _runs_total(stack.api) == before + len(runs)
