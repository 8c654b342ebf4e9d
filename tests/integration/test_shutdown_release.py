"""A worker past its shutdown grace hands its leased work back before it exits.

On 9efe3c0 the drain cancelled what was still running and left it leased: the next worker could take
it only when the lease ran out (LEASE_S, 90 s by default). Here the lease is 60 s and the next worker
must deliver within a few seconds.
"""

from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.responses import Response

from service.store import keys
from tests.conftest import Receiver, StackFactory, eventually, store_client


async def test_a_drained_worker_releases_its_leases(make_stack: StackFactory, receiver: Receiver) -> None:
    hang = asyncio.Event()

    async def hanging(request: Request) -> Response:  # the receiver holds the attempt open
        await hang.wait()
        return Response(status_code=204)

    receiver.handler = hanging
    lease_s = 60
    first = await make_stack(
        HOOKBRIDGE_SHUTDOWN_GRACE_S="1", HOOKBRIDGE_LEASE_S=str(lease_s), HOOKBRIDGE_CALLBACK_TIMEOUT_S="50"
    )
    sub = await first.subscribe(receiver.url, event_types=["subscription.test"])
    response = await first.api.post(f"/v1/subscriptions/{sub['id']}/test")
    assert response.status_code in (200, 202), response.text
    await eventually(lambda: _value(len(receiver.received) == 1), what="the attempt in flight")

    client = store_client(first.redis_url)  # a cluster client on a cluster: the keys are in several shards
    try:
        (delivery_id,) = [m.decode() for m in await client.zrange(keys.sub_deliveries(sub["id"]), 0, -1)]
        due = keys.due_deliveries(keys.shard_of(delivery_id))
        leased_until = await client.zscore(due, delivery_id)
        assert leased_until is not None and leased_until > time.time() * 1000 + (lease_s - 10) * 1000
        assert await client.zscore(keys.sub_inflight(sub["id"]), delivery_id) is not None

        assert first.worker is not None
        stopped_at = time.time() * 1000
        first.worker.request_stop()

        async def released() -> bool:
            score = await client.zscore(due, delivery_id)
            inflight = await client.zscore(keys.sub_inflight(sub["id"]), delivery_id)
            return score is not None and score <= stopped_at + 5000 and inflight is None

        await eventually(released, timeout=10, what="the lease handed back (due now, no in-flight slot)")
    finally:
        await client.aclose()

    # The next worker sends it at once, not after the 60 s lease.
    receiver.handler = None
    hang.set()
    await make_stack(HOOKBRIDGE_LEASE_S=str(lease_s))
    await eventually(lambda: _value(len(receiver.received) >= 2), timeout=10, what="the delivery resent")


async def _value(value: object) -> object:
    return value
