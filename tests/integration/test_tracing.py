"""Traces across the bridge, exported over OTLP/HTTP to a collector of our own: the caller's trace holds the
API request, the vendor submit, a poll and the delivery attempt, and the callback continues it.

The collector is a stdlib HTTP server on its own thread (the exporter's thread posts to it while the test's
event loop runs the API and the worker), decoding each request with opentelemetry-proto.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.observability import logs, tracing
from service.simulator import SimulatorConfig
from service.simulator import create_app as create_simulator
from tests.conftest import ALICE, Receiver, StackFactory, base_env, eventually


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    service: str
    attributes: dict[str, Any]


@dataclass
class Collector:
    url: str
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[Collector]:
    spans: list[Span] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = ExportTraceServiceRequest.FromString(body)
            found = []
            for rs in request.resource_spans:
                resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        found.append(
                            Span(
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                s.name,
                                resource.get("service.name", ""),
                                {a.key: _value(a.value) for a in s.attributes},
                            )
                        )
            with lock:
                spans.extend(found)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Collector(f"http://127.0.0.1:{server.server_address[1]}", spans, lock)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def traced(collector: Collector, monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    """Tracing on, as ``hookbridge api`` and ``worker`` turn it on: from the OTEL_* variables alone."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert tracing.setup("test")
    try:
        yield collector
    finally:
        tracing.shutdown()


def _body() -> dict[str, Any]:
    return {
        "vendor": "nutrient",
        "document": {
            "content_base64": base64.b64encode(b"%PDF-1.4 traced").decode(),
            "filename": "invoice.pdf",
            "media_type": "application/pdf",
        },
    }


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


async def test_one_trace_from_the_caller_to_the_callback(
    traced: Collector,
    make_stack: StackFactory,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> None:
    logs.configure("json", "INFO")
    stack = await make_stack()
    await stack.subscribe(receiver.url)
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    response = await stack.api.post(
        "/v1/runs", json=_body(), headers={"traceparent": f"00-{trace_id}-{caller_span}-01"}
    )
    assert response.status_code == 202, response.text
    run_id = response.json()["id"]

    async def delivered() -> Any:
        return receiver.events("run.succeeded")

    await eventually(delivered, what="the run.succeeded callback")
    callback = next(r for r in receiver.received if r.json()["type"] == "run.succeeded")
    version, header_trace, header_span, flags = callback.headers["traceparent"].split("-")
    assert (version, header_trace, flags) == ("00", trace_id, "01")

    async def whole_trace() -> list[Span] | None:
        spans = traced.trace(trace_id)
        names = {s.name for s in spans}
        wanted = {"POST /v1/runs", "vendor.submit", "vendor.poll", "run.finish", "callback.deliver"}
        # The span whose context the receiver got ends just after the answer: wait for it too.
        return spans if wanted <= names and header_span in {s.span_id for s in spans} else None

    spans = await eventually(whole_trace, what=f"the trace {trace_id} in the collector")
    by_name = {s.name: s for s in spans}
    request = by_name["POST /v1/runs"]
    assert request.parent_span_id == caller_span  # the caller's span is the request's parent
    assert request.service == "hookbridge-test"
    # The worker's spans hang under the request that created the run, in another task, minutes later.
    for name in ("vendor.submit", "vendor.poll", "run.finish"):
        assert by_name[name].parent_span_id == request.span_id, name
        assert by_name[name].attributes["hookbridge.run_id"] == run_id
    polls = sorted(s.attributes["hookbridge.poll"] for s in spans if s.name == "vendor.poll")
    assert polls[0] == 1
    deliver = next(s for s in spans if s.span_id == header_span)
    assert deliver.name == "callback.deliver"
    assert deliver.parent_span_id == request.span_id
    assert deliver.attributes["hookbridge.delivery.outcome"] == "succeeded"
    assert deliver.attributes["http.response.status_code"] == 204

    # Logs join traces: the attempt's log line names the attempt's span.
    # Probes and scrapes make no traces (this test makes no other GET).
    assert (await stack.api.get("/healthz")).status_code == 200
    assert (await stack.api.get("/metrics")).status_code == 200
    tracing.flush()
    with traced.lock:
        assert not [s for s in traced.spans if s.name.startswith("GET")]

    lines = _json_lines(capsys.readouterr().err)
    attempts = [
        line
        for line in lines
        if line.get("event") == "delivery attempt" and line.get("span_id") == header_span
    ]
    assert attempts and attempts[0]["trace_id"] == trace_id


async def test_the_processes_turn_tracing_on_from_otel_variables_alone(
    collector: Collector, redis_url: str, simulator: str, receiver: Receiver
) -> None:
    # `hookbridge api` and `hookbridge worker` as deployed: separate processes, OTEL_* in their environment.
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKBRIDGE_", "OTEL_"))}
    env |= base_env(redis_url, simulator, HOOKBRIDGE_LOG_FORMAT="json")
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    commands = [["api", "--host", "127.0.0.1", "--port", str(port)], ["worker"]]
    procs = [
        subprocess.Popen([sys.executable, "-m", "service", *c], env=env, stderr=subprocess.DEVNULL)
        for c in commands
    ]
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ALICE}"}
        ) as api:

            async def up() -> bool:
                try:
                    return (await api.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(up, what="the api process")
            subscribed = await api.post("/v1/subscriptions", json={"url": receiver.url})
            assert subscribed.status_code == 201
            trace_id = secrets.token_hex(16)
            response = await api.post(
                "/v1/runs", json=_body(), headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
            )
            assert response.status_code == 202

            async def delivered() -> Any:
                return receiver.events("run.succeeded")

            await eventually(delivered, what="the run.succeeded callback")
        callback = next(r for r in receiver.received if r.json()["type"] == "run.succeeded")
        assert callback.headers["traceparent"].split("-")[1] == trace_id

        async def exported() -> dict[str, set[str]] | None:
            services: dict[str, set[str]] = {}
            for span in collector.trace(trace_id):
                services.setdefault(span.service, set()).add(span.name)
            worker = services.get("hookbridge-worker", set())
            return services if "callback.deliver" in worker and "vendor.poll" in worker else None

        services = await eventually(exported, what="the spans of both processes")
        assert services["hookbridge-api"] == {"POST /v1/runs"}
        assert {"vendor.submit", "vendor.poll", "run.finish", "callback.deliver"} <= services[
            "hookbridge-worker"
        ]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)


async def test_polls_past_the_first_few_are_thinned(
    traced: Collector, make_stack: StackFactory, servers: Servers
) -> None:
    # A run polled dozens of times (a vendor of its own whose runs last a minute, polled every 10 ms):
    # polls 1-3 and the powers of two are in its trace, no others.
    slow = await servers.start(create_simulator(SimulatorConfig(duration_s=(60, 60), seed=1)), free_port())
    stack = await make_stack(
        HOOKBRIDGE_NUTRIENT_BASE_URL=f"{slow}/nutrient",
        HOOKBRIDGE_NUTRIENT_POLL_INITIAL_S="10ms",
        HOOKBRIDGE_NUTRIENT_POLL_MAX_S="10ms",
    )
    trace_id = secrets.token_hex(16)
    response = await stack.api.post(
        "/v1/runs", json=_body(), headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
    )
    run_id = response.json()["id"]

    async def polled() -> Any:
        run = (await stack.api.get(f"/v1/runs/{run_id}")).json()
        return run["polls"] >= 20

    await eventually(polled, what="20 polls")

    async def recorded() -> list[int] | None:
        numbers = sorted(
            s.attributes["hookbridge.poll"] for s in traced.trace(trace_id) if s.name == "vendor.poll"
        )
        return numbers if 16 in numbers else None

    numbers = await eventually(recorded, what="the 16th poll's span")
    assert set(numbers) <= {1, 2, 3, 4, 8, 16, 32, 64}
    assert {1, 2, 3, 4, 8, 16} <= set(numbers)

    # Leave the worker idle (canceled, and the vendor told) rather than stopping it between two polls.
    assert (await stack.api.post(f"/v1/runs/{run_id}/cancel")).status_code == 200
    assert stack.worker is not None
    store = stack.worker.store

    async def idle() -> bool:
        run = await store.runs.get_run(run_id)
        return run is not None and not run.vendor_cancel_pending

    await eventually(idle, what="the vendor told of the cancel")


async def test_a_caller_that_does_not_sample_is_followed(
    traced: Collector, make_stack: StackFactory, receiver: Receiver
) -> None:
    # The default sampler follows the caller: flag 00 records nothing here, and the callback still names
    # the caller's trace (with 00), so the receiver's own decision matches.
    stack = await make_stack()
    await stack.subscribe(receiver.url)
    trace_id = secrets.token_hex(16)
    response = await stack.api.post(
        "/v1/runs", json=_body(), headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-00"}
    )
    assert response.status_code == 202

    async def delivered() -> Any:
        return receiver.events("run.succeeded")

    await eventually(delivered, what="the run.succeeded callback")
    header = next(r for r in receiver.received if r.json()["type"] == "run.succeeded").headers["traceparent"]
    assert header.startswith(f"00-{trace_id}-") and header.endswith("-00")
    tracing.flush()
    assert traced.trace(trace_id) == []


async def test_tracing_off_sends_no_traceparent(make_stack: StackFactory, receiver: Receiver) -> None:
    # Off (no OTEL_* variables): the caller's traceparent is neither kept nor passed on.
    assert not tracing.ENABLED
    stack = await make_stack()
    await stack.subscribe(receiver.url)
    trace_id = secrets.token_hex(16)
    response = await stack.api.post(
        "/v1/runs", json=_body(), headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
    )
    assert response.status_code == 202

    async def delivered() -> Any:
        return receiver.events("run.succeeded")

    await eventually(delivered, what="the run.succeeded callback")
    assert all("traceparent" not in r.headers for r in receiver.received)
    assert stack.worker is not None
    run = await stack.worker.store.runs.get_run(response.json()["id"])
    assert run is not None and run.traceparent is None
