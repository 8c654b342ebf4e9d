"""Per-client quotas, overrun as a hostile or runaway tenant would: subscriptions, submits per second
(a GCRA in Redis shared by every API pod), and the size of ``options``. None of them existed at 9efe3c0:
5,000 subscriptions, any submit rate and 60 MB of options were accepted."""

from __future__ import annotations

import asyncio
import base64

import pytest
import redis.asyncio as aioredis

from service.vendors.registry import load_settings
from tests.conftest import StackFactory


def _run_body(**extra: object) -> dict[str, object]:
    return {
        "vendor": "nutrient",
        "document": {"content_base64": base64.b64encode(b"%PDF-1.4 q").decode(), "filename": "q.pdf"},
        **extra,
    }


async def test_subscriptions_past_the_quota_are_409_quota_exceeded(
    make_stack: StackFactory, receiver
) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_MAX_SUBSCRIPTIONS_PER_CLIENT="3")
    # Sent all at once, as an attacker would: the count is checked in the same atomic step as the write.
    answers = await asyncio.gather(
        *(stack.api.post("/v1/subscriptions", json={"url": receiver.url}) for _ in range(12))
    )
    codes = sorted(a.status_code for a in answers)
    assert codes == [201] * 3 + [409] * 9, codes
    refused = next(a for a in answers if a.status_code == 409)
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "quota_exceeded"
    listed = (await stack.api.get("/v1/subscriptions")).json()["data"]
    assert len(listed) == 3
    # Another client is not affected; deleting one frees a place.
    assert (await stack.bob.post("/v1/subscriptions", json={"url": receiver.url})).status_code == 201
    assert (await stack.api.delete(f"/v1/subscriptions/{listed[0]['id']}")).status_code == 204
    assert (await stack.api.post("/v1/subscriptions", json={"url": receiver.url})).status_code == 201
    assert (await stack.api.post("/v1/subscriptions", json={"url": receiver.url})).status_code == 409


async def test_submits_past_the_rate_are_429_with_retry_after_shared_by_every_api_pod(
    make_stack: StackFactory,
) -> None:
    env = {"HOOKBRIDGE_SUBMIT_RATE_PER_S": "0.5", "HOOKBRIDGE_SUBMIT_BURST": "4"}
    pod_a = await make_stack(worker=False, **env)
    pod_b = await make_stack(worker=False, **env)  # a second API process over the same Redis
    accepted = [await pod.api.post("/v1/runs", json=_run_body()) for pod in (pod_a, pod_b, pod_a, pod_b)]
    assert [a.status_code for a in accepted] == [202] * 4
    for pod in (pod_a, pod_b):
        refused = await pod.api.post("/v1/runs", json=_run_body())
        assert refused.status_code == 429, refused.text
        assert refused.json()["code"] == "rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 2
    # Nothing was written for the refused submits: alice has exactly the four accepted runs.
    assert len((await pod_a.api.get("/v1/runs")).json()["data"]) == 4
    # Bob has his own budget.
    assert (await pod_b.bob.post("/v1/runs", json=_run_body())).status_code == 202
    # Bad input is refused for what it is and does not spend the budget of a client under its rate.
    bad = await pod_b.bob.post("/v1/runs", json={"vendor": "nope"})
    assert bad.status_code == 422


async def test_an_over_rate_client_is_refused_before_a_large_body_is_read(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_SUBMIT_RATE_PER_S="0.1", HOOKBRIDGE_SUBMIT_BURST="1")
    assert (await stack.api.post("/v1/runs", json=_run_body())).status_code == 202
    # Past 256 KiB the rate is looked at first: 429 for a body that would be 422 once read.
    large = await stack.api.post("/v1/runs", json={"vendor": "nope", "pad": "x" * 300_000})
    assert large.status_code == 429 and large.json()["code"] == "rate_limited", large.text
    # A small body is read and validated first: bad input is refused for what it is.
    small = await stack.api.post("/v1/runs", json={"vendor": "nope"})
    assert small.status_code == 422 and small.json()["code"] == "unknown_vendor"
    refused = await stack.api.post("/v1/runs", json=_run_body())
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert len((await stack.api.get("/v1/runs")).json()["data"]) == 1


async def test_a_flood_of_submits_gets_exactly_the_burst(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_SUBMIT_RATE_PER_S="0.1", HOOKBRIDGE_SUBMIT_BURST="5")
    answers = await asyncio.gather(*(stack.api.post("/v1/runs", json=_run_body()) for _ in range(40)))
    codes = [a.status_code for a in answers]
    assert codes.count(202) == 5 and codes.count(429) == 35, codes


async def test_options_past_the_size_are_422_options_too_large_and_write_nothing(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_MAX_OPTIONS_BYTES="1024")
    client = aioredis.from_url(stack.redis_url)
    try:
        before = sorted(await client.keys("*"))
        big = {"instructions": {"fields": ["x" * 100] * 20}}  # ~2.1 KB as JSON
        for body in (_run_body(options=big), _run_body(options={"k": "y" * 2000})):
            response = await stack.api.post("/v1/runs", json=body)
            assert response.status_code == 422, response.text
            assert response.json()["code"] == "options_too_large"
        # Over multipart, the same limit.
        import json

        response = await stack.api.post(
            "/v1/runs",
            files={
                "file": ("a.pdf", b"%PDF-1.4", "application/pdf"),
                "request": (None, json.dumps({"vendor": "nutrient", "options": big})),
            },
        )
        assert response.status_code == 422 and response.json()["code"] == "options_too_large"
        assert sorted(await client.keys("*")) == before
        small = await stack.api.post("/v1/runs", json=_run_body(options={"instructions": {"mode": "text"}}))
        assert small.status_code == 202
    finally:
        await client.aclose()


@pytest.mark.parametrize("name", ["MAX_SUBSCRIPTIONS_PER_CLIENT", "SUBMIT_RATE_PER_S", "MAX_OPTIONS_BYTES"])
def test_quota_defaults_are_what_an_internal_platform_would_pick(name: str) -> None:

    defaults = load_settings({})
    assert {
        "MAX_SUBSCRIPTIONS_PER_CLIENT": defaults.max_subscriptions_per_client == 100,
        "SUBMIT_RATE_PER_S": defaults.submit_rate_per_s == 100 and defaults.submit_burst == 200,
        "MAX_OPTIONS_BYTES": defaults.max_options_bytes == 64 * 1024,
    }[name]


async def test_sends_on_demand_share_a_per_client_rate(make_stack: StackFactory, receiver) -> None:
    """A test event, a retry or a recover is an outbound request the tenant aims where it likes."""
    stack = await make_stack(worker=False, HOOKBRIDGE_SUBMIT_RATE_PER_S="0.1", HOOKBRIDGE_SUBMIT_BURST="3")
    sub = await stack.subscribe(receiver.url)
    answers = [await stack.api.post(f"/v1/subscriptions/{sub['id']}/test") for _ in range(3)]
    assert [a.status_code for a in answers] == [202] * 3
    for path, body in (
        (f"/v1/subscriptions/{sub['id']}/test", None),
        (f"/v1/subscriptions/{sub['id']}/recover", {"since": "2026-01-01T00:00:00Z"}),
    ):
        refused = await stack.api.post(path, json=body)
        assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
        assert int(refused.headers["retry-after"]) >= 1
    bob_sub = await stack.bob.post("/v1/subscriptions", json={"url": receiver.url})
    assert (await stack.bob.post(f"/v1/subscriptions/{bob_sub.json()['id']}/test")).status_code == 202
