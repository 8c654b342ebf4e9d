"""The OpenAPI 3.1 document of the HTTP API (CONTRACT §4) and of the callbacks it sends (§5).

The schemas come from the declared models with the running settings (:func:`service.api.models.build`);
the error responses from the problem classes (:mod:`service.api.problems`). What is written here by
hand is only what no model says: the paths and their operations (:data:`OPERATIONS`, a table that new
routes extend), descriptions, examples and links. ``tests/integration/test_openapi.py`` runs schemathesis
against the live API to keep every answer inside this document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, TypeAdapter

from service import __version__, domain
from service.api import models
from service.api.models import REF, DeliveryPage, Models, Page
from service.api.problems import codes_by_status

Schema = dict[str, Any]
JSON, PROBLEM = "application/json", "application/problem+json"
EVERY_ERROR = (401, 431, 503)  # what any authenticated operation can answer
BODY_ERRORS = (400, 413, 415, 422)


@dataclass(frozen=True)
class Op:
    """One operation. ``ok`` is (status, description, component or None); ``body`` a JSON body's
    component; ``query`` the model of its query parameters."""

    path: str
    method: str
    id: str
    tag: str
    summary: str
    ok: tuple[str, str, str | None]
    errors: tuple[int, ...] = ()
    body: str | None = None
    query: Any = None
    secured: bool = True
    extra: Schema = field(default_factory=dict)  # merged into the operation (parameters, links, ...)


def _links(param: str, pointer: str, *op_ids: str) -> Schema:
    return {op[0].upper() + op[1:]: {"operationId": op, "parameters": {param: pointer}} for op in op_ids}


_RUN_LINKS = _links("run_id", "$response.body#/id", "getRun", "cancelRun", "getRunResult", "listRunEvents")
_SUB_LINKS = _links(
    "sub_id",
    "$response.body#/id",
    "getSubscription",
    "updateSubscription",
    "deleteSubscription",
    "getSubscriptionSecret",
    "rotateSubscriptionSecret",
    "testSubscription",
    "listDeliveries",
    "recoverDeliveries",
)
_DELIVERY_LINKS = _links("delivery_id", "$response.body#/data/0/id", "getDelivery", "retryDelivery")
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "description": "Scoped to the client and kept 24 h: the same key and request replay the first run.",
    "schema": {"type": "string", "pattern": r"^[\x20-\x7e]{1,255}$", "minLength": 1, "maxLength": 255},
}
RUN_EXAMPLES: list[Any] = [
    {
        "vendor": "nutrient",
        "operation": "extract",
        "document": {"url": "https://example.com/invoice.pdf"},
        "options": {"instructions": {"mode": "agentic"}},
        "metadata": {"order_id": "A-1001"},
        "zero_retention": False,
    },
    {
        "vendor": "cloudsquid",
        "document": {
            "content_base64": "JVBERi0xLjQK",
            "filename": "invoice.pdf",
            "media_type": "application/pdf",
        },
    },
    {
        "vendor": "uptiq",
        "document": {"url": "https://example.com/statement.pdf"},
        "options": {"documentType": "BankStatement"},
        "zero_retention": True,
    },
]
SUBSCRIPTION_EXAMPLES: list[Any] = [
    {"url": "http://10.0.0.5:8080/hooks"},
    {"url": "http://10.0.0.5:8080/hooks", "event_types": ["run.*"], "description": "invoices app"},
]

OPERATIONS: list[Op] = [
    Op(
        "/healthz",
        "get",
        "healthz",
        "operations",
        "Liveness",
        ("200", "The process is up.", "Health"),
        secured=False,
    ),
    Op(
        "/readyz",
        "get",
        "readyz",
        "operations",
        "Readiness: Redis is reachable",
        ("200", "Ready.", "Health"),
        secured=False,
        extra={
            "responses": {
                "503": {
                    "description": "Redis is unreachable.",
                    "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
                    "content": {JSON: {"schema": {"$ref": REF + "Health"}}},
                }
            }
        },
    ),
    Op(
        "/metrics",
        "get",
        "metrics",
        "operations",
        "Prometheus metrics",
        ("200", "The text exposition format.", None),
        secured=False,
        extra={
            "responses": {
                "200": {
                    "description": "The text exposition format.",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            }
        },
    ),
    Op(
        "/openapi.json",
        "get",
        "openapi",
        "operations",
        "This document",
        ("200", "The OpenAPI 3.1 document.", None),
        secured=False,
    ),
    Op(
        "/v1/runs",
        "post",
        "createRun",
        "runs",
        "Submit a document to a vendor",
        ("202", "The run, accepted.", "Run"),
        (*BODY_ERRORS, 409, 410, 429),
        extra={
            "parameters": [_IDEMPOTENCY_KEY],
            "x-links": _RUN_LINKS,
            "x-headers": {"Location": True, "Idempotency-Replayed": False},
        },
    ),
    Op(
        "/v1/runs",
        "get",
        "listRuns",
        "runs",
        "List runs",
        ("200", "A page of runs, newest first.", "RunList"),
        (422,),
        query="run_page",
    ),
    Op("/v1/runs/{run_id}", "get", "getRun", "runs", "Get a run", ("200", "The run.", "Run"), (404,)),
    Op(
        "/v1/runs/{run_id}/cancel",
        "post",
        "cancelRun",
        "runs",
        "Cancel a run",
        ("200", "The run, canceled.", "Run"),
        (404, 409),
    ),
    Op(
        "/v1/runs/{run_id}/result",
        "get",
        "getRunResult",
        "runs",
        "Get the vendor's result of a succeeded run",
        ("200", "The vendor's result as it gave it: JSON, or a file (Nutrient split's zip).", None),
        (404, 409, 410),
        extra={
            "responses": {
                "200": {
                    "description": "The vendor's result: JSON, or a file (Nutrient split's zip).",
                    "content": {
                        JSON: {"schema": {"type": "object"}},
                        "application/zip": {"schema": {"type": "string", "format": "binary"}},
                    },
                }
            }
        },
    ),
    Op(
        "/v1/runs/{run_id}/events",
        "get",
        "listRunEvents",
        "runs",
        "List the events emitted for a run",
        ("200", "The run's events, oldest first.", "EventList"),
        (404,),
    ),
    Op(
        "/v1/subscriptions",
        "post",
        "createSubscription",
        "subscriptions",
        "Register a callback URL",
        ("201", "The subscription with its signing secret.", "SubscriptionWithSecret"),
        (*BODY_ERRORS, 409),
        body="SubscriptionCreate",
        extra={"x-links": _SUB_LINKS, "x-headers": {"Location": True}, "x-examples": SUBSCRIPTION_EXAMPLES},
    ),
    Op(
        "/v1/subscriptions",
        "get",
        "listSubscriptions",
        "subscriptions",
        "List subscriptions",
        ("200", "A page of subscriptions, newest first.", "SubscriptionList"),
        (422,),
        query=Page,
    ),
    Op(
        "/v1/subscriptions/{sub_id}",
        "get",
        "getSubscription",
        "subscriptions",
        "Get a subscription",
        ("200", "The subscription.", "Subscription"),
        (404,),
    ),
    Op(
        "/v1/subscriptions/{sub_id}",
        "patch",
        "updateSubscription",
        "subscriptions",
        "Change a subscription",
        ("200", "The subscription, changed.", "Subscription"),
        (404, *BODY_ERRORS),
        body="SubscriptionUpdate",
        extra={"x-examples": [{"disabled": False}]},
    ),
    Op(
        "/v1/subscriptions/{sub_id}",
        "delete",
        "deleteSubscription",
        "subscriptions",
        "Delete a subscription",
        ("204", "Deleted.", None),
        (404,),
    ),
    Op(
        "/v1/subscriptions/{sub_id}/secret",
        "get",
        "getSubscriptionSecret",
        "subscriptions",
        "Get the current signing secret",
        ("200", "The secret.", "Secret"),
        (404,),
    ),
    Op(
        "/v1/subscriptions/{sub_id}/rotate-secret",
        "post",
        "rotateSubscriptionSecret",
        "subscriptions",
        "Rotate the signing secret; the old one keeps signing beside it for 24 h",
        ("200", "The subscription with its new secret.", "SubscriptionWithSecret"),
        (404,),
    ),
    Op(
        "/v1/subscriptions/{sub_id}/test",
        "post",
        "testSubscription",
        "subscriptions",
        "Send a `subscription.test` event now",
        ("202", "The test event, queued.", "TestEventAccepted"),
        (404, 409, 429),
    ),
    Op(
        "/v1/subscriptions/{sub_id}/deliveries",
        "get",
        "listDeliveries",
        "deliveries",
        "The subscription's delivery log",
        ("200", "A page of deliveries, newest first.", "DeliveryList"),
        (404, 422),
        query=DeliveryPage,
        extra={"x-links": _DELIVERY_LINKS},
    ),
    Op(
        "/v1/subscriptions/{sub_id}/recover",
        "post",
        "recoverDeliveries",
        "deliveries",
        "Send again every failed delivery since a time",
        ("202", "How many deliveries were queued.", "RecoverAccepted"),
        (404, *BODY_ERRORS, 429),
        body="Recover",
        extra={"x-examples": [{"since": "2026-01-01T00:00:00Z"}]},
    ),
    Op(
        "/v1/deliveries/{delivery_id}",
        "get",
        "getDelivery",
        "deliveries",
        "Get a delivery with its attempts",
        ("200", "The delivery.", "DeliveryWithAttempts"),
        (404,),
    ),
    Op(
        "/v1/deliveries/{delivery_id}/retry",
        "post",
        "retryDelivery",
        "deliveries",
        "Send a delivery again now",
        ("202", "The delivery, pending.", "Delivery"),
        (404, 409, 429),
    ),
]
_PATH_IDS = {"run_id": ("run", "run"), "sub_id": ("sub", "subscription"), "delivery_id": ("dlv", "delivery")}
_PROBLEM_TEXT = {
    400: "The body is not JSON, is nested too deep, or cannot be read.",
    401: "No API key, or not a valid one.",
    404: "No such resource for this client, or not yet.",
    405: "The method is not allowed on this path.",
    409: "The request conflicts with the resource's state.",
    410: "Gone: zero retention, or past retention.",
    413: "The body or the document is too large.",
    415: "The body's media type is not accepted.",
    422: "The request is well-formed but refused; `errors` names each bad field.",
    429: "Too many requests; retry after Retry-After.",
    431: "The request's headers are too large.",
    500: "A fault of ours; never from input.",
    503: "The store is unreachable; try again after Retry-After.",
}


def _query_params(model: type[BaseModel]) -> list[Schema]:
    schema = models.json_schema(TypeAdapter(model))
    return [
        {"name": name, "in": "query", "description": prop.pop("description", ""), "schema": prop}
        for name, prop in schema["properties"].items()
    ]


def _responses(op: Op) -> Schema:
    status, description, component = op.ok
    ok: Schema = {"description": description}
    if component:
        ok["content"] = {JSON: {"schema": {"$ref": REF + component}}}
    headers = {
        name: {"$ref": "#/components/headers/" + name.replace("-", "")}
        for name in op.extra.get("x-headers", {})
    }
    if headers:
        ok["headers"] = headers
    if "x-links" in op.extra:
        ok["links"] = op.extra["x-links"]
    errors = sorted({*op.errors, *(EVERY_ERROR if op.secured else (431,))})
    out = {status: ok, **{str(s): {"$ref": f"#/components/responses/Problem{s}"} for s in errors}}
    out.update(op.extra.get("responses", {}))
    return out


def _operation(op: Op, m: Models) -> Schema:
    out: Schema = {"operationId": op.id, "tags": [op.tag], "summary": op.summary}
    params = [*op.extra.get("parameters", [])]
    if op.query is not None:
        params += _query_params(getattr(m, op.query) if isinstance(op.query, str) else op.query)
    if params:
        out["parameters"] = params
    if op.body:
        content: Schema = {JSON: {"schema": {"$ref": REF + op.body}}}
        if "x-examples" in op.extra:
            content[JSON]["examples"] = _examples(op.extra["x-examples"])
        out["requestBody"] = {"required": True, "content": content}
    elif op.id == "createRun":
        out["requestBody"] = _submit_body(m)
    out["responses"] = _responses(op)
    if not op.secured:
        out["security"] = []
    return out


def _examples(values: list[Any]) -> Schema:
    return {f"example{i}": {"value": value} for i, value in enumerate(values, 1)}


def _submit_body(m: Models) -> Schema:
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
            JSON: {"schema": {"$ref": REF + "RunRequest"}, "examples": _examples(RUN_EXAMPLES)},
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
            "description": f"{_PROBLEM_TEXT[status]} (`code`: {', '.join(codes)})",
            "content": {PROBLEM: {"schema": {"$ref": REF + "Problem"}}},
        }
        if status == 401:
            response["headers"] = {"WWW-Authenticate": {"$ref": "#/components/headers/WWWAuthenticate"}}
        if status in (429, 503):
            response["headers"] = {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}}
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
        for event_type, model in models.CALLBACKS.items()
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


assert set(domain.EVENT_TYPES) == set(models.CALLBACKS)
