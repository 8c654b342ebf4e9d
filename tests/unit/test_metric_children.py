"""The metrics' children resolved once for the poll's path (service/metrics.py ``counter_inc``,
``histogram_observer``) expose exactly what ``inc()`` and ``observe()`` would."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from service.metrics import counter_inc, histogram_observer

AMOUNTS = [0.0, 0.004, 0.005, 0.0051, 0.1, 0.75, 1, 2.5, 10, 59.9, 60, 61, 1e9, -1.0, math.inf, math.nan]


def _pair(kind: str) -> tuple[CollectorRegistry, CollectorRegistry, object, object]:
    one, two = CollectorRegistry(), CollectorRegistry()
    if kind == "counter":
        return one, two, Counter("c", "c", ["v"], registry=one), Counter("c", "c", ["v"], registry=two)
    buckets = (0.005, 0.01, 0.1, 0.75, 1, 2.5, 10, 60)
    return (
        one,
        two,
        Histogram("h", "h", ["v"], buckets=buckets, registry=one),
        Histogram("h", "h", ["v"], buckets=buckets, registry=two),
    )


def _exposed(registry: CollectorRegistry) -> list[bytes]:
    # Everything but the children's creation times, which differ by the microseconds between them.
    return [line for line in generate_latest(registry).splitlines() if b"_created" not in line]


def test_a_histogram_observer_exposes_what_observe_does() -> None:
    one, two, plain, fast = _pair("histogram")
    assert isinstance(plain, Histogram) and isinstance(fast, Histogram)
    observe = histogram_observer(fast.labels("x"))
    for amount in AMOUNTS:
        plain.labels("x").observe(amount)
        observe(amount)
    assert _exposed(one) == _exposed(two)


def test_a_counter_inc_exposes_what_inc_does() -> None:
    one, two, plain, fast = _pair("counter")
    assert isinstance(plain, Counter) and isinstance(fast, Counter)
    inc = counter_inc(fast.labels("x"))
    for _ in range(3):
        plain.labels("x").inc()
        inc()
    assert _exposed(one) == _exposed(two)


def test_a_parent_with_labels_is_refused() -> None:
    registry = CollectorRegistry()
    histogram = Histogram("p", "p", ["v"], registry=registry)
    counter = Counter("q", "q", ["v"], registry=registry)
    with pytest.raises(ValueError):
        histogram_observer(histogram)
    with pytest.raises(ValueError):
        counter_inc(counter)
