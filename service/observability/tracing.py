"""OpenTelemetry traces: off unless the standard ``OTEL_*`` variables ask for them.

A run crosses four systems; its trace is the caller's. The API request span (ASGI middleware) continues
the caller's ``traceparent``, and its context is kept with the run (``traceparent``), so that the
worker's spans, in another process and minutes later, join the same trace:

    POST /v1/runs                    (SERVER, the caller's span as parent)
    ├── vendor.submit                (CLIENT)
    ├── vendor.poll                  (CLIENT; polls 1-3, then 4, 8, 16, ...: see _poll_recorded)
    ├── vendor.fetch_result          (CLIENT, when the vendor's result is a separate call)
    ├── run.finish                   (INTERNAL: the terminal state written, its events emitted)
    └── callback.deliver             (CLIENT, each attempt; its context goes out as ``traceparent``)

When tracing is off every entry point is one read of :data:`ENABLED` and returns a shared no-op context:
nothing is stored with the run, no header is sent, no SDK is imported.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from service.core.domain import AttemptOutcome

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from starlette.middleware import Middleware
    from starlette.routing import BaseRoute
    from starlette.types import Scope

    from service.core.records import Delivery, Run

# Set once at process start by setup() (like the configured loggers): read on every hot-path call, so
# that tracing off costs one branch.
ENABLED = False
_provider: TracerProvider | None = None
_tracer: trace.Tracer = trace.NoOpTracer()
_OFF = contextlib.nullcontext()
_W3C = TraceContextTextMapPropagator()
# The exporters this build ships: OTLP over HTTP (protobuf), and the console for a look by hand.
EXPORTERS = ("otlp", "console")


def wanted(environ: Mapping[str, str]) -> str | None:
    """The exporter the environment asks for, or None: tracing stays off.

    ``OTEL_TRACES_EXPORTER`` names it; unset, an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) means ``otlp``. ``OTEL_SDK_DISABLED=true`` wins over both.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    name = environ.get("OTEL_TRACES_EXPORTER", "otlp" if endpoint else "none").strip().lower()
    if name in ("", "none"):
        return None
    # A list is allowed by the spec; the first one this build knows is used.
    known = [n for n in (p.strip() for p in name.split(",")) if n in EXPORTERS]
    if not known:
        raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: this build exports only {', '.join(EXPORTERS)}")
    return known[0]


# A span attribute's value is cut to this many characters (a 14 KB User-Agent on every request span), unless
# OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT or OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT says otherwise. The counts of
# attributes, events and links keep the SDK's bounds (128 each).
ATTRIBUTE_VALUE_CHARS = 1024


def span_limits(environ: Mapping[str, str], limits: Any) -> Any:
    """The SDK's ``SpanLimits`` with a bounded attribute length by default (``limits`` is the class)."""
    from_env = any(
        environ.get(n)
        for n in ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    )
    return limits() if from_env else limits(max_span_attribute_length=ATTRIBUTE_VALUE_CHARS)


def setup(process: str) -> bool:
    """Turns tracing on for this process when the environment asks for it; returns whether it did.

    Everything else comes from the SDK's own reading of ``OTEL_*``: the endpoint, headers and timeout
    (``OTEL_EXPORTER_OTLP_*``), the sampler (``OTEL_TRACES_SAMPLER``, ``_ARG``; default: follow the
    caller's decision, record roots), the batch (``OTEL_BSP_*``), ``OTEL_RESOURCE_ATTRIBUTES``.
    ``OTEL_SERVICE_NAME`` defaults to ``hookbridge-<process>``.
    """
    global ENABLED, _provider, _tracer
    exporter_name = wanted(os.environ)
    if exporter_name is None:
        return False
    # Imported here: a process with tracing off never loads the SDK or the exporter.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    resource = Resource.create({"hookbridge.process": process})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: f"hookbridge-{process}"}))
    exporter: SpanExporter
    if exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        exporter = ConsoleSpanExporter()
    # Our own provider, not the global one: the global can be set only once per process, and tests set
    # up and shut down several times in one.
    provider = TracerProvider(resource=resource, span_limits=span_limits(os.environ, SpanLimits))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _provider, _tracer, ENABLED = provider, provider.get_tracer("hookbridge"), True
    return True


def shutdown() -> None:
    """Sends what is still buffered and turns tracing off."""
    global ENABLED, _provider, _tracer
    provider, _provider = _provider, None
    ENABLED, _tracer = False, trace.NoOpTracer()
    if provider is not None:
        provider.shutdown()


def flush() -> None:
    if _provider is not None:
        _provider.force_flush()


# The API -------------------------------------------------------------------------------------------


def asgi_middleware(routes: Sequence[BaseRoute]) -> list[Middleware]:
    """The request span (OpenTelemetry's ASGI middleware), outermost; none when tracing is off."""
    if not ENABLED:
        return []
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from starlette.middleware import Middleware
    from starlette.routing import Match

    def span_details(scope: Scope) -> tuple[str, dict[str, Any]]:
        # Named by the route's template (``POST /v1/runs/{run_id}``), never by the path: ids are unbounded.
        template = next((r.path for r in routes if r.matches(scope)[0] == Match.FULL), None)  # type: ignore[attr-defined]
        method = scope.get("method", "HTTP")
        return (f"{method} {template}" if template else method), {}

    return [
        Middleware(
            OpenTelemetryMiddleware,
            default_span_details=span_details,
            tracer_provider=_provider,
            # Probes and scrapes every few seconds would each be a trace of one span.
            excluded_urls="/healthz$,/readyz$,/metrics$",
            exclude_spans=["receive", "send"],
        )
    ]


def current_traceparent() -> str | None:
    """The current span's context as a W3C ``traceparent``, to keep with a run; None when off."""
    if not ENABLED:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent")


# The worker ----------------------------------------------------------------------------------------


def _poll_recorded(number: int) -> bool:
    """Polls 1-3, then the powers of two: a run polled N times puts at most 3 + log2(N) poll spans in
    its trace. A long run is polled hundreds of times; as children they would bury the submit and the
    delivery, and as separate linked traces they would flood the backend with one-span traces."""
    return number <= 3 or number & (number - 1) == 0


def vendor_call(operation: str, run: Run) -> contextlib.AbstractContextManager[object]:
    """A span around one call to the vendor's adapter (``submit``, ``poll``, ``fetch_result``), in the
    run's trace. An exception that leaves it marks the span as an error."""
    if not ENABLED:
        return _OFF
    attributes: dict[str, Any] = {"hookbridge.vendor": run.vendor}
    if operation == "poll":
        number = run.polls + 1
        if not _poll_recorded(number):
            return _OFF
        attributes["hookbridge.poll"] = number
    return _run_span(f"vendor.{operation}", run, SpanKind.CLIENT, attributes)


def run_finish(run: Run) -> contextlib.AbstractContextManager[object]:
    """A span around writing a run's end: the trace says how it ended and after how many polls."""
    if not ENABLED:
        return _OFF
    error = run.error if isinstance(run.error, dict) else {}
    return _run_span(
        "run.finish",
        run,
        SpanKind.INTERNAL,
        {
            "hookbridge.vendor": run.vendor,
            "hookbridge.run.status": run.status,
            "hookbridge.run.polls": run.polls,
            "hookbridge.run.error": error.get("code"),
        },
    )


def _run_span(
    name: str, run: Run, kind: SpanKind, attributes: dict[str, Any]
) -> contextlib.AbstractContextManager[object]:
    # Inside one of our spans: its child. Otherwise (a new step in the worker) a child of the request
    # that created the run; a run without a kept context starts a trace of its own.
    current = trace.get_current_span().get_span_context()
    parent = None if current.is_valid else _parent(run.traceparent)
    attributes["hookbridge.run_id"] = run.id
    attributes = {k: v for k, v in attributes.items() if v is not None}
    return _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes)


def _parent(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    return _W3C.extract({"traceparent": traceparent})


class RunReader(Protocol):
    """What a delivery's span needs of the store (its runs fit it): tracing imports no store."""

    async def get_run(self, run_id: str) -> Run | None: ...


@contextlib.asynccontextmanager
async def _delivery(store: RunReader, dlv: Delivery) -> Any:
    run_id = dlv.run_id
    # One read of the run per attempt, only with tracing on: the delivery record does not carry the trace.
    try:
        run = await store.get_run(run_id) if run_id else None
    except Exception:  # tracing never holds a callback back: without the run, the attempt starts a trace
        run = None
    with _tracer.start_as_current_span(
        "callback.deliver",
        context=_parent(run.traceparent if run is not None else None),
        kind=SpanKind.CLIENT,
        attributes={
            "hookbridge.delivery_id": dlv.id,
            "hookbridge.subscription_id": dlv.subscription_id,
            "hookbridge.event_id": dlv.event_id,
            "hookbridge.run_id": run_id or "",
            "hookbridge.delivery.attempt": dlv.attempts + 1,
        },
    ) as span:
        yield span


def delivery_attempt(store: RunReader, dlv: Delivery) -> contextlib.AbstractAsyncContextManager[object]:
    """A span around one delivery attempt, in the trace of the run whose event it carries."""
    if not ENABLED:
        return _OFF
    return _delivery(store, dlv)


def inject(headers: MutableMapping[str, str]) -> None:
    """Adds the current span's ``traceparent`` (and ``tracestate``) to an outgoing request's headers."""
    if ENABLED:
        _W3C.inject(headers)


def outcome(outcome: str, status_code: int | None) -> None:
    """Records a delivery attempt's outcome on its span: anything but success is an error."""
    if not ENABLED:
        return
    span = trace.get_current_span()
    span.set_attribute("hookbridge.delivery.outcome", outcome)
    if status_code is not None:
        span.set_attribute("http.response.status_code", status_code)
    if outcome != AttemptOutcome.SUCCEEDED:
        span.set_status(Status(StatusCode.ERROR, outcome))


# Logs ----------------------------------------------------------------------------------------------


def current_ids() -> tuple[str, str] | None:
    """The current span's trace id and span id in hex (as backends show them), or None outside one."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


@contextlib.contextmanager
def span(name: str) -> Iterator[object]:
    """A plain internal span, for code and tests that want one of their own."""
    if not ENABLED:
        yield None
        return
    with _tracer.start_as_current_span(name) as s:
        yield s
