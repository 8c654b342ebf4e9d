"""While Redis is down the API answers 503 with Retry-After (never 500), the worker backs off, and both
resume by themselves when Redis is back; with AOF, the runs accepted before the crash finish."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.dev.embedded_redis import EmbeddedRedis
from tests.conftest import Receiver, StackFactory, eventually


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(appendfsync="always") as server:
        yield server


async def test_api_answers_503_while_redis_is_down_and_work_resumes(
    own_redis: EmbeddedRedis, make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack(HOOKBRIDGE_REDIS_URL=own_redis.url)
    await stack.subscribe(receiver.url)
    before = await stack.submit("nutrient", filename="slow-before.pdf")

    own_redis.kill()
    for method, path in (
        ("GET", "/v1/runs"),
        ("GET", f"/v1/runs/{before['id']}"),
        ("POST", "/v1/subscriptions"),
    ):
        response = await stack.api.request(
            method, path, json={"url": receiver.url} if method == "POST" else None
        )
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] and response.json()["code"] == "unavailable"
    assert (await stack.api.get("/readyz")).status_code == 503
    assert (await stack.api.get("/healthz")).status_code == 200

    own_redis.start()
    assert (await stack.api.get("/readyz")).status_code == 200
    after = await stack.submit("nutrient")
    for run in (before, after):
        await stack.wait_status(run["id"], "succeeded", timeout=60)

    async def both_called_back() -> bool:
        done = {e["data"]["run"]["id"] for e in receiver.events("run.succeeded")}
        return {before["id"], after["id"]} <= done

    await eventually(both_called_back, timeout=30, what="callbacks for runs from before and after the outage")
