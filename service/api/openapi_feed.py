"""The OpenAPI part of the event feed (``GET /v1/events``, the SSE streams) and of the run's vendor trail,
kept apart from openapi.py and merged into its document."""

from __future__ import annotations

from typing import Any

from service import domain, trail
from service.api.openapi import (
    Schema,
    Vendors,
    enum,
    errors,
    nullable,
    obj,
    ok,
    operation,
    path_param,
    prefixed_id,
    query_param,
    ref,
    string,
    timestamp,
)

_POSITION = string("A feed position (a Redis Stream entry id), opaque.", pattern=r"^\d{1,20}-\d{1,20}$")
_SSE = "text/event-stream"


def _filters(vendors: Vendors) -> list[Schema]:
    return [
        query_param(
            "type",
            enum((*domain.EVENT_TYPES, "run.*")),
            "Only events of this type (`run.*`: every run event); repeat it, or separate types by commas.",
        ),
        query_param("run_id", string(pattern=r"^run_[0-9A-Za-z]+$", maxLength=64), "Only this run's."),
        query_param("vendor", enum(tuple(name for name, _ in vendors)), "Only runs at this vendor."),
    ]


def _stream_response(description: str) -> Schema:
    return {
        "description": description
        + " Each event: `id: <feed id>`, `event: <type>`, `data: <FeedEvent JSON>`; a `: keep-alive` "
        "comment after every HOOKBRIDGE_SSE_HEARTBEAT_S without events.",
        "content": {_SSE: {"schema": {"type": "string"}}},
    }


def _last_event_id() -> list[Schema]:
    return [
        {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "description": "Resume after this event (what EventSource sends when it reconnects).",
            "schema": _POSITION,
        },
        query_param("last_event_id", _POSITION, "`Last-Event-ID`, for clients that cannot set headers."),
    ]


def paths(vendors: Vendors) -> dict[str, Any]:
    limit = {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}
    return {
        "/v1/events": {
            "get": operation(
                "listFeedEvents",
                "events",
                "Read the client's event feed",
                {"200": ok("A page of events.", ref("FeedPage")), **errors(410, 422, 429)},
                parameters=[
                    query_param("iterator", _POSITION, "The previous page's `iterator`; none: oldest kept."),
                    query_param("limit", limit, "Events per page at most."),
                    query_param(
                        "wait",
                        {"type": "number", "minimum": 0, "maximum": 30, "default": 0},
                        "Long-poll: hold the request up to this many seconds until a matching event arrives.",
                    ),
                    *_filters(vendors),
                ],
            )
        },
        "/v1/events/stream": {
            "get": operation(
                "streamFeedEvents",
                "events",
                "Stream the client's events (server-sent events)",
                {"200": _stream_response("The client's events, then live."), **errors(410, 422, 429)},
                parameters=[*_last_event_id(), *_filters(vendors)],
            )
        },
        "/v1/runs/{run_id}/stream": {
            "parameters": [path_param("run_id", "run", "run")],
            "get": operation(
                "streamRunEvents",
                "events",
                "Stream a run's events (server-sent events)",
                {
                    "200": _stream_response("The run's events; closed after its terminal one."),
                    **errors(404, 410, 422, 429),
                },
                parameters=_last_event_id(),
            ),
        },
    }


def schemas(existing: dict[str, Schema]) -> dict[str, Schema]:
    """``existing`` with the feed's schemas, and the Run's trail members (shown by ``GET /v1/runs/{id}``
    only, so not required)."""
    out = dict(existing)
    out["FeedEvent"] = obj(
        {
            "id": _POSITION,
            "event_id": prefixed_id("evt", "The event's id: the `webhook-id` of its callbacks."),
            "type": enum(domain.EVENT_TYPES),
            "timestamp": timestamp("When the event was emitted."),
            "data": {"description": "What the callback carries (`RunEventData` or `TestEventData`)."},
        },
        description="An event of the feed: the callback's body with its feed position and event id.",
    )
    out["FeedPage"] = obj(
        {
            "data": {"type": "array", "items": ref("FeedEvent")},
            "iterator": string("Pass it back as `iterator` for what comes next.", minLength=1),
            "done": {"type": "boolean", "description": "The feed's end was reached: nothing more right now."},
        },
        description="A page of the event feed.",
    )
    out["TrailEntry"] = obj(
        {
            "at": timestamp("When it happened."),
            "kind": enum(trail.KINDS),
            "vendor_status": nullable(string("The vendor's status word then.")),
            "latency_ms": nullable({"type": "integer", "description": "The vendor call's duration."}),
            "detail": nullable(string("The vendor run id, progress, an error, a Retry-After.")),
        },
        description="One thing that happened at the vendor.",
    )
    run = dict(out["Run"])
    run["properties"] = {
        **run["properties"],
        "trail": {
            "type": "array",
            "items": ref("TrailEntry"),
            "description": f"The first {trail.HEAD} and the last {trail.TAIL} vendor steps.",
        },
        "trail_dropped": {"type": "integer", "minimum": 0, "description": "Steps left out of `trail`."},
        "rate_limited": {"type": "integer", "minimum": 0, "description": "The vendor's 429s for this run."},
    }
    out["Run"] = run
    return out
