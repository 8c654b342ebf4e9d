"""Example events: ``POST /v1/subscriptions/{id}/test`` with ``{"event_type": ...}`` sends an example of
that type, shaped as the real one (it validates against the callback's own schema) with ``"example":
true`` in ``data``, whatever the subscription's ``event_types``; examples are not in the feed. Without a
body it sends ``subscription.test`` as before."""

from __future__ import annotations

from typing import Any

from standardwebhooks import Webhook

from service.core import domain, shapes
from tests.conftest import Receiver, Stack, eventually


async def _value(value: Any) -> Any:
    return value


async def test_every_event_type_has_an_example_shaped_as_the_real_one(
    stack: Stack, receiver: Receiver
) -> None:
    # The subscription asked for run.succeeded only: examples of every type reach it all the same.
    sub = await stack.subscribe(receiver.url, event_types=["run.succeeded"])
    sent: dict[str, str] = {}
    for event_type in domain.RUN_EVENTS:
        answer = await stack.api.post(f"/v1/subscriptions/{sub['id']}/test", json={"event_type": event_type})
        assert answer.status_code == 202, answer.text
        sent[event_type] = answer.json()["event_id"]
    await eventually(lambda: _value(len(receiver.received) == len(sent)), what="every example delivered")
    by_type = {r.json()["type"]: r for r in receiver.received}
    assert set(by_type) == set(domain.RUN_EVENTS)
    for event_type, received in by_type.items():
        body = received.json()
        assert received.headers["webhook-id"] == sent[event_type]
        Webhook(sub["secret"]).verify(received.body, received.headers)
        # The callback's own model (extra members forbidden): the same shape as the real event's.
        shapes.CALLBACKS[event_type].model_validate(body)
        assert body["data"]["example"] is True
        assert body["data"]["run"]["id"].startswith("run_")
    failed = by_type["run.failed"].json()["data"]
    assert failed["run"]["status"] == "failed" and failed["run"]["error"]["code"] == "vendor_failed"
    succeeded = by_type["run.succeeded"].json()["data"]
    assert succeeded["run"]["status"] == "succeeded" and succeeded["result"] is not None
    assert by_type["run.progress"].json()["data"]["run"]["progress"]["percent"] == 40

    # Not in the feed: no run had these events.
    feed = (await stack.api.get("/v1/events", params={"limit": 200})).json()["data"]
    assert not {e["event_id"] for e in feed} & set(sent.values())
    # In the delivery log, as the test event is: of no run.
    logged = (await stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    assert {d["event_type"] for d in logged} == set(domain.RUN_EVENTS)
    assert {d["run_id"] for d in logged} == {None}


async def test_without_a_body_the_test_event_is_sent_as_before(stack: Stack, receiver: Receiver) -> None:
    sub = await stack.subscribe(receiver.url)
    for kwargs in ({}, {"json": {}}, {"json": {"event_type": "subscription.test"}}):
        assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test", **kwargs)).status_code == 202
    await eventually(lambda: _value(len(receiver.received) == 3), what="three test events")
    for received in receiver.received:
        body = received.json()
        assert body["type"] == "subscription.test" and "example" not in body["data"]


async def test_a_filter_or_an_unknown_type_is_refused_and_sends_nothing(
    stack: Stack, receiver: Receiver
) -> None:
    sub = await stack.subscribe(receiver.url, event_types=["run.*"])
    for bad in ("run.*", "run.exploded", "", 3, None):
        answer = await stack.api.post(f"/v1/subscriptions/{sub['id']}/test", json={"event_type": bad})
        assert answer.status_code == 422, (bad, answer.text)
        [error] = answer.json()["errors"]
        assert error["pointer"] == "/event_type"
    unknown = await stack.api.post(f"/v1/subscriptions/{sub['id']}/test", json={"type": "run.failed"})
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["pointer"] == "/type"
    logged = (await stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    assert logged == [] and receiver.received == []
