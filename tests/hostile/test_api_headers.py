"""What every answer of the API carries (issue 23, row 13) and what its spans may hold (row 12): no server
banner, ``nosniff`` everywhere, ``no-store`` on tenant data and secrets, uvicorn's own 400 as a problem,
span attributes cut to a bound."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from service.observability import metrics, tracing
from tests.conftest import ALICE
from tests.hostile.test_feed_bounds import _port, guarded_api


async def test_every_answer_has_the_security_headers_and_no_banner(redis_url: str) -> None:
    async with guarded_api(redis_url, HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS="127.0.0.0/8") as url:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}) as api:
            sub = (await api.post("/v1/subscriptions", json={"url": "http://127.0.0.1:9/h"})).json()
            answers = [
                await api.get(f"/v1/subscriptions/{sub['id']}/secret"),
                await api.get("/v1/runs"),
                await api.get("/v1/nothing"),
                await api.get("/v1/runs", headers={"Authorization": "Bearer nope"}),
                await api.get("/healthz"),
            ]
            for response in answers:
                assert "server" not in response.headers, response.headers
                assert response.headers["x-content-type-options"] == "nosniff"
            for response in answers[:4]:
                assert response.headers["cache-control"] == "no-store", response.url


async def test_made_up_methods_add_no_metric_series(redis_url: str) -> None:
    """A client choosing its methods cannot grow the request counter's or histogram's label sets: any
    method outside the standard ones counts as ``other`` (httptools knows some thirty methods, WebDAV's
    among them; h11, uvicorn's other parser, takes any token)."""
    async with guarded_api(redis_url) as url:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}) as api:
            for method in ("PROPFIND", "MKCOL", "PURGE", "LOCK", "SEARCH", "REPORT"):
                for path in ("/v1/runs", "/nowhere"):
                    assert (await api.request(method, path)).status_code in (404, 405)
    methods = {
        sample.labels["method"]
        for family in metrics.REGISTRY.collect()
        if family.name in ("hookbridge_api_requests", "hookbridge_api_request_duration_seconds")
        for sample in family.samples
    }
    assert "other" in methods and methods <= metrics.HTTP_METHODS | {"other"}, methods


async def test_uvicorns_own_400_is_a_problem(redis_url: str) -> None:
    async with guarded_api(redis_url) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        writer.write(b"GET /v1/runs HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n")
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), raw
    assert b"content-type: application/problem+json" in head.lower() and b"server:" not in head.lower()
    problem = json.loads(body)
    assert problem["status"] == 400 and problem["code"] == "invalid_request"


def test_span_attribute_values_are_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=tracing.span_limits({}, SpanLimits))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("request") as span:
        span.set_attribute("user_agent.original", "x" * 14_000)
    (finished,) = exporter.get_finished_spans()
    assert len(str(finished.attributes["user_agent.original"])) == tracing.ATTRIBUTE_VALUE_CHARS
    # The operator's own limit, when set, wins.
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64")
    limits = tracing.span_limits(os.environ, SpanLimits)
    assert limits.max_span_attribute_length == 64
