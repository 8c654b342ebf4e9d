"""The OpenAPI 3.1 document of the HTTP API (CONTRACT §4) and of the callbacks it sends (§5).

Built from small helpers over the same constants the code validates with (statuses, vendors, event
types, the default limits), so that the document cannot drift from them silently. Request bodies are as
strict as the code (``additionalProperties: false`` where unknown fields are refused), so that requests
generated from the document are meaningful; ``tests/integration/test_openapi.py`` runs schemathesis
against the live API to keep every answer inside what is documented here.
"""

from __future__ import annotations

import functools
from typing import Any

from service import __version__, domain
from service.api.subscriptions import DELIVERY_STATUSES
from service.api.validation import JSON_OVERHEAD
from service.settings import Settings

Schema = dict[str, Any]

_DEFAULTS = Settings()
_PROBLEM = "application/problem+json"
_JSON = "application/json"
_ID_BODY = "[0-9A-Za-z]+"  # opaque: new_id() makes 26 Crockford base32 characters, Lua hex
_B64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"
_METADATA_KEY = r"^[\w.:-]{1,40}$"
_MEDIA_TYPE = r"^[\w.+-]+/[\w.+-]+$"
_SUBSCRIPTION_EVENT_TYPES = (*domain.EVENT_TYPES, "run.*")
# The registered vendors and their operations (Settings.vendors, from the vendor registry).
Vendors = tuple[tuple[str, tuple[str, ...]], ...]


def vendors_of(settings: Settings) -> Vendors:
    return tuple((name, v.operations) for name, v in settings.vendors.items())


def _all_operations(vendors: Vendors) -> tuple[str, ...]:
    return tuple(dict.fromkeys(op for _, ops in vendors for op in ops))


_RUN_ERROR_CODES = (
    domain.VENDOR_REJECTED,
    domain.VENDOR_FAILED,
    domain.VENDOR_UNREACHABLE,
    domain.TIMED_OUT,
    domain.VENDOR_EXPIRED,
    domain.RESULT_TOO_LARGE,
)

# Problem ``code`` values, by status (CONTRACT §4 and the codes the code adds).
ERROR_CODES: dict[int, tuple[str, ...]] = {
    400: ("invalid_json", "invalid_request"),
    401: ("unauthorized",),
    404: ("not_found", "result_not_ready"),
    405: ("method_not_allowed",),
    409: (
        "idempotency_key_reused",
        "run_not_cancelable",
        "conflict",
        "subscription_disabled",
        "delivery_pending",
        "quota_exceeded",
    ),
    410: ("result_gone", "iterator_expired"),
    413: ("document_too_large",),
    415: ("unsupported_media_type",),
    422: (
        "validation_error",
        "unknown_vendor",
        "callback_url_not_allowed",
        "options_too_large",
        "invalid_iterator",
    ),
    429: ("rate_limited", "too_many_streams"),
    431: ("headers_too_large",),
    503: ("unavailable",),
}


# Schema building blocks --------------------------------------------------------------------------


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or JSON ``null`` (OpenAPI 3.1 has no ``nullable``)."""
    if "$ref" in schema or "type" not in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    out = {**schema, "type": [*types, "null"]}
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def string(description: str | None = None, **keywords: Any) -> Schema:
    out: Schema = {"type": "string", **keywords}
    if description:
        out["description"] = description
    return out


def enum(values: tuple[str, ...] | list[str], description: str | None = None) -> Schema:
    return string(description, enum=list(values))


def timestamp(description: str) -> Schema:
    return string(description, format="date-time")


def prefixed_id(prefix: str, description: str) -> Schema:
    return string(
        description, pattern=f"^{prefix}_{_ID_BODY}$", examples=[f"{prefix}_01J9Z3K8V2Q4M6N8P0R2S4T6V8"]
    )


def obj(
    properties: dict[str, Schema],
    *,
    required: tuple[str, ...] | list[str] | None = None,
    closed: bool = True,
    description: str | None = None,
    title: str | None = None,
) -> Schema:
    """An object; ``closed`` means unknown members are refused (requests) or never sent (responses)."""
    out: Schema = {"type": "object", "properties": properties}
    if required is None:
        required = list(properties)
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    if title:
        out["title"] = title
    return out


def metadata_schema() -> Schema:
    limit = _DEFAULTS.max_metadata_value_bytes
    return {
        "type": "object",
        "description": (
            f"Up to {_DEFAULTS.max_metadata_pairs} string pairs, echoed in every event. "
            f"Keys: 1 to 40 letters, digits, '_', '-', '.', ':'; values: at most {limit} bytes of UTF-8."
        ),
        "maxProperties": _DEFAULTS.max_metadata_pairs,
        "propertyNames": {"pattern": _METADATA_KEY},
        "additionalProperties": string(maxLength=limit),
        "examples": [{"order_id": "A-1001"}],
    }


def list_envelope(item: str, description: str) -> Schema:
    return obj(
        {
            "data": {"type": "array", "items": ref(item)},
            "next_cursor": nullable(
                string("Pass as `cursor` for the next page; null on the last page.", minLength=1)
            ),
        },
        description=description,
    )


# Component schemas -------------------------------------------------------------------------------


def _progress() -> Schema:
    return obj(
        {
            "percent": nullable({"type": "number", "description": "0 to 100, as the vendor reports it."}),
            "phase": nullable(string()),
            "message": nullable(string()),
        },
        description="What the vendor says about a run in progress; every member may be null.",
    )


def _usage() -> Schema:
    return obj(
        {
            "credits": nullable({"type": "number", "description": "What the vendor says the run cost."}),
            "reported": nullable(
                {
                    "type": "object",
                    "description": "The vendor's own usage record, as it reported it (Nutrient `usage`, "
                    "Uptiq `creditReservation`); null when larger than 1 KiB.",
                }
            ),
        },
        description="What the vendor reports a finished run cost.",
    )


def _run_error() -> Schema:
    return obj(
        {
            "code": enum(_RUN_ERROR_CODES),
            "message": string(),
            "vendor_status": nullable(string()),
            "details": {
                "type": "object",
                "description": "What else the vendor said about the failure, when it said anything "
                "(for example Uptiq's `documentQuality`).",
            },
        },
        required=("code", "message", "vendor_status"),
        description="Why a run failed.",
    )


def _run(vendors: Vendors) -> Schema:
    return obj(
        {
            "id": prefixed_id("run", "The run's id."),
            "status": enum(
                domain.RUN_STATUSES,
                "`queued` → `submitted` → `running` → `succeeded` | `failed` | `canceled` (terminal).",
            ),
            "vendor": enum(tuple(name for name, _ in vendors)),
            "operation": enum(_all_operations(vendors)),
            "vendor_run_id": nullable(string("The vendor's id for the run, once it accepted it.")),
            "vendor_status": nullable(string("The vendor's own status word, as last seen.")),
            "progress": nullable(ref("Progress")),
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            "zero_retention": {"type": "boolean"},
            "created_at": timestamp("When the run was accepted."),
            "updated_at": timestamp("When the run last changed."),
            "completed_at": nullable(timestamp("When the run reached a terminal status.")),
            "polls": {"type": "integer", "minimum": 0, "description": "How often the vendor was polled."},
            "error": nullable(ref("RunError")),
            "usage": nullable(ref("Usage")),
            "vendor_deleted": nullable(
                {
                    "type": "boolean",
                    "description": "With `zero_retention`: true once the vendor's copy of the run is deleted "
                    "(Nutrient); false while it is not (yet), or when the vendor has no delete API. "
                    "null without `zero_retention`, or when the vendor never had the run.",
                }
            ),
            "vendor_delete_error": nullable(
                string("Why the vendor's copy was not deleted, once hookbridge stopped trying.")
            ),
        },
        description="A document-extraction run.",
    )


def _subscription_properties() -> dict[str, Schema]:
    return {
        "id": prefixed_id("sub", "The subscription's id."),
        "url": string("Where events are POSTed.", format="uri"),
        "event_types": nullable(
            {
                "type": "array",
                "items": enum(_SUBSCRIPTION_EVENT_TYPES),
                "description": "null: the three terminal run events.",
            }
        ),
        "description": nullable(string()),
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "disabled": {"type": "boolean"},
        "disabled_reason": nullable(string()),
        "max_in_flight": nullable({"type": "integer", "minimum": 1, "maximum": 1000}),
        "rate_limit_per_s": nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 10000}),
        "consecutive_failures": {"type": "integer", "minimum": 0},
        "created_at": timestamp("When the subscription was created."),
        "updated_at": timestamp("When the subscription last changed."),
    }


def _secret() -> Schema:
    return string("The signing secret (Standard Webhooks).", pattern="^whsec_[A-Za-z0-9+/=]+$")


def _subscription(*, with_secret: bool) -> Schema:
    properties = _subscription_properties()
    if with_secret:
        properties["secret"] = _secret()
        return obj(properties, description="A subscription with its current signing secret.")
    return obj(properties, description="Where and which events are delivered.")


def _delivery_properties() -> dict[str, Schema]:
    return {
        "id": prefixed_id("dlv", "The delivery's id."),
        "event_id": prefixed_id("evt", "The event delivered; the `webhook-id` header."),
        "event_type": enum(domain.EVENT_TYPES),
        "subscription_id": prefixed_id("sub", "The subscription it goes to."),
        "run_id": nullable(prefixed_id("run", "The run the event is about; null for test events.")),
        "status": enum(DELIVERY_STATUSES),
        "attempts": {"type": "integer", "minimum": 0},
        "last_status_code": nullable({"type": "integer"}),
        "next_attempt_at": nullable(timestamp("When the next attempt is due.")),
        "created_at": timestamp("When the delivery was created."),
        "updated_at": timestamp("When the delivery last changed."),
    }


def _delivery(*, with_attempts: bool) -> Schema:
    properties = _delivery_properties()
    if with_attempts:
        properties["attempt_log"] = {"type": "array", "items": ref("DeliveryAttempt")}
        return obj(properties, description="One delivery with its latest attempts, oldest first.")
    return obj(properties, description="One event on its way to one subscription.")


def _delivery_attempt() -> Schema:
    return obj(
        {
            "at": timestamp("When the attempt started."),
            "status_code": nullable({"type": "integer", "description": "null when no answer came."}),
            "duration_ms": {"type": "number", "minimum": 0},
            "error": nullable(string("Why the attempt failed, when it did.")),
            "response_body": nullable(string("The start of the receiver's answer.")),
        },
        description="One attempt to deliver an event.",
    )


def _run_event_data() -> Schema:
    return obj(
        {
            "run": ref("Run"),
            "result": {"description": "The vendor's result, inline; null when not inline or not succeeded."},
            "result_url": nullable(string("`/v1/runs/{id}/result` when the result is too large to inline.")),
        },
        description="What a run event carries.",
    )


def _test_event_data() -> Schema:
    return obj(
        {"subscription_id": prefixed_id("sub", "The subscription tested."), "message": string()},
        description="What a `subscription.test` event carries.",
    )


def _event() -> Schema:
    return obj(
        {
            "id": prefixed_id("evt", "The event's id; the `webhook-id` of its deliveries."),
            "type": enum(domain.EVENT_TYPES),
            "created_at": timestamp("When the event was emitted."),
            "data": nullable(ref("RunEventData")),
        },
        description="An event emitted for a run.",
    )


def _event_payload(event_types: tuple[str, ...], data: str) -> Schema:
    return obj(
        {"type": enum(event_types), "timestamp": timestamp("When the event was emitted."), "data": ref(data)},
        description="The JSON body POSTed to the subscription's URL.",
    )


def _problem() -> Schema:
    codes = sorted({code for group in ERROR_CODES.values() for code in group} | {"http_error"})
    return obj(
        {
            "type": string("A URI naming the problem: https://hookbridge.dev/errors/{code}.", format="uri"),
            "title": string(),
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": string(),
            "code": string("The stable, machine-readable error code.", examples=codes),
            "instance": string("The request path."),
            "errors": {
                "type": "array",
                "description": "With `validation_error`: every field refused, and why.",
                "items": obj({"field": string(), "message": string()}),
            },
        },
        required=("type", "title", "status", "detail", "code"),
        closed=False,
        description="An RFC 9457 problem, with the extra member `code`.",
    )


def _run_request(vendors: Vendors, *, multipart: bool) -> Schema:
    """The submission: one variant per vendor, since each allows its own operations."""
    variants = []
    for vendor, operations in vendors:
        properties: dict[str, Schema] = {
            "vendor": {"const": vendor},
            "operation": enum(operations, "Default `extract`."),
        }
        if not multipart:
            properties["document"] = ref("DocumentInput")
        properties.update(
            options={
                "type": "object",
                "description": "Passed to the vendor: Nutrient `instructions`; Cloudsquid `project`, "
                "`table_id`; Uptiq the body fields of its `/extract` request such as `documentType`. "
                "At most `HOOKBRIDGE_MAX_OPTIONS_BYTES` (64 KiB) as JSON, else 422 `options_too_large`.",
            },
            metadata=metadata_schema(),
            subscription_ids={
                "type": "array",
                "maxItems": 50,
                "items": string(pattern="^sub_"),
                "description": "Narrows delivery to these subscriptions of the caller.",
            },
            zero_retention={"type": "boolean", "default": False},
        )
        required = ("vendor",) if multipart else ("vendor", "document")
        variants.append(obj(properties, required=required, title=vendor))
    what = "the `request` part of a multipart submission" if multipart else "a JSON submission"
    return {"oneOf": variants, "description": f"The run to start: {what}."}


def _document_input() -> Schema:
    common = {
        "filename": string(minLength=1, maxLength=255, default="document"),
        "media_type": string(pattern=_MEDIA_TYPE, maxLength=127, default="application/octet-stream"),
    }
    by_url = obj(
        {"url": string(pattern=r"^https?://[^\s]+$", maxLength=2048), **common},
        required=("url",),
        title="url",
    )
    inline = obj(
        {
            "content_base64": string(
                "The document, base64 (standard alphabet, padded).",
                pattern=_B64,
                contentEncoding="base64",
                maxLength=(_DEFAULTS.max_document_bytes + 2) // 3 * 4,
            ),
            **common,
        },
        required=("content_base64",),
        title="content",
    )
    return {"oneOf": [by_url, inline], "description": "The document: a URL the vendor fetches, or its bytes."}


def _subscription_input(*, creating: bool) -> Schema:
    properties: dict[str, Schema] = {
        "url": string(
            "An http(s) URL whose addresses are allowed (CONTRACT §6).",
            format="uri",
            pattern="^https?://",
            minLength=1,
            maxLength=2048,
        ),
        "event_types": nullable(
            {
                "type": "array",
                "minItems": 1,
                "items": enum(_SUBSCRIPTION_EVENT_TYPES),
                "description": "Omitted or null: the three terminal run events; `run.*`: every run event.",
            }
        ),
        "description": nullable(string(maxLength=500)),
        "metadata": metadata_schema(),
        "max_in_flight": nullable({"type": "integer", "minimum": 1, "maximum": 1000}),
        "rate_limit_per_s": nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 10000}),
    }
    if creating:
        return obj(properties, required=("url",), description="A new subscription.")
    properties["disabled"] = {"type": "boolean", "description": "false re-enables and resets its health."}
    return obj(properties, required=(), description="The members to change; the others stay.")


def component_schemas(vendors: Vendors) -> dict[str, Schema]:
    return {
        "Run": _run(vendors),
        "RunError": _run_error(),
        "Progress": _progress(),
        "Usage": _usage(),
        "RunList": list_envelope("Run", "A page of runs, newest first."),
        "RunRequest": _run_request(vendors, multipart=False),
        "RunRequestPart": _run_request(vendors, multipart=True),
        "DocumentInput": _document_input(),
        "Event": _event(),
        "EventList": list_envelope("Event", "The events of a run, oldest first."),
        "RunEventData": _run_event_data(),
        "TestEventData": _test_event_data(),
        "RunEventPayload": _event_payload(domain.RUN_EVENTS, "RunEventData"),
        "TestEventPayload": _event_payload((domain.EVENT_TEST,), "TestEventData"),
        "Subscription": _subscription(with_secret=False),
        "SubscriptionWithSecret": _subscription(with_secret=True),
        "SubscriptionList": list_envelope("Subscription", "A page of subscriptions, newest first."),
        "SubscriptionCreate": _subscription_input(creating=True),
        "SubscriptionUpdate": _subscription_input(creating=False),
        "Secret": obj({"secret": _secret()}),
        "TestEventAccepted": obj({"event_id": prefixed_id("evt", "The test event's id.")}),
        "Recover": obj({"since": timestamp("RFC 3339 with an offset.")}),
        "RecoverAccepted": obj({"retried": {"type": "integer", "minimum": 0}}),
        "Delivery": _delivery(with_attempts=False),
        "DeliveryWithAttempts": _delivery(with_attempts=True),
        "DeliveryAttempt": _delivery_attempt(),
        "DeliveryList": list_envelope("Delivery", "A page of deliveries, newest first."),
        "Health": obj({"status": string(examples=["ok", "redis unavailable"])}),
        "Problem": _problem(),
    }


# Parameters, headers and responses ---------------------------------------------------------------


def path_param(name: str, prefix: str, what: str) -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": f"The {what}'s id.",
        "schema": string(pattern=f"^{prefix}_[0-9A-Za-z]+$", maxLength=64),
    }


def query_param(name: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


def page_params() -> list[Schema]:
    return [
        query_param("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "Page size."),
        query_param("cursor", string(maxLength=512), "`next_cursor` of the previous page."),
    ]


def header(description: str, schema: Schema | None = None, *, required: bool = True) -> Schema:
    return {"description": description, "required": required, "schema": schema or string()}


def component_headers() -> dict[str, Schema]:
    return {
        "Location": header("Where the created resource lives.", string(pattern="^/v1/")),
        "RetryAfter": header("Seconds to wait before trying again.", string(pattern="^[0-9]+$")),
        "WWWAuthenticate": header("The scheme to authenticate with.", string(pattern="^Bearer ")),
    }


def hdr(name: str) -> Schema:
    return {"$ref": f"#/components/headers/{name}"}


def json_content(schema: Schema, media_type: str = _JSON) -> dict[str, Any]:
    return {media_type: {"schema": schema}}


def problem_response(status: int, description: str) -> Schema:
    codes = ERROR_CODES[status]
    schema: Schema = {
        "allOf": [
            ref("Problem"),
            {"properties": {"status": {"const": status}, "code": enum(codes)}},
        ]
    }
    out: Schema = {"description": f"{description} (`code`: {', '.join(codes)})", "content": {}}
    out["content"][_PROBLEM] = {"schema": schema}
    if status == 401:
        out["headers"] = {"WWW-Authenticate": hdr("WWWAuthenticate")}
    if status in (429, 503):
        out["headers"] = {"Retry-After": hdr("RetryAfter")}
    return out


_PROBLEM_DESCRIPTIONS = {
    400: "The body is not JSON, is nested too deep, or cannot be read.",
    401: "No API key, or not a valid one.",
    404: "No such resource for this client.",
    405: "The method is not allowed on this path.",
    409: "The request conflicts with the resource's state.",
    410: "Gone: zero retention, or past retention.",
    413: "The body or the document is too large.",
    415: "The body's media type is not accepted.",
    422: "The request is well-formed but refused; `errors` names the fields.",
    429: "Too many requests.",
    431: "The request's headers are too large.",
    503: "The store is unreachable; try again after Retry-After.",
}


def component_responses() -> dict[str, Schema]:
    return {
        f"Problem{status}": problem_response(status, text) for status, text in _PROBLEM_DESCRIPTIONS.items()
    }


def errors(*statuses: int) -> dict[str, Schema]:
    """Problem responses: the ones every authenticated operation can give, plus ``statuses``."""
    every = {401, 431, 503}
    return {
        str(status): {"$ref": f"#/components/responses/Problem{status}"}
        for status in sorted(every | set(statuses))
    }


def body_errors() -> tuple[int, ...]:
    return (400, 413, 415, 422)


def ok(description: str, schema: Schema, *, headers: dict[str, Schema] | None = None) -> Schema:
    out: Schema = {"description": description, "content": json_content(schema)}
    if headers:
        out["headers"] = headers
    return out


def operation(
    op_id: str,
    tag: str,
    summary: str,
    responses: dict[str, Schema],
    *,
    parameters: list[Schema] | None = None,
    body: Schema | None = None,
    secured: bool = True,
    links: dict[str, Any] | None = None,
) -> Schema:
    out: Schema = {"operationId": op_id, "tags": [tag], "summary": summary}
    if parameters:
        out["parameters"] = parameters
    if body is not None:
        out["requestBody"] = body
    out["responses"] = responses
    if not secured:
        out["security"] = []
    if links:
        for status, link in links.items():
            out["responses"][status]["links"] = link
    return out


# Paths -------------------------------------------------------------------------------------------

_RUN_ID = path_param("run_id", "run", "run")
_SUB_ID = path_param("sub_id", "sub", "subscription")
_DELIVERY_ID = path_param("delivery_id", "dlv", "delivery")


def _run_links() -> dict[str, Any]:
    run_id = {"run_id": "$response.body#/id"}
    return {
        "GetRun": {"operationId": "getRun", "parameters": run_id},
        "CancelRun": {"operationId": "cancelRun", "parameters": run_id},
        "GetRunResult": {"operationId": "getRunResult", "parameters": run_id},
        "ListRunEvents": {"operationId": "listRunEvents", "parameters": run_id},
    }


def _subscription_links() -> dict[str, Any]:
    sub_id = {"sub_id": "$response.body#/id"}
    return {
        name: {"operationId": op, "parameters": sub_id}
        for name, op in (
            ("GetSubscription", "getSubscription"),
            ("UpdateSubscription", "updateSubscription"),
            ("DeleteSubscription", "deleteSubscription"),
            ("GetSubscriptionSecret", "getSubscriptionSecret"),
            ("RotateSubscriptionSecret", "rotateSubscriptionSecret"),
            ("TestSubscription", "testSubscription"),
            ("ListDeliveries", "listDeliveries"),
            ("RecoverDeliveries", "recoverDeliveries"),
        )
    }


def _delivery_links() -> dict[str, Any]:
    delivery_id = {"delivery_id": "$response.body#/data/0/id"}
    return {
        "GetDelivery": {"operationId": "getDelivery", "parameters": delivery_id},
        "RetryDelivery": {"operationId": "retryDelivery", "parameters": delivery_id},
    }


def _submit_body() -> Schema:
    multipart = {
        "schema": obj(
            {
                "file": {"type": "string", "contentMediaType": "application/octet-stream", "minLength": 1},
                "request": ref("RunRequestPart"),
            },
        ),
        "encoding": {"request": {"contentType": _JSON}},
    }
    return {
        "required": True,
        "description": (
            f"JSON, or multipart/form-data with a `file` part and a `request` part holding the same JSON "
            f"without `document`. Documents up to {_DEFAULTS.max_document_bytes} bytes."
        ),
        "content": {
            _JSON: {"schema": ref("RunRequest"), "examples": examples(*_RUN_EXAMPLES)},
            "multipart/form-data": multipart,
        },
    }


_RUN_EXAMPLES: tuple[dict[str, Any], ...] = (
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
)


def examples(*values: Any) -> dict[str, Any]:
    return {f"example{i}": {"value": value} for i, value in enumerate(values, 1)}


def json_body(schema_name: str, *values: Any, required: bool = True) -> Schema:
    out: Schema = {
        "required": required,
        "description": f"JSON, at most {JSON_OVERHEAD} bytes.",
        "content": json_content(ref(schema_name)),
    }
    if values:
        out["content"][_JSON]["examples"] = examples(*values)
    return out


def run_paths(vendors: Vendors) -> dict[str, Any]:
    idempotency_key = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "Scoped to the client and kept 24 h: the same key and request replay the first run.",
        "schema": string(pattern=r"^[\x20-\x7e]{1,255}$", minLength=1, maxLength=255),
    }
    accepted_headers = {
        "Location": hdr("Location"),
        "Idempotency-Replayed": header(
            "`true` when an earlier run is replayed.", enum(["true"]), required=False
        ),
    }
    return {
        "/v1/runs": {
            "post": operation(
                "createRun",
                "runs",
                "Submit a document to a vendor",
                {
                    "202": ok("The run, accepted.", ref("Run"), headers=accepted_headers),
                    **errors(*body_errors(), 409, 410, 429),
                },
                parameters=[idempotency_key],
                body=_submit_body(),
                links={"202": _run_links()},
            ),
            "get": operation(
                "listRuns",
                "runs",
                "List runs",
                {"200": ok("A page of runs.", ref("RunList")), **errors(422)},
                parameters=[
                    *page_params(),
                    query_param("status", enum(domain.RUN_STATUSES), "Only runs in this status."),
                    query_param(
                        "vendor", enum(tuple(name for name, _ in vendors)), "Only runs at this vendor."
                    ),
                ],
            ),
        },
        "/v1/runs/{run_id}": {
            "parameters": [_RUN_ID],
            "get": operation(
                "getRun", "runs", "Get a run", {"200": ok("The run.", ref("Run")), **errors(404)}
            ),
        },
        "/v1/runs/{run_id}/cancel": {
            "parameters": [_RUN_ID],
            "post": operation(
                "cancelRun",
                "runs",
                "Cancel a run",
                {"200": ok("The run, canceled.", ref("Run")), **errors(404, 409)},
            ),
        },
        "/v1/runs/{run_id}/result": {
            "parameters": [_RUN_ID],
            "get": operation(
                "getRunResult",
                "runs",
                "Get the vendor's result of a succeeded run",
                {
                    "200": {
                        "description": "The vendor's result, as it gave it: JSON, or a file (Nutrient "
                        "split's `zip` asset, fetched with the vendor's key).",
                        "content": {
                            **json_content({}),
                            "application/zip": {"schema": {"type": "string", "format": "binary"}},
                        },
                    },
                    **errors(404, 410),
                },
            ),
        },
        "/v1/runs/{run_id}/events": {
            "parameters": [_RUN_ID],
            "get": operation(
                "listRunEvents",
                "runs",
                "List the events emitted for a run",
                {"200": ok("The run's events.", ref("EventList")), **errors(404)},
            ),
        },
    }


def subscription_paths() -> dict[str, Any]:
    created_headers = {"Location": hdr("Location")}
    return {
        "/v1/subscriptions": {
            "post": operation(
                "createSubscription",
                "subscriptions",
                "Register a callback URL",
                {
                    "201": ok(
                        "The subscription with its signing secret.",
                        ref("SubscriptionWithSecret"),
                        headers=created_headers,
                    ),
                    **errors(*body_errors(), 409),
                },
                body=json_body(
                    "SubscriptionCreate",
                    {"url": "http://10.0.0.5:8080/hooks"},
                    {
                        "url": "http://10.0.0.5:8080/hooks",
                        "event_types": ["run.*"],
                        "description": "invoices app",
                        "metadata": {"team": "billing"},
                    },
                ),
                links={"201": _subscription_links()},
            ),
            "get": operation(
                "listSubscriptions",
                "subscriptions",
                "List subscriptions",
                {"200": ok("A page of subscriptions.", ref("SubscriptionList")), **errors(422)},
                parameters=page_params(),
            ),
        },
        "/v1/subscriptions/{sub_id}": {
            "parameters": [_SUB_ID],
            "get": operation(
                "getSubscription",
                "subscriptions",
                "Get a subscription",
                {"200": ok("The subscription.", ref("Subscription")), **errors(404)},
            ),
            "patch": operation(
                "updateSubscription",
                "subscriptions",
                "Change a subscription",
                {"200": ok("The subscription, changed.", ref("Subscription")), **errors(404, *body_errors())},
                body=json_body("SubscriptionUpdate", {"disabled": False}, {"event_types": None}),
            ),
            "delete": operation(
                "deleteSubscription",
                "subscriptions",
                "Delete a subscription",
                {"204": {"description": "Deleted."}, **errors(404)},
            ),
        },
        "/v1/subscriptions/{sub_id}/secret": {
            "parameters": [_SUB_ID],
            "get": operation(
                "getSubscriptionSecret",
                "subscriptions",
                "Get the current signing secret",
                {"200": ok("The secret.", ref("Secret")), **errors(404)},
            ),
        },
        "/v1/subscriptions/{sub_id}/rotate-secret": {
            "parameters": [_SUB_ID],
            "post": operation(
                "rotateSubscriptionSecret",
                "subscriptions",
                "Rotate the signing secret; the old one keeps signing beside it for 24 h",
                {
                    "200": ok("The subscription with its new secret.", ref("SubscriptionWithSecret")),
                    **errors(404),
                },
            ),
        },
        "/v1/subscriptions/{sub_id}/test": {
            "parameters": [_SUB_ID],
            "post": operation(
                "testSubscription",
                "subscriptions",
                "Send a `subscription.test` event now",
                {"202": ok("The test event, queued.", ref("TestEventAccepted")), **errors(404, 409, 429)},
            ),
        },
        "/v1/subscriptions/{sub_id}/deliveries": {
            "parameters": [_SUB_ID],
            "get": operation(
                "listDeliveries",
                "deliveries",
                "The subscription's delivery log",
                {"200": ok("A page of deliveries.", ref("DeliveryList")), **errors(404, 422)},
                parameters=[
                    *page_params(),
                    query_param("status", enum(DELIVERY_STATUSES), "Only deliveries in this status."),
                ],
                links={"200": _delivery_links()},
            ),
        },
        "/v1/subscriptions/{sub_id}/recover": {
            "parameters": [_SUB_ID],
            "post": operation(
                "recoverDeliveries",
                "deliveries",
                "Send again every failed delivery since a time",
                {
                    "202": ok("How many deliveries were queued.", ref("RecoverAccepted")),
                    **errors(404, *body_errors(), 429),
                },
                body=json_body("Recover", {"since": "2026-01-01T00:00:00Z"}),
            ),
        },
        "/v1/deliveries/{delivery_id}": {
            "parameters": [_DELIVERY_ID],
            "get": operation(
                "getDelivery",
                "deliveries",
                "Get a delivery with its attempts",
                {"200": ok("The delivery.", ref("DeliveryWithAttempts")), **errors(404)},
            ),
        },
        "/v1/deliveries/{delivery_id}/retry": {
            "parameters": [_DELIVERY_ID],
            "post": operation(
                "retryDelivery",
                "deliveries",
                "Send a delivery again now",
                {"202": ok("The delivery, pending.", ref("Delivery")), **errors(404, 409, 429)},
            ),
        },
    }


def operational_paths() -> dict[str, Any]:
    too_large = {"431": {"$ref": "#/components/responses/Problem431"}}
    return {
        "/healthz": {
            "get": operation(
                "healthz",
                "operations",
                "Liveness",
                {"200": ok("The process is up.", ref("Health")), **too_large},
                secured=False,
            )
        },
        "/readyz": {
            "get": operation(
                "readyz",
                "operations",
                "Readiness: Redis is reachable",
                {
                    "200": ok("Ready.", ref("Health")),
                    "503": ok(
                        "Redis is unreachable.", ref("Health"), headers={"Retry-After": hdr("RetryAfter")}
                    ),
                    **too_large,
                },
                secured=False,
            )
        },
        "/metrics": {
            "get": operation(
                "metrics",
                "operations",
                "Prometheus metrics",
                {
                    "200": {
                        "description": "The text exposition format.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **too_large,
                },
                secured=False,
            )
        },
        "/openapi.json": {
            "get": operation(
                "openapi",
                "operations",
                "This document",
                {"200": ok("The OpenAPI 3.1 document.", {"type": "object"}), **too_large},
                secured=False,
            )
        },
    }


# Webhooks ----------------------------------------------------------------------------------------


def webhook_headers() -> list[Schema]:
    def param(name: str, description: str, schema: Schema) -> Schema:
        return {"name": name, "in": "header", "required": True, "description": description, "schema": schema}

    return [
        param(
            "webhook-id",
            "The event id; the same on every retry. Deduplicate on it.",
            string(pattern=f"^evt_{_ID_BODY}$"),
        ),
        param("webhook-timestamp", "Unix seconds of this attempt.", string(pattern="^[0-9]+$")),
        param(
            "webhook-signature",
            'Space-separated `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, '
            "several during a secret rotation.",
            string(pattern=r"^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$"),
        ),
        param("user-agent", "`hookbridge/<version>`.", string(pattern="^hookbridge/")),
    ]


def webhook(event_type: str, summary: str, payload: str) -> Schema:
    return {
        "post": {
            "operationId": f"webhook_{event_type.replace('.', '_')}",
            "tags": ["callbacks"],
            "summary": summary,
            "description": (
                "Signed by the Standard Webhooks scheme. Answer 2xx within the callback timeout; anything "
                "else is retried on the retry schedule (Retry-After on 429 and 503 is honoured); 410 "
                "disables the subscription."
            ),
            "parameters": webhook_headers(),
            "requestBody": {"required": True, "content": json_content(ref(payload))},
            "responses": {
                "2XX": {"description": "Received."},
                "410": {"description": "Gone: the subscription is disabled."},
                "default": {"description": "Any other answer is retried."},
            },
            "security": [],
        }
    }


def webhooks() -> dict[str, Any]:
    summaries = {
        domain.EVENT_SUBMITTED: "The vendor accepted the run",
        domain.EVENT_PROGRESS: "The run made progress (only to subscriptions that name it)",
        domain.EVENT_SUCCEEDED: "The run succeeded; the result is inline or at `result_url`",
        domain.EVENT_FAILED: "The run failed; `data.run.error` says why",
        domain.EVENT_CANCELED: "The run was canceled",
    }
    out = {
        event_type: webhook(event_type, summaries[event_type], "RunEventPayload")
        for event_type in domain.RUN_EVENTS
    }
    out[domain.EVENT_TEST] = webhook(
        domain.EVENT_TEST, "A test event from the test endpoint", "TestEventPayload"
    )
    return out


# The document ------------------------------------------------------------------------------------


def _info() -> Schema:
    return {
        "title": "hookbridge",
        "version": __version__,
        "summary": "Turns polling-only document-extraction vendor APIs into signed webhook callbacks.",
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    }


def _tags() -> list[Schema]:
    return [
        {"name": "runs", "description": "Document-extraction runs."},
        {"name": "subscriptions", "description": "Callback URLs and their signing secrets."},
        {"name": "deliveries", "description": "What happened to each callback."},
        {"name": "operations", "description": "Health, readiness, metrics, this document."},
        {"name": "callbacks", "description": "What hookbridge POSTs to subscribed URLs."},
        {"name": "events", "description": "The event feed and its streams, for apps without an endpoint."},
    ]


def document(vendors: Vendors | None = None) -> dict[str, Any]:
    """The whole document for the registered vendors (those of the loaded settings by default)."""
    if vendors is None:
        from service import settings as settings_mod

        vendors = vendors_of(settings_mod.load({}))
    return _document(vendors)


@functools.cache
def _document(vendors: Vendors) -> dict[str, Any]:
    """Static for one set of vendors, so built once."""
    from service.api import openapi_feed  # it builds on this module's helpers

    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": _info(),
        "tags": _tags(),
        "security": [{"bearerAuth": []}],
        "paths": {
            **operational_paths(),
            **run_paths(vendors),
            **subscription_paths(),
            **openapi_feed.paths(vendors),
        },
        "webhooks": webhooks(),
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "`Authorization: Bearer <secret>`, a key from HOOKBRIDGE_API_KEYS.",
                }
            },
            "schemas": openapi_feed.schemas(component_schemas(vendors)),
            "responses": component_responses(),
            "headers": component_headers(),
        },
    }
