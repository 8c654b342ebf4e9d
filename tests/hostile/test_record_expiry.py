"""Every write of a record keeps its expiry. At 9efe3c0 a Nutrient run canceled after submission was
written again with a plain SET when the worker told the vendor, which dropped the TTL the cancel had set:
in a soak, exactly those runs outlived retention, unreachable through the API."""

from __future__ import annotations

import json

from service.store import keys
from tests.conftest import StackFactory, eventually, store_client
from tests.hostile._store_helpers import scripted_worker
from tests.hostile.test_vendor_step_faults import FAST, Nutrient


async def test_a_run_canceled_after_submission_keeps_its_expiry_once_the_vendor_is_told(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(worker=False, **FAST, HOOKBRIDGE_RETENTION_S="300")
    client = store_client(stack.redis_url)
    vendor = Nutrient(cancel_status=200)
    try:
        async with scripted_worker(stack.settings, vendor):
            run = await stack.submit("nutrient")
            await stack.wait_status(run["id"], "submitted", "running")
            assert (await stack.api.post(f"/v1/runs/{run['id']}/cancel")).status_code == 200

            async def told() -> bool:
                raw = await client.get(keys.run(run["id"]))
                return raw is not None and not json.loads(raw).get("vendor_cancel_pending")

            await eventually(told, what="the vendor told of the cancel")
        assert vendor.calls["cancel"] == 1
        ttl = await client.pttl(keys.run(run["id"]))
        assert 0 < ttl <= 300_000, ttl
        # Its events are named on the record (Run.event_ids): only progress would have made a list.
        assert await client.pttl(keys.run_events(run["id"])) == -2
    finally:
        await client.aclose()


async def test_no_record_of_an_ended_run_or_final_delivery_is_left_without_expiry(
    make_stack: StackFactory, receiver
) -> None:
    """An audit after a mixed workload on the real simulator: succeeded, failed, canceled before and
    after submission (the cancel told to Nutrient), with deliveries."""
    stack = await make_stack(HOOKBRIDGE_RETENTION_S="600")
    await stack.subscribe(receiver.url, event_types=["run.*"])
    runs = [await stack.submit(v) for v in ("nutrient", "cloudsquid", "uptiq", "nutrient")]
    early = await stack.submit("nutrient")
    await stack.api.post(f"/v1/runs/{early['id']}/cancel")
    late = await stack.submit("nutrient")
    await stack.wait_status(late["id"], "submitted", "running", "succeeded")
    await stack.api.post(f"/v1/runs/{late['id']}/cancel")
    for run in [*runs, early, late]:
        await stack.wait_status(run["id"], "succeeded", "failed", "canceled")
    client = store_client(stack.redis_url)
    try:

        async def settled() -> bool:
            vendors = ("nutrient", "cloudsquid", "uptiq")
            due = sum([await client.zcard(keys.due_runs(v, s)) for v in vendors for s in range(keys.SHARDS)])
            dlv = sum([await client.zcard(keys.due_deliveries(s)) for s in range(keys.SHARDS)])
            return due == 0 and dlv == 0

        await eventually(settled, what="nothing left to do")
        forever = []
        seen = 0
        # Every shard's (a builder given "*" names one shard's: the id picks it).
        for kind in ("run", "result", "evt", "dlv", "doc"):
            pattern = f"{keys.ANY_SHARD}{kind}:*"
            async for key in client.scan_iter(match=pattern):
                seen += 1
                if await client.pttl(key) == -1:
                    forever.append(key)
        assert forever == []
        assert seen > 0  # the scan read the records it checks
    finally:
        await client.aclose()
