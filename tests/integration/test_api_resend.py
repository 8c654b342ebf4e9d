"""Resend now: ``POST /v1/deliveries/{id}/retry`` sends any delivery now (a pending one in backoff
included, whose scheduled attempt it replaces, and whose schedule then restarts from its first step),
unless an attempt is being sent at that moment (409 ``delivery_in_flight``)."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from service.core.records import Delivery
from tests.conftest import ClockedFactory, Receiver, Stack, eventually


async def _value(value: Any) -> Any:
    return value


async def _stored(store: Any, delivery_id: str) -> Delivery:
    d = await store.deliveries.get_delivery(delivery_id)
    assert d is not None
    return d


async def test_a_delivery_in_backoff_is_sent_now_and_its_schedule_restarts(
    make_clocked: ClockedFactory, receiver: Receiver
) -> None:
    c = await make_clocked(HOOKBRIDGE_RETRY_SCHEDULE="1s,100s,100s")
    receiver.answers = [500, 500, 500]
    sub = await c.stack.subscribe(receiver.url)
    assert (await c.stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    await c.step()
    [listed] = (await c.stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    await c.advance(1.3)  # the second attempt fails too: the next waits the second step, 100 s
    d = await _stored(c.worker.store, listed["id"])
    assert (d.status, d.attempts) == ("pending", 2)
    assert d.next_attempt_at is not None and d.next_attempt_at - c.now_ms() >= 80_000

    # The receiver is fixed: resend now, rather than in 100 s.
    resent = await c.stack.api.post(f"/v1/deliveries/{d.id}/retry")
    assert resent.status_code == 202, resent.text
    assert resent.json()["status"] == "pending" and resent.json()["attempts"] == 2
    assert await c.step() == 1 and len(receiver.received) == 3  # sent at once, not 100 s later
    # That attempt failed (the third 500): the schedule starts again at its first step (1 s ± 20 %),
    # not at its third (100 s).
    d = await _stored(c.worker.store, d.id)
    assert (d.status, d.attempts, d.series) == ("pending", 3, 2)
    assert d.next_attempt_at is not None and 800 <= d.next_attempt_at - c.now_ms() <= 1200
    await c.advance(1.3)
    assert (await _stored(c.worker.store, d.id)).status == "succeeded" and len(receiver.received) == 4
    # The same webhook-id every time: the receiver deduplicates on it.
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1


async def test_a_delivery_being_sent_is_refused_and_a_delivered_one_is_sent_again(
    stack: Stack, receiver: Receiver
) -> None:
    release = asyncio.Event()

    async def slow(request: Request) -> Response:
        await release.wait()
        return Response(status_code=204)

    receiver.handler = slow
    sub = await stack.subscribe(receiver.url)
    assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    await eventually(lambda: _value(len(receiver.received) == 1), what="the attempt under way")
    [d] = (await stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    busy = await stack.api.post(f"/v1/deliveries/{d['id']}/retry", headers={"X-Request-Id": "busy-1"})
    assert busy.status_code == 409
    assert busy.json()["code"] == "delivery_in_flight" and busy.json()["request_id"] == "busy-1"
    release.set()

    async def delivered() -> dict[str, Any] | None:
        got = (await stack.api.get(f"/v1/deliveries/{d['id']}")).json()
        return got if got["status"] == "succeeded" else None

    await eventually(delivered, what="the first attempt delivered")
    assert len(receiver.received) == 1  # the refused resend sent nothing
    again = await stack.api.post(f"/v1/deliveries/{d['id']}/retry")
    assert again.status_code == 202 and again.json()["status"] == "pending"
    await eventually(lambda: _value(len(receiver.received) == 2), what="the resend")
    assert receiver.received[0].headers["webhook-id"] == receiver.received[1].headers["webhook-id"]
    await eventually(delivered, what="the resend delivered")
    # Someone else's delivery is not found, whatever its state.
    assert (await stack.bob.post(f"/v1/deliveries/{d['id']}/retry")).status_code == 404


async def test_recover_still_resends_only_failed_deliveries(
    make_clocked: ClockedFactory, receiver: Receiver
) -> None:
    c = await make_clocked(HOOKBRIDGE_RETRY_SCHEDULE="100s")
    receiver.answers = [500]
    sub = await c.stack.subscribe(receiver.url)
    assert (await c.stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    await c.step()  # failed once; waits 100 s
    listed = (await c.stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    assert [d["status"] for d in listed] == ["pending"]
    recovered = await c.stack.api.post(
        f"/v1/subscriptions/{sub['id']}/recover", json={"since": "2020-01-01T00:00:00Z"}
    )
    assert recovered.status_code == 202 and recovered.json()["retried"] == 0
    assert await c.step() == 0 and len(receiver.received) == 1
