"""Example events (``POST /v1/subscriptions/{id}/test`` with ``event_type``): each built by the same
lifecycle functions that build the real one, from a fake run taken through the same steps, so that an
example is shaped as the real event is (the same members, the same run view), with ``"example": true``
added to its ``data``."""

from __future__ import annotations

import json
from typing import Any

from service.config.settings import Settings
from service.core import domain, lifecycle
from service.core.records import Event, Run, Transition

# The event types an example can be asked for: every concrete type (``run.*`` is a filter, not a type).
EXAMPLE_TYPES = domain.EVENT_TYPES
EXAMPLE_RESULT = {"example": "The vendor's result, as it gave it, goes here."}


def _fake_run(client: str, settings: Settings, now_ms: int) -> Run:
    vendor, plugin = next(iter(settings.vendors.items()), ("nutrient", None))
    operation = plugin.operations[0] if plugin is not None else "extract"
    return lifecycle.new_run(
        run_id=domain.new_id("run"),
        client=client,
        vendor=vendor,
        operation=operation,
        document=None,
        options={},
        metadata={"example": "true"},
        subscription_ids=[],
        zero_retention=False,
        now_ms=now_ms - 4000,
        traceparent=None,
    )


def _steps(run: Run, event_type: str, settings: Settings, now_ms: int) -> Transition:
    """The transition that emits ``event_type``, from ``run`` taken through the steps before it."""
    submitted = lifecycle.submitted(
        run,
        now_ms - 3000,
        vendor_run_id="example-vendor-run",
        vendor_status="queued",
        state={},
        due_ms=now_ms,
    )
    if event_type == domain.EVENT_SUBMITTED:
        return submitted
    if event_type == domain.EVENT_CANCELED:
        return lifecycle.canceled(submitted.run, now_ms, settings=settings, vendor_can_cancel=False)
    polled = lifecycle.polled(
        submitted.run,
        now_ms if event_type == domain.EVENT_PROGRESS else now_ms - 2000,
        running=True,
        vendor_status="processing",
        progress={"percent": 40, "phase": "extracting", "message": "Page 2 of 5"},
        delay_s=1.0,
        due_ms=now_ms,
        settings=settings,
    )
    if event_type == domain.EVENT_PROGRESS:
        return polled
    if event_type == domain.EVENT_FAILED:
        return lifecycle.failed(
            polled.run,
            now_ms,
            code=domain.VENDOR_FAILED,
            message="An example failure: the vendor could not read the document.",
            settings=settings,
            vendor_status="failed",
        )
    return lifecycle.finished(
        polled.run,
        now_ms,
        status=domain.SUCCEEDED,
        settings=settings,
        vendor_status="completed",
        result=EXAMPLE_RESULT,
    )


def example_event(event_type: str, client: str, settings: Settings, now_ms: int) -> Event:
    """An example of the run event ``event_type`` (one of ``domain.RUN_EVENTS``), with a fresh event id."""
    run = _fake_run(client, settings, now_ms)
    events = _steps(run, event_type, settings, now_ms).events
    real = next(e for e in events if e.type == event_type)
    body: dict[str, Any] = json.loads(real.body)
    body["data"]["example"] = True
    return Event(
        id=domain.new_id("evt"),
        type=event_type,
        created=now_ms,
        body=json.dumps(body, separators=(",", ":")),
        vendor=real.vendor,
    )
