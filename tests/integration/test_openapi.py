"""The OpenAPI document: valid OpenAPI 3.1, in step with the app's routes, and true of the live API.

The last part is schemathesis against the API on a real port (uvicorn in a thread of its own, over a
real Redis): every operation gets its documented examples, boundary values (coverage phase) and a
bounded number of generated requests, valid and invalid; then a bounded stateful run follows the
document's links (create a subscription or run, then use its id). No answer may be a 5xx, and every
answer must be documented: status code, content type, headers and body schema. Besides: what a worker
writes (progress, errors, attempts) and the signed callbacks are checked against the document, and the
inputs that once answered 500 are replayed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import hypothesis
import jsonschema_rs
import pytest
import requests
import schemathesis
import uvicorn
from hypothesis import HealthCheck
from hypothesis import strategies as st
from schemathesis.specs.openapi.definitions import OPENAPI_31
from starlette.routing import Route

from service.api import models
from service.api.app import create_app
from service.api.openapi import document as build_document
from service.dev.embedded_redis import free_port
from service.vendors.registry import load_settings
from tests.conftest import ALICE, Receiver, Stack, base_env, eventually

# CI runs 25 examples per operation, derandomized (the same every run, about 30 s in all). For a deeper,
# random search: HOOKBRIDGE_OPENAPI_EXAMPLES=500 pytest tests/integration/test_openapi.py
DEEP = os.environ.get("HOOKBRIDGE_OPENAPI_EXAMPLES")
MAX_EXAMPLES = int(DEEP or 25)
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    # Stateful: a deleted subscription stays gone. (Not ensure_resource_availability: a new run's
    # result is a documented 404 result_not_ready.)
    "use_after_free",
]
METHODS = {"get", "put", "post", "patch", "delete", "head", "options", "trace"}
_DOCUMENT = build_document(models.build(load_settings(base_env("redis://127.0.0.1:9"))))


def document() -> dict[str, Any]:
    """The document of the default settings (a copy: callers may change it)."""
    return json.loads(json.dumps(_DOCUMENT))


# The document on its own ---------------------------------------------------------------------------


def _operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method) for path, item in doc["paths"].items() for method in item if method in METHODS}


def _routes() -> set[tuple[str, str]]:
    app = create_app(load_settings(base_env("redis://127.0.0.1:9")))
    out = set()
    for route in app.routes:
        assert isinstance(route, Route)
        if not route.include_in_schema:  # the console's page and files (service/console/)
            continue
        methods = route.methods or {m.upper() for m in METHODS if hasattr(route.endpoint, m)}
        for method in methods:
            if method != "HEAD":  # Starlette adds HEAD to every GET
                out.add((route.path, method.lower()))
    return out


def test_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    errors = [
        f"{e.instance_path}: {e.message}"
        for e in jsonschema_rs.Draft202012Validator(OPENAPI_31).iter_errors(doc)
    ]
    assert not errors, errors
    for name, schema in doc["components"]["schemas"].items():
        assert jsonschema_rs.meta.is_valid(schema), name
    # Every local reference resolves.
    for pointer in _refs(doc):
        node: Any = doc
        for part in pointer.removeprefix("#/").split("/"):
            assert isinstance(node, dict) and part in node, f"unresolved $ref {pointer}"
            node = node[part]
    # Operation ids are unique; schemathesis loads it too.
    ids = [op["operationId"] for item in doc["paths"].values() for m, op in item.items() if m in METHODS]
    assert len(ids) == len(set(ids))
    schemathesis.openapi.from_dict(doc).validate()


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref":
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def test_document_covers_every_route_and_nothing_else() -> None:
    routes = _routes()
    documented = _operations(document())
    assert routes - documented == set(), "routes missing from the OpenAPI document"
    assert documented - routes == set(), "documented operations the app does not serve"


def test_document_names_the_contract() -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    for name in (
        "Run",
        "RunError",
        "Progress",
        "Subscription",
        "Delivery",
        "DeliveryAttempt",
        "Event",
        "Problem",
    ):
        assert name in schemas
    bearer = doc["components"]["securitySchemes"]["bearerAuth"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    assert set(doc["webhooks"]) == {
        "run.submitted",
        "run.progress",
        "run.succeeded",
        "run.failed",
        "run.canceled",
        "subscription.test",
    }
    headers = {p["name"] for p in doc["webhooks"]["run.succeeded"]["post"]["parameters"]}
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= headers
    submit = doc["paths"]["/v1/runs"]["post"]
    assert set(submit["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    assert "Location" in submit["responses"]["202"]["headers"]
    assert "WWW-Authenticate" in doc["components"]["responses"]["Problem401"]["headers"]
    assert "Retry-After" in doc["components"]["responses"]["Problem503"]["headers"]
    codes = set(schemas["ProblemCode"]["enum"])
    for response in doc["components"]["responses"].values():  # plain Problem references, no restated status
        problem = response["content"]["application/problem+json"]["schema"]
        assert problem == {"$ref": "#/components/schemas/Problem"}
    assert {
        "unauthorized",
        "not_found",
        "invalid_json",
        "validation_error",
        "unknown_vendor",
        "document_too_large",
        "unsupported_media_type",
        "idempotency_key_reused",
        "run_not_cancelable",
        "result_not_ready",
        "result_gone",
        "callback_url_not_allowed",
        "rate_limited",
    } <= codes


async def test_the_document_is_served(make_stack: Any) -> None:
    stack = await make_stack(worker=False)
    async with httpx.AsyncClient(base_url=stack.api_url) as anonymous:
        response = await anonymous.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == document()


# Real data against the document: a worker, the simulator and a receiver --------------------------


def _validator(name: str) -> jsonschema_rs.Draft202012Validator:
    """A validator for ``#/components/schemas/<name>``; the components beside it resolve references."""
    root = {"$ref": f"#/components/schemas/{name}", "components": document()["components"]}
    return jsonschema_rs.Draft202012Validator(root, validate_formats=True)


def _conforms(name: str, instance: Any) -> None:
    errors = [f"{e.instance_path}: {e.message}" for e in _validator(name).iter_errors(instance)]
    assert not errors, (name, errors)


async def _now(value: Any) -> Any:
    return value


async def test_runs_deliveries_and_callbacks_match_the_document(stack: Stack, receiver: Receiver) -> None:
    """What a worker writes (progress, errors, results, attempts) and what the receiver gets are what the
    document says, for a success, a vendor failure, a cancel and a test event; one delivery fails once."""
    receiver.answers = [500]
    sub = await stack.subscribe(receiver.url, event_types=["run.*"], metadata={"team": "billing"})
    ok = await stack.submit("nutrient", metadata={"order_id": "A-1001"})
    failing = await stack.submit("nutrient", filename="fail-me.pdf")
    canceled = (await stack.api.post(f"/v1/runs/{(await stack.submit('uptiq'))['id']}/cancel")).json()
    await stack.wait_status(ok["id"], "succeeded")
    await stack.wait_status(failing["id"], "failed")
    assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    wanted = {"run.succeeded", "run.failed", "run.canceled", "subscription.test"}
    await eventually(
        lambda: _now(wanted <= {e["type"] for e in receiver.events()}), what="the callbacks", timeout=30
    )

    for received in receiver.received:
        event = received.json()
        payload = document()["webhooks"][event["type"]]["post"]["requestBody"]["content"]["application/json"]
        _conforms(payload["schema"]["$ref"].rsplit("/", 1)[1], event)
        for param in document()["webhooks"][event["type"]]["post"]["parameters"]:
            value = received.headers[param["name"]]
            assert jsonschema_rs.Draft202012Validator(param["schema"]).is_valid(value), (param, value)

    runs = (await stack.api.get("/v1/runs")).json()
    _conforms("RunList", runs)
    assert {r["status"] for r in runs["data"]} == {"succeeded", "failed", "canceled"}
    for run in (ok, failing, canceled):
        _conforms("Run", run)
        _conforms("RunDetail", (await stack.api.get(f"/v1/runs/{run['id']}")).json())
        _conforms("EventList", (await stack.api.get(f"/v1/runs/{run['id']}/events")).json())
    assert (await stack.api.get(f"/v1/runs/{ok['id']}/result")).status_code == 200

    deliveries = (await stack.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()
    _conforms("DeliveryList", deliveries)
    codes = []
    for delivery in deliveries["data"]:
        detail = (await stack.api.get(f"/v1/deliveries/{delivery['id']}")).json()
        _conforms("DeliveryWithAttempts", detail)
        codes += [attempt["status_code"] for attempt in detail["attempt_log"]]
    assert 500 in codes and 204 in codes
    _conforms("Subscription", (await stack.api.get(f"/v1/subscriptions/{sub['id']}")).json())
    _conforms(
        "SubscriptionWithSecret",
        (await stack.api.post(f"/v1/subscriptions/{sub['id']}/rotate-secret")).json(),
    )


# The live API -------------------------------------------------------------------------------------


@contextlib.contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """uvicorn on a free port in a thread with its own event loop, so that schemathesis, which is
    synchronous, can call it from the test without blocking the server."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="openapi-test-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API did not start"
        thread.join(timeout=0.01)  # returns at once if the server thread died
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def live_api(redis_url: str) -> Iterator[str]:
    # Streams end after a second (SSE_MAX_S), so that their answers can be read whole and checked per event.
    settings = load_settings(base_env(redis_url, HOOKBRIDGE_SSE_MAX_S="1s", HOOKBRIDGE_SSE_HEARTBEAT_S="1s"))
    with serve_in_thread(create_app(settings)) as url:
        yield url


@pytest.fixture
def http(live_api: str) -> Iterator[requests.Session]:
    """One session for all of a test's calls, closed before the server stops (no unclosed sockets)."""
    with requests.Session() as session:
        yield session


def _config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "headers": {"Authorization": f"Bearer {ALICE}"},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
            "generation": {"mode": "all", "max-examples": MAX_EXAMPLES, "database": "none"},
        }
    )


# A copy: loading may rewrite the document it is given, and document() is cached.
# Not fuzzed here: the long-poll (it may take 30 s a request); tests/integration/test_feed.py and
# tests/hostile/test_feed_bounds.py send it hostile input. The streams are (they end after SSE_MAX_S), each
# event checked against its schema.
schema = schemathesis.openapi.from_dict(json.loads(json.dumps(document())), config=_config()).exclude(
    path_regex=r"^/v1/events$"
)
FUZZ_SETTINGS = hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=DEEP is None,
    suppress_health_check=list(HealthCheck),
)


# Nothing is delivered (no worker runs); the address only has to pass the callback URL policy.
RECEIVER = "http://127.0.0.1:9/hooks"


@schema.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    """Makes half the generated callback URLs ones that resolve, and half the run submissions name
    no subscriptions, so that subscriptions and runs get created (and linked operations find them)
    even though random host names do not resolve and random subscription ids do not exist."""
    operation = context.operation
    if operation is None or not isinstance(body, dict):
        return st.just(body)
    if operation.path.startswith("/v1/subscriptions") and isinstance(body.get("url"), str):
        return st.sampled_from([body, {**body, "url": RECEIVER}])
    if operation.path == "/v1/runs" and body.get("subscription_ids"):
        return st.sampled_from([body, {k: v for k, v in body.items() if k != "subscription_ids"}])
    return st.just(body)


@schema.parametrize()
@FUZZ_SETTINGS
def test_every_answer_is_documented(case: schemathesis.Case, live_api: str, http: requests.Session) -> None:
    case.call_and_validate(base_url=live_api, session=http)


def test_stateful_answers_are_documented(live_api: str, http: requests.Session) -> None:
    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": live_api, "session": http}

    Machine.run(
        settings=hypothesis.settings(
            FUZZ_SETTINGS,
            max_examples=MAX_EXAMPLES + 5,
            stateful_step_count=10,
        )
    )


# Inputs that once answered 500 (or worse than documented); each must now get a documented answer.
NAN_CURSOR = base64.urlsafe_b64encode(b"nan|run_x").decode().rstrip("=")
REGRESSIONS = [
    pytest.param(
        "POST", "/v1/subscriptions", {"body": {"url": "http://a..b/"}}, 422, id="callback-host-empty-label"
    ),
    pytest.param(
        "POST",
        "/v1/subscriptions",
        {"body": {"url": f"http://{'a' * 64}.com/"}},
        422,
        id="callback-host-long-label",
    ),
    pytest.param(
        "POST",
        "/v1/runs",
        {"body": {"vendor": "nutrient", "document": {"content": 5}}},
        422,
        id="json-document-content-number",
    ),
    pytest.param(
        "POST",
        "/v1/runs",
        {"body": {"vendor": "nutrient", "document": {"content": "abc"}}},
        422,
        id="json-document-content-string",
    ),
    pytest.param(
        "POST",
        "/v1/runs",
        {"body": {"vendor": "nutrient", "document": {"url": "https://e.com/a"}, "metadata": {"a": "\udcff"}}},
        400,
        id="lone-surrogate-in-metadata",
    ),
    pytest.param(
        "POST",
        "/v1/subscriptions",
        {"body": {"url": RECEIVER, "description": "\udcff"}},
        400,
        id="lone-surrogate-in-description",
    ),
    pytest.param(
        "GET",
        "/v1/runs",
        {"query": {"cursor": NAN_CURSOR}},
        422,
        id="nan-cursor",
    ),
]


@pytest.mark.parametrize(("method", "path", "parts", "status"), REGRESSIONS)
def test_inputs_that_once_failed_get_documented_answers(
    live_api: str, http: requests.Session, method: str, path: str, parts: dict[str, Any], status: int
) -> None:
    operation = schema[path][method]
    if "body" in parts:
        parts = {**parts, "media_type": "application/json"}
    case = operation.Case(**parts)
    response = case.call_and_validate(
        base_url=live_api, session=http, headers={"Authorization": f"Bearer {ALICE}"}
    )
    assert response.status_code == status, response.text
