"""The OpenAPI 3.1 document of the HTTP API (CONTRACT §4) and of the callbacks it sends (§5).

The schemas come from the declared models with the running settings (:func:`service.api.models.build`);
the error responses from the problem classes (:mod:`service.api.problems`). What is written here by
hand is only what no model says: the paths and their operations (:data:`OPERATIONS`, a table: a new route
adds a row, or ``OPERATIONS.append(Op(...))`` from its own module; its response models, subclasses of
``models.Out``, join the schemas by themselves), descriptions, examples and links.
``tests/integration/test_openapi.py`` runs schemathesis against the live API to keep every answer inside
this document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, TypeAdapter

from service import __version__
from service.api import models
from service.api.models import REF, DeliveryPage, Models, Page
from service.api.problems import codes_by_status
from service.core import domain, shapes

Schema = dict[str, Any]
JSON, PROBLEM = "application/json", "application/problem+json"
EVERY_ERROR = (401, 431, 503)  # what any authenticated operation can answer
BODY_ERRORS = (400, 413, 415, 422)


@dataclass(frozen=True)
class Op:
    """One operation: ``ok`` is the success status and its component (``-`` for none); ``errors`` the
    problem statuses beyond those of every operation; ``extra`` what the table cannot say."""

    method: str
    path: str
    id: str
    ok: str
    component: str
    errors: tuple[int, ...]
    summary: str
    extra: Schema = field(default_factory=dict)


# The hand-written part, one row per operation: method, path, operationId, success status and component,
# problem statuses (b: 400, 413, 415, 422, the body's), summary. The tag is the path's resource.
_TABLE = """
get     /healthz                                  healthz                   200  Health                  -              Liveness
get     /readyz                                   readyz                    200  Health                  -              Readiness: Redis is reachable
get     /metrics                                  metrics                   200  -                       -              Prometheus metrics (text format)
get     /openapi.json                             openapi                   200  -                       -              This document
post    /v1/runs                                  createRun                 202  Run                     b,409,410,429  Submit a document to a vendor
get     /v1/runs                                  listRuns                  200  RunList                 422            List runs, newest first
get     /v1/runs/{run_id}                         getRun                    200  RunDetail               404            Get a run, with its vendor trail
post    /v1/runs/{run_id}/cancel                  cancelRun                 200  Run                     404,409        Cancel a run
get     /v1/runs/{run_id}/result                  getRunResult              200  -                       404,409,410    Get the vendor's result of a succeeded run
get     /v1/runs/{run_id}/events                  listRunEvents             200  EventList               404            List the events emitted for a run, oldest first
get     /v1/runs/{run_id}/deliveries              listRunDeliveries         200  DeliveryList            404,422        List the run's deliveries to every subscription, newest first
get     /v1/runs/{run_id}/stream                  streamRun                 200  -                       404,422,429    Server-sent events: the run's events from the first, closed after its end
get     /v1/events                                listEvents                200  FeedPage                410,422,429    The client's event feed, in order; wait= holds the request until an event
get     /v1/events/stream                         streamEvents              200  -                       410,422,429    Server-sent events: the client's events as they happen
post    /v1/subscriptions                         createSubscription        201  SubscriptionWithSecret  b,409          Register a callback URL; the answer holds its signing secret
get     /v1/subscriptions                         listSubscriptions         200  SubscriptionList        422            List subscriptions, newest first
get     /v1/subscriptions/{sub_id}                getSubscription           200  Subscription            404            Get a subscription
patch   /v1/subscriptions/{sub_id}                updateSubscription        200  Subscription            404,b          Change a subscription; members left out stay
delete  /v1/subscriptions/{sub_id}                deleteSubscription        204  -                       404            Delete a subscription
get     /v1/subscriptions/{sub_id}/secret         getSubscriptionSecret     200  Secret                  404            Get the current signing secret
post    /v1/subscriptions/{sub_id}/rotate-secret  rotateSubscriptionSecret  200  SubscriptionWithSecret  404            Rotate the signing secret; the old one keeps signing for 24 h
post    /v1/subscriptions/{sub_id}/test           testSubscription          202  TestEventAccepted       404,b,409,429  Send a `subscription.test` event, or an example of any event type, now
get     /v1/subscriptions/{sub_id}/deliveries     listDeliveries            200  DeliveryList            404,422        The subscription's delivery log, newest first
post    /v1/subscriptions/{sub_id}/recover        recoverDeliveries         202  RecoverAccepted         404,b,429      Send again every failed delivery since a time
get     /v1/deliveries/{delivery_id}              getDelivery               200  DeliveryWithAttempts    404            Get a delivery with its attempts
post    /v1/deliveries/{delivery_id}/retry        retryDelivery             202  Delivery                404,409,429    Send a delivery again now, pending ones too; its retry schedule restarts
"""  # noqa: E501


def _errors(text: str) -> tuple[int, ...]:
    return tuple(
        int(c) for part in text.split(",") for c in (BODY_ERRORS if part == "b" else [part]) if c != "-"
    )


def _links(param: str, pointer: str, *op_ids: str) -> Schema:
    return {op[0].upper() + op[1:]: {"operationId": op, "parameters": {param: pointer}} for op in op_ids}


RUN_EXAMPLES: list[Any] = [
    {
        "vendor": "nutrient",
        "operation": "extract",
        "document": {"url": "https://example.com/invoice.pdf"},
        "options": {"instructions": {"mode": "agentic"}},
        "metadata": {"order_id": "A-1001"},
    },
    {"vendor": "cloudsquid", "document": {"content_base64": "JVBERi0xLjQK", "filename": "invoice.pdf"}},
    {
        "vendor": "uptiq",
        "document": {"url": "https://example.com/statement.pdf"},
        "options": {"documentType": "BankStatement"},
        "zero_retention": True,
    },
    {
        "vendor": "azure_di",
        "operation": "analyze",
        "document": {"url": "https://example.com/invoice.pdf"},
        "options": {"model_id": "prebuilt-invoice", "pages": "1-2", "output_content_format": "markdown"},
    },
]
# A stream's answer, described per event (OpenAPI 3.1: the media type's schema is one event): `id: <feed
# id>`, `event: <type>`, `data: <the FeedEvent as JSON>`; one schema for each event type. Comment lines
# (`: connected`, `: keep-alive`) are not events.
_SSE_EVENT = {
    "oneOf": [
        {
            "type": "object",
            "title": event_type,
            "required": ["id", "event", "data"],
            "properties": {
                "id": {
                    "type": "string",
                    "pattern": "^[0-9]{1,20}-[0-9]{1,20}$",
                    "description": "Last-Event-ID",
                },
                "event": {"const": event_type},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"$ref": "#/components/schemas/FeedEvent"},
                },
            },
        }
        for event_type in domain.EVENT_TYPES
    ],
    "description": "One server-sent event; `data` is the FeedEvent (the callback's body with its `id`).",
}
_SSE = {"text/event-stream": {"schema": _SSE_EVENT}}
_LAST_EVENT_ID = {
    "name": "Last-Event-ID",
    "in": "header",
    "description": "Resume after this event: nothing lost, nothing repeated.",
    "schema": {"type": "string", "maxLength": 64},
}
_SUB = ("getSubscription", "updateSubscription", "deleteSubscription", "getSubscriptionSecret")
_EXTRA: dict[str, Schema] = {
    "readyz": {"503": ("Redis is unreachable.", "Health", {"Retry-After": "RetryAfter"})},
    "metrics": {"content": {"text/plain": {"schema": {"type": "string"}}}},
    "openapi": {"content": {JSON: {"schema": {"type": "object"}}}},
    "createRun": {
        "headers": {"Location": "Location", "Idempotency-Replayed": "IdempotencyReplayed"},
        "links": _links(
            "run_id", "$response.body#/id", "getRun", "cancelRun", "getRunResult", "listRunEvents"
        ),
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "description": "Scoped to the client and kept 24 h: the same key and request replay the run.",
                "schema": {"type": "string", "pattern": r"^[\x20-\x7e]{1,255}$", "maxLength": 255},
            }
        ],
    },
    "listRuns": {
        "query": "run_page",
        "description": "Filters combine, and every page is filtered as the first. Besides the parameters "
        "below, `metadata.KEY=VALUE` (repeatable) keeps the runs whose metadata has `KEY` equal to `VALUE` "
        "(exact, case-sensitive; every pair given must match), for example `metadata.order_id=A-1001`. A "
        "page may hold fewer runs than `limit` with a `next_cursor`: each request reads a bounded part of "
        "the index.",
    },
    "listRunDeliveries": {
        "query": Page,
        "links": _links("delivery_id", "$response.body#/data/0/id", "getDelivery", "retryDelivery"),
    },
    "testSubscription": {
        "body": (
            "TestEventRequest",
            {"event_type": "run.failed"},
            False,
        ),
    },
    "retryDelivery": {
        "description": "Any delivery, failed, delivered or pending (the resend replaces its scheduled "
        "attempt), unless an attempt is being sent at that moment (409 `delivery_in_flight`). If the "
        "resend fails, the retry schedule starts again from its first step.",
    },
    "getRunResult": {
        "content": {
            JSON: {"schema": {"type": "object"}},
            "application/zip": {"schema": {"type": "string", "format": "binary"}},
        }
    },
    "createSubscription": {
        "body": ("SubscriptionCreate", {"url": "http://10.0.0.5:8080/hooks", "event_types": ["run.*"]}),
        "headers": {"Location": "Location"},
        "links": _links("sub_id", "$response.body#/id", *_SUB, "testSubscription", "listDeliveries"),
    },
    "listSubscriptions": {"query": Page},
    "updateSubscription": {"body": ("SubscriptionUpdate", {"disabled": False})},
    "listDeliveries": {
        "query": DeliveryPage,
        "links": _links("delivery_id", "$response.body#/data/0/id", "getDelivery", "retryDelivery"),
    },
    "recoverDeliveries": {"body": ("Recover", {"since": "2026-01-01T00:00:00Z"})},
    "listEvents": {"query": models.EventQuery},
    "streamEvents": {"query": models.StreamQuery, "content": _SSE, "parameters": [_LAST_EVENT_ID]},
    "streamRun": {"query": models.RunStreamQuery, "content": _SSE, "parameters": [_LAST_EVENT_ID]},
}
OPERATIONS: list[Op] = [
    Op(row[0], row[1], row[2], row[3], row[4], _errors(row[5]), " ".join(row[6:]), _EXTRA.get(row[2], {}))
    for row in (line.split() for line in _TABLE.strip().splitlines())
]


_PATH_IDS = {"run_id": ("run", "run"), "sub_id": ("sub", "subscription"), "delivery_id": ("dlv", "delivery")}


def _query_params(model: type[BaseModel]) -> list[Schema]:
    schema = models.json_schema(TypeAdapter(model))
    return [
        {"name": name, "in": "query", "description": prop.pop("description", ""), "schema": prop}
        for name, prop in schema["properties"].items()
    ]


def _response(description: str, component: str, headers: dict[str, str] | None = None) -> Schema:
    out: Schema = {"description": description}
    if component != "-":
        out["content"] = {JSON: {"schema": {"$ref": REF + component}}}
    if headers:
        out["headers"] = {name: {"$ref": "#/components/headers/" + ref} for name, ref in headers.items()}
    return out


def _operation(op: Op, m: Models) -> Schema:
    extra, secured = op.extra, op.path.startswith("/v1/")
    out: Schema = {"operationId": op.id, "tags": [_tag(op.path)], "summary": op.summary}
    query = extra.get("query")
    params = (
        [*extra.get("parameters", []), *_query_params(getattr(m, query) if isinstance(query, str) else query)]
        if query
        else extra.get("parameters")
    )
    if params:
        out["parameters"] = params
    if "description" in extra:
        out["description"] = extra["description"]
    if "body" in extra:
        name, example, *optional = extra["body"]
        content = {JSON: {"schema": {"$ref": REF + name}, "examples": _examples([example])}}
        out["requestBody"] = {"required": not optional or optional[0], "content": content}
    elif op.id == "createRun":
        out["requestBody"] = _submit_body(m)
    ok = _response(op.summary, op.component, {**extra.get("headers", {}), "X-Request-Id": "RequestId"})
    ok.update({key: extra[key] for key in ("content", "links") if key in extra})
    errors = sorted({*op.errors, *(EVERY_ERROR if secured else (431,))})
    out["responses"] = {op.ok: ok, **{str(s): {"$ref": f"#/components/responses/Problem{s}"} for s in errors}}
    if "503" in extra:
        out["responses"]["503"] = _response(*extra["503"])
    if not secured:
        out["security"] = []
    return out


def _tag(path: str) -> str:
    if not path.startswith("/v1/"):
        return "operations"
    return "deliveries" if "deliver" in path or path.endswith("/recover") else path.split("/")[2]


def _examples(values: list[Any]) -> Schema:
    return {f"example{i}": {"value": value} for i, value in enumerate(values, 1)}


def _submit_body(m: Models) -> Schema:
    # The examples of the installed vendors only: one of a vendor not installed would not validate.
    examples = [e for e in RUN_EXAMPLES if e["vendor"] in m.runs]
    multipart = {
        "type": "object",
        "properties": {
            "file": {"type": "string", "format": "binary", "description": "The document."},
            "request": {"$ref": REF + "RunRequestPart"},
        },
        "required": ["file", "request"],
        "additionalProperties": False,
    }
    return {
        "required": True,
        "description": "JSON, or multipart/form-data with a `file` part and a `request` part holding the "
        "same JSON without `document`.",
        "content": {
            JSON: {"schema": {"$ref": REF + "RunRequest"}, "examples": _examples(examples)},
            "multipart/form-data": {"schema": multipart, "encoding": {"request": {"contentType": JSON}}},
        },
    }


def paths(m: Models) -> Schema:
    out: Schema = {}
    for op in OPERATIONS:
        item = out.setdefault(op.path, {})
        names = re.findall(r"{(\w+)}", op.path)
        if names:
            item["parameters"] = [_path_param(name) for name in names]
        item[op.method] = _operation(op, m)
    return out


def _path_param(name: str) -> Schema:
    prefix, what = _PATH_IDS[name]
    schema = {"type": "string", "pattern": f"^{prefix}_[0-9A-Za-z]+$", "maxLength": 64}
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": f"The {what}'s id.",
        "schema": schema,
    }


def _problem_responses() -> Schema:
    out = {}
    for status, codes in codes_by_status().items():
        response: Schema = {
            "description": f"{HTTPStatus(status).phrase} (`code`: {', '.join(codes)})",
            "content": {PROBLEM: {"schema": {"$ref": REF + "Problem"}}},
        }
        headers = {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}}
        if status == 401:
            headers["WWW-Authenticate"] = {"$ref": "#/components/headers/WWWAuthenticate"}
        if status in (429, 503):
            headers["Retry-After"] = {"$ref": "#/components/headers/RetryAfter"}
        response["headers"] = headers
        out[f"Problem{status}"] = response
    return out


def _header(description: str, pattern: str, required: bool = True) -> Schema:
    return {
        "description": description,
        "required": required,
        "schema": {"type": "string", "pattern": pattern},
    }


_HEADERS = {
    "Location": _header("Where the resource lives.", "^/v1/"),
    "IdempotencyReplayed": _header("`true` when an earlier run is replayed.", "^true$", required=False),
    "RetryAfter": _header("Seconds to wait before trying again.", "^[0-9]+$"),
    "WWWAuthenticate": _header("The scheme to authenticate with.", "^Bearer "),
    "RequestId": _header(
        "The request's id: the caller's `X-Request-Id` when it is 1 to 128 of `[A-Za-z0-9._-]`, else a new "
        "one. Problem bodies carry it as `request_id`, and the API's log lines as `request_id`.",
        "^[A-Za-z0-9._-]{1,128}$",
    ),
}
_WEBHOOK_HEADERS = [
    ("webhook-id", "The event id; the same on every retry. Deduplicate on it.", "^evt_[0-9A-Za-z]+$"),
    ("webhook-timestamp", "Unix seconds of this attempt.", "^[0-9]+$"),
    (
        "webhook-signature",
        'Space-separated `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, several during a rotation.',
        r"^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$",
    ),
    ("user-agent", "`hookbridge/<version>`.", "^hookbridge/"),
]


def webhooks() -> Schema:
    headers = [
        {
            "name": n,
            "in": "header",
            "required": True,
            "description": d,
            "schema": {"type": "string", "pattern": p},
        }
        for n, d, p in _WEBHOOK_HEADERS
    ]
    return {
        event_type: {
            "post": {
                "operationId": f"webhook_{event_type.replace('.', '_')}",
                "tags": ["callbacks"],
                "summary": (model.__doc__ or "").strip(),
                "description": "Signed by the Standard Webhooks scheme. Answer 2xx within the callback "
                "timeout; anything else is retried on the retry schedule (Retry-After on 429 and 503 is "
                "honoured); 410 disables the subscription.",
                "parameters": headers,
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": {"$ref": REF + model.__name__}}},
                },
                "responses": {
                    "2XX": {"description": "Received."},
                    "410": {"description": "Gone: the subscription is disabled."},
                    "default": {"description": "Any other answer is retried."},
                },
                "security": [],
            }
        }
        for event_type, model in shapes.CALLBACKS.items()
    }


def document(m: Models) -> Schema:
    """The whole document, for the models of the running settings."""
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "hookbridge",
            "version": __version__,
            "summary": "Turns polling-only document-extraction vendor APIs into signed webhook callbacks.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "tags": [
            {"name": "runs", "description": "Document-extraction runs."},
            {"name": "subscriptions", "description": "Callback URLs and their signing secrets."},
            {"name": "deliveries", "description": "What happened to each callback."},
            {"name": "operations", "description": "Health, readiness, metrics, this document."},
            {"name": "callbacks", "description": "What hookbridge POSTs to subscribed URLs."},
        ],
        "security": [{"bearerAuth": []}],
        "paths": paths(m),
        "webhooks": webhooks(),
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A key of HOOKBRIDGE_API_KEYS.",
                }
            },
            "schemas": m.schemas,
            "responses": _problem_responses(),
            "headers": _HEADERS,
        },
    }


assert set(domain.EVENT_TYPES) == set(shapes.CALLBACKS)
