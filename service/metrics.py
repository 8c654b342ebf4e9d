"""Prometheus metrics. One registry per process; the API and the worker each expose theirs."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

RUNS = Counter("hookbridge_runs_total", "Runs that reached a status", ["vendor", "status"], registry=REGISTRY)
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
    "hookbridge_delivery_attempts_total", "Callback attempts by outcome", ["outcome"], registry=REGISTRY
)
DELIVERY_LATENCY = Histogram(
    "hookbridge_delivery_latency_seconds",
    "From the vendor's completion seen to the callback's 2xx",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 600, 3600),
    registry=REGISTRY,
)
READY_JOBS = Gauge("hookbridge_ready_jobs", "Work due now and not yet claimed", ["queue"], registry=REGISTRY)
RUNS_IN_FLIGHT = Gauge("hookbridge_runs_in_flight", "Runs not yet finished", registry=REGISTRY)
API_REQUESTS = Counter(
    "hookbridge_api_requests_total", "API requests", ["method", "route", "status"], registry=REGISTRY
)


def observe_vendor_request(vendor: str, kind: str, code: str, seconds: float) -> None:
    VENDOR_REQUESTS.labels(vendor, kind, code).inc()
    VENDOR_REQUEST_SECONDS.labels(vendor).observe(seconds)


def render() -> bytes:
    return generate_latest(REGISTRY)
