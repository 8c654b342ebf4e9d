"""Prometheus metrics. One registry per process; the API and the worker each expose theirs."""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from service import __version__

REGISTRY = CollectorRegistry(auto_describe=True)

# Clients are labels only when API_KEYS names them (a bounded set); any other id counts as OTHER_CLIENT.
OTHER_CLIENT = "other"
_clients: frozenset[str] = frozenset()


def set_clients(names: Iterable[str]) -> None:
    """The clients that may appear as a label: the ids in API_KEYS (each process calls this at start)."""
    global _clients
    _clients = frozenset(names)


def client_label(client: str | None) -> str:
    return client if client and client in _clients else OTHER_CLIENT


def known_clients() -> frozenset[str]:
    return _clients


RUNS = Counter(
    "hookbridge_runs_total", "Runs that reached a status", ["vendor", "status", "client"], registry=REGISTRY
)


def count_run_end(vendor: str, status: str, client: str) -> None:
    """One run's end in hookbridge_runs_total. Called by whoever applied the change that ended it (the
    worker's batcher, the API's cancel) when the store answers ``Applied(ended=True)``: once per run."""
    RUNS.labels(vendor, status, client_label(client)).inc()


VENDOR_CREDITS = Counter(
    "hookbridge_vendor_credits_total",
    "Credits the vendors report that finished runs cost (Nutrient usage.data_extraction_credits.cost, "
    "Uptiq creditReservation), for charging teams back",
    ["vendor", "client"],
    registry=REGISTRY,
)
VENDOR_REQUESTS = Counter(
    "hookbridge_vendor_requests_total",
    "Requests sent to vendors",
    ["vendor", "kind", "code"],
    registry=REGISTRY,
)
VENDOR_REQUEST_SECONDS = Histogram(
    "hookbridge_vendor_request_seconds", "Vendor request duration", ["vendor"], registry=REGISTRY
)
POLL_LATENESS = Histogram(
    "hookbridge_poll_lateness_seconds",
    "Actual minus planned time of a run's step",
    ["vendor"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60),
    registry=REGISTRY,
)
DELIVERY_ATTEMPTS = Counter(
    "hookbridge_delivery_attempts_total",
    "Callback attempts by outcome, per client",
    ["outcome", "client"],
    registry=REGISTRY,
)
DELIVERIES = Counter(
    "hookbridge_deliveries_total",
    "Deliveries that reached a final outcome (succeeded, failed, gone, skipped), per client",
    ["client", "outcome"],
    registry=REGISTRY,
)
OLDEST_PENDING_DELIVERY = Gauge(
    "hookbridge_oldest_pending_delivery_seconds",
    "Age of the oldest delivery not yet final, per client (0 when none); sampled by the worker's heartbeat "
    "from the next due deliveries, the in-flight and the parked ones (bounded cost, see docs/operations.md)",
    ["client"],
    registry=REGISTRY,
)
SUBSCRIPTIONS_DISABLED = Gauge(
    "hookbridge_subscriptions_disabled",
    "Disabled subscriptions per client; reason=auto when the service disabled it (410, failing too long), "
    "owner when its client did",
    ["client", "reason"],
    registry=REGISTRY,
)
VENDOR_PAUSED = Gauge(
    "hookbridge_vendor_paused",
    "1 while the vendor is paused after a 429 (every worker holds it), else 0",
    ["vendor"],
    registry=REGISTRY,
)
VENDOR_PAUSE_REMAINING = Gauge(
    "hookbridge_vendor_pause_remaining_seconds",
    "Seconds until the vendor's current pause ends and a probe may go (0 when not paused)",
    ["vendor"],
    registry=REGISTRY,
)
VENDOR_PAUSES = Counter(
    "hookbridge_vendor_pauses_total",
    "429s from a vendor that paused it (or extended its pause), as seen by this process",
    ["vendor"],
    registry=REGISTRY,
)
REDIS_UP = Gauge(
    "hookbridge_redis_up",
    "1 when this process's last Redis command (heartbeat or readiness check) succeeded, else 0",
    registry=REGISTRY,
)
DELIVERY_LATENCY = Histogram(
    "hookbridge_delivery_latency_seconds",
    "From the vendor's completion seen to the callback's 2xx",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 600, 3600),
    registry=REGISTRY,
)
READY_JOBS = Gauge("hookbridge_ready_jobs", "Work due now and not yet claimed", ["queue"], registry=REGISTRY)
RUNS_IN_FLIGHT = Gauge("hookbridge_runs_in_flight", "Runs not yet finished", registry=REGISTRY)
OUTBOX_STRANDED = Gauge(
    "hookbridge_outbox_stranded",
    "Runs whose events have waited in their outbox past RELAY_GRACE_MS (their relay failed: the sweeper's)",
    registry=REGISTRY,
)
API_REQUESTS = Counter(
    "hookbridge_api_requests_total", "API requests", ["method", "route", "status"], registry=REGISTRY
)


def observe_vendor_request(vendor: str, kind: str, code: str, seconds: float) -> None:
    requests, duration = _vendor_request_children(vendor, kind, code)
    requests.inc()
    duration.observe(seconds)


@functools.cache
def _vendor_request_children(vendor: str, kind: str, code: str) -> tuple[Counter, Histogram]:
    # Resolved once per (vendor, kind, code), a bounded set: ``labels()`` validates and locks on every
    # call, a measurable part of a poll's cost at a thousand polls per second.
    return VENDOR_REQUESTS.labels(vendor, kind, code), VENDOR_REQUEST_SECONDS.labels(vendor)


def render() -> bytes:
    return generate_latest(REGISTRY)


# Operator metrics (issue 29) ------------------------------------------------------------------------
# The process's own (RSS, CPU, open fds: process_*), the interpreter's (python_info, python_gc_*), and
# what is running (hookbridge_build_info), on the registry the service exposes.
process_collector = ProcessCollector(registry=REGISTRY)
platform_collector = PlatformCollector(registry=REGISTRY)
gc_collector = GCCollector(registry=REGISTRY)

BUILD_INFO = Info(
    "hookbridge_build", "The running build: hookbridge's version and Python's", registry=REGISTRY
)
BUILD_INFO.info({"version": __version__, "python": platform.python_version()})

# Route templates (``/v1/runs/{run_id}``), never raw paths; the status as its class (2xx..5xx): a bounded
# set of label values whatever the traffic.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
API_REQUEST_SECONDS = Histogram(
    "hookbridge_api_request_duration_seconds",
    "API request duration, from the request's arrival to its response's end (streams: until they close)",
    ["route", "method", "status_class"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
CALLBACK_ATTEMPT_SECONDS = Histogram(
    "hookbridge_callback_attempt_duration_seconds",
    "One callback attempt's duration (connect, send, the receiver's answer), by outcome",
    ["outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def status_class(status: int) -> str:
    """200 -> "2xx"; anything outside 100-599 counts as "5xx" (a response that never started)."""
    return f"{status // 100}xx" if 100 <= status <= 599 else "5xx"


def observe_api_request(route: str, method: str, status: int, seconds: float) -> None:
    """Counts the request (``hookbridge_api_requests_total``) and times it, by its route's template."""
    # A method outside the standard ones is "other": the label set stays bounded whatever a client sends.
    count, duration = _api_request_children(route, method if method in HTTP_METHODS else "other", status)
    count.inc()
    duration.observe(seconds)


@functools.cache
def _api_request_children(route: str, method: str, status: int) -> tuple[Counter, Histogram]:
    # Resolved once per (route, method, status): routes are the app's templates, methods the standard
    # ones or "other", statuses the app's own, so the cache is bounded; ``labels()`` validates and locks
    # on every call.
    return (
        API_REQUESTS.labels(method, route, str(status)),
        API_REQUEST_SECONDS.labels(route, method, status_class(status)),
    )


WORKER_ALIVE = Gauge(
    "hookbridge_worker_alive",
    "1 while this worker process's pumps tick (set by its 5 s heartbeat), 0 when they stall; the series "
    "vanishes with the process, which the HookbridgeNoWorkerAlive alert catches with absent()",
    registry=REGISTRY,
)
RUN_TIMEOUTS = Counter(
    "hookbridge_run_timeouts_total",
    "Runs failed with timed_out: no result from the vendor within HOOKBRIDGE_<VENDOR>_MAX_RUN_S",
    ["vendor"],
    registry=REGISTRY,
)
