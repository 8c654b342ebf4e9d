"""/metrics after a run: every metric the operators rely on is there with a sensible value."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.observability.metrics import REGISTRY
from tests.conftest import Receiver, StackFactory, eventually


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    matching = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert matching, f"{name} {labels} not exported"
    return sum(matching)


def _now(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_metrics_after_a_run(make_stack: StackFactory, receiver: Receiver) -> None:
    # The registry is the process's: averages are taken over this test's own observations (tests on a
    # moved clock observe hours of lateness, by design).
    before = {
        name: _now(name, **labels)
        for name, labels in (
            ("hookbridge_poll_lateness_seconds_sum", {"vendor": "nutrient"}),
            ("hookbridge_poll_lateness_seconds_count", {"vendor": "nutrient"}),
            ("hookbridge_delivery_latency_seconds_sum", {}),
            ("hookbridge_delivery_latency_seconds_count", {}),
        )
    }
    stack = await make_stack()
    await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient")
    await stack.wait_status(run["id"], "succeeded")
    await eventually(lambda: _value(receiver.events("run.succeeded")), what="callback")

    assert stack.worker is not None
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=stack.worker.health_app()), base_url="http://worker"
    ) as worker:
        health = await worker.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"

        async def scraped() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
            # The registry outlives tests, so wait for this test's own delivery observation: the
            # receiver has the callback a moment before the worker records the attempt.
            found = samples((await worker.get("/metrics")).text)
            latency = [v for (n, _), v in found.items() if n == "hookbridge_delivery_latency_seconds_count"]
            return found if sum(latency) > before["hookbridge_delivery_latency_seconds_count"] else None

        found = await eventually(scraped, what="delivery metrics")

    assert value(found, "hookbridge_runs_total", vendor="nutrient", status="succeeded") >= 1
    assert value(found, "hookbridge_vendor_requests_total", vendor="nutrient", kind="submit", code="202") >= 1
    assert value(found, "hookbridge_vendor_requests_total", vendor="nutrient", kind="poll", code="200") >= 1
    assert value(found, "hookbridge_vendor_requests_total", vendor="nutrient", kind="fetch", code="200") >= 1
    lateness_count = (
        value(found, "hookbridge_poll_lateness_seconds_count", vendor="nutrient")
        - before["hookbridge_poll_lateness_seconds_count"]
    )
    assert lateness_count >= 1
    lateness = (
        value(found, "hookbridge_poll_lateness_seconds_sum", vendor="nutrient")
        - before["hookbridge_poll_lateness_seconds_sum"]
    )
    assert 0 <= lateness / lateness_count < 1.0
    assert value(found, "hookbridge_delivery_attempts_total", outcome="succeeded") >= 1
    latency_count = (
        value(found, "hookbridge_delivery_latency_seconds_count")
        - before["hookbridge_delivery_latency_seconds_count"]
    )
    assert latency_count >= 1
    latency = (
        value(found, "hookbridge_delivery_latency_seconds_sum")
        - before["hookbridge_delivery_latency_seconds_sum"]
    )
    assert 0 <= latency / latency_count < 5.0
    assert value(found, "hookbridge_ready_jobs", queue="nutrient") >= 0
    assert value(found, "hookbridge_ready_jobs", queue="deliveries") >= 0
    assert value(found, "hookbridge_runs_in_flight") >= 0
    assert value(found, "hookbridge_outbox_stranded") == 0  # every relay went through

    api_metrics = samples((await stack.api.get("/metrics")).text)
    assert (
        value(api_metrics, "hookbridge_api_requests_total", method="POST", route="/v1/runs", status="202")
        >= 1
    )


async def _value(value: object) -> object:
    return value
