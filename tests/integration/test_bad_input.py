"""Bad input gets its RFC 9457 problem with the documented status and ``code``, and writes nothing."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis

from tests.conftest import ALICE, BOB, Stack, StackFactory

DOC = {
    "content_base64": base64.b64encode(b"%PDF-1.4 hello").decode(),
    "filename": "a.pdf",
    "media_type": "application/pdf",
}
GOOD = {"vendor": "nutrient", "document": DOC}


def snapshot(url: str) -> dict[bytes, bytes]:
    client = redis.Redis.from_url(url)
    try:
        return {key: client.dump(key) or b"" for key in client.keys("*")}
    finally:
        client.close()


def _json(body: Any) -> dict[str, Any]:
    return {"content": json.dumps(body).encode(), "headers": {"content-type": "application/json"}}


CASES: list[tuple[str, str, str, dict[str, Any], dict[str, str], int, str]] = [
    # id, method, path, request kwargs, extra headers, status, code
    (
        "invalid-json",
        "POST",
        "/v1/runs",
        {"content": b"{not json", "headers": {"content-type": "application/json"}},
        {},
        400,
        "invalid_json",
    ),
    ("not-an-object", "POST", "/v1/runs", _json([1, 2]), {}, 400, "invalid_json"),
    (
        "too-deep",
        "POST",
        "/v1/runs",
        _json({"vendor": "nutrient", "document": DOC, "options": json.loads("[" * 40 + "]" * 40)}),
        {},
        400,
        "invalid_json",
    ),
    ("no-vendor", "POST", "/v1/runs", _json({"document": DOC}), {}, 422, "validation_error"),
    (
        "unknown-vendor",
        "POST",
        "/v1/runs",
        _json({"vendor": "acme", "document": DOC}),
        {},
        422,
        "unknown_vendor",
    ),
    (
        "bad-operation",
        "POST",
        "/v1/runs",
        _json({**GOOD, "vendor": "uptiq", "operation": "split"}),
        {},
        422,
        "validation_error",
    ),
    ("no-document", "POST", "/v1/runs", _json({"vendor": "nutrient"}), {}, 422, "validation_error"),
    (
        "both-url-and-content",
        "POST",
        "/v1/runs",
        _json({"vendor": "nutrient", "document": {**DOC, "url": "https://x.test/a.pdf"}}),
        {},
        422,
        "validation_error",
    ),
    (
        "bad-base64",
        "POST",
        "/v1/runs",
        _json({"vendor": "nutrient", "document": {"content_base64": "***"}}),
        {},
        422,
        "validation_error",
    ),
    (
        "document-too-large",
        "POST",
        "/v1/runs",
        _json({"vendor": "nutrient", "document": {"content_base64": base64.b64encode(b"x" * 5000).decode()}}),
        {},
        413,
        "document_too_large",
    ),
    (
        "body-too-large",
        "POST",
        "/v1/runs",
        {"content": b" " * 400_000, "headers": {"content-type": "application/json"}},
        {},
        413,
        "document_too_large",
    ),
    ("unknown-field", "POST", "/v1/runs", _json({**GOOD, "colour": "red"}), {}, 422, "validation_error"),
    (
        "metadata-too-many",
        "POST",
        "/v1/runs",
        _json({**GOOD, "metadata": {f"k{i}": "v" for i in range(51)}}),
        {},
        422,
        "validation_error",
    ),
    (
        "metadata-not-strings",
        "POST",
        "/v1/runs",
        _json({**GOOD, "metadata": {"n": 1}}),
        {},
        422,
        "validation_error",
    ),
    (
        "unknown-subscription",
        "POST",
        "/v1/runs",
        _json({**GOOD, "subscription_ids": ["sub_NOPE"]}),
        {},
        422,
        "validation_error",
    ),
    (
        "media-type",
        "POST",
        "/v1/runs",
        {"content": b"vendor=nutrient", "headers": {"content-type": "text/plain"}},
        {},
        415,
        "unsupported_media_type",
    ),
    (
        "multipart-without-file",
        "POST",
        "/v1/runs",
        {"files": {"request": (None, json.dumps({"vendor": "nutrient"}))}},
        {},
        422,
        "validation_error",
    ),
    (
        "bad-idempotency-key",
        "POST",
        "/v1/runs",
        _json(GOOD),
        {"Idempotency-Key": "x" * 300},
        422,
        "validation_error",
    ),
    ("no-key", "POST", "/v1/runs", _json(GOOD), {"Authorization": ""}, 401, "unauthorized"),
    ("wrong-key", "POST", "/v1/runs", _json(GOOD), {"Authorization": "Bearer nope"}, 401, "unauthorized"),
    ("wrong-scheme", "GET", "/v1/runs", {}, {"Authorization": f"Basic {ALICE}"}, 401, "unauthorized"),
    ("unknown-run", "GET", "/v1/runs/run_UNKNOWN", {}, {}, 404, "not_found"),
    ("bad-limit", "GET", "/v1/runs?limit=0", {}, {}, 422, "validation_error"),
    ("bad-status-filter", "GET", "/v1/runs?status=done", {}, {}, 422, "validation_error"),
    ("bad-cursor", "GET", "/v1/runs?cursor=%%%", {}, {}, 422, "validation_error"),
    (
        "blocked-callback",
        "POST",
        "/v1/subscriptions",
        _json({"url": "http://169.254.169.254/latest"}),
        {},
        422,
        "callback_url_not_allowed",
    ),
    (
        "mapped-v6-callback",
        "POST",
        "/v1/subscriptions",
        _json({"url": "http://[::ffff:169.254.169.254]/"}),
        {},
        422,
        "callback_url_not_allowed",
    ),
    (
        "ftp-callback",
        "POST",
        "/v1/subscriptions",
        _json({"url": "ftp://example.com/"}),
        {},
        422,
        "callback_url_not_allowed",
    ),
    (
        "bad-event-type",
        "POST",
        "/v1/subscriptions",
        _json({"url": "http://10.1.2.3/x", "event_types": ["run.done"]}),
        {},
        422,
        "validation_error",
    ),
    # Unicode digits pass Python's \d, and Lua's tonumber then gave nil: a 500 before issue 23.
    (
        "arabic-indic-iterator",
        "GET",
        "/v1/events?iterator=\u0661\u0662\u0663-0",
        {},
        {},
        422,
        "invalid_iterator",
    ),
    ("fullwidth-iterator", "GET", "/v1/events?iterator=\uff11-0", {}, {}, 422, "invalid_iterator"),
    (
        "fullwidth-last-event-id",
        "GET",
        "/v1/events/stream?last_event_id=\uff11-0",
        {},
        {},
        422,
        "invalid_iterator",
    ),
    (
        "multipart-long-part-type",
        "POST",
        "/v1/runs",
        {
            "files": {
                "file": ("a.pdf", b"%PDF-1.4 x", "application/" + "x" * 3000),
                "request": (None, json.dumps({"vendor": "nutrient"})),
            }
        },
        {},
        422,
        "validation_error",
    ),
    (
        "multipart-control-filename",
        "POST",
        "/v1/runs",
        {
            "files": {
                "file": ("a\x01b\x7f.pdf", b"%PDF-1.4 x", "application/pdf"),
                "request": (None, json.dumps({"vendor": "nutrient"})),
            }
        },
        {},
        422,
        "validation_error",
    ),
    (
        "json-control-filename",
        "POST",
        "/v1/runs",
        _json({**GOOD, "document": {**DOC, "filename": "a\x00.pdf"}}),
        {},
        422,
        "validation_error",
    ),
    ("unknown-route", "GET", "/v1/nothing", {}, {}, 404, "not_found"),
    ("wrong-method", "DELETE", "/v1/runs", {}, {}, 405, "method_not_allowed"),
]


@pytest.fixture
async def api_only(make_stack: StackFactory) -> Stack:
    # The callback networks are the defaults here, so loopback is blocked as in production.
    return await make_stack(
        worker=False, HOOKBRIDGE_MAX_DOCUMENT_BYTES="2048", HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS=""
    )


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "headers", "status", "code"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
async def test_bad_input_is_refused_and_writes_nothing(
    api_only: Stack,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    await api_only.submit("nutrient")  # something in Redis, so "nothing changed" means something
    before = snapshot(api_only.redis_url)
    request_headers = {**kwargs.get("headers", {}), **headers}
    response = await api_only.api.request(method, path, **{**kwargs, "headers": request_headers})
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == code and problem["status"] == status and problem["title"] and problem["detail"]
    assert snapshot(api_only.redis_url) == before
    assert ALICE not in response.text and BOB not in response.text


async def test_another_clients_run_is_not_found(api_only: Stack) -> None:
    run = await api_only.submit("nutrient")
    before = snapshot(api_only.redis_url)
    for method, path in (("GET", ""), ("POST", "/cancel"), ("GET", "/result"), ("GET", "/events")):
        response = await api_only.bob.request(method, f"/v1/runs/{run['id']}{path}")
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert (await api_only.bob.get("/v1/runs")).json()["data"] == []
    assert snapshot(api_only.redis_url) == before


async def test_idempotency_replay_returns_the_first_run_and_reuse_is_a_conflict(api_only: Stack) -> None:
    headers = {"Idempotency-Key": "order-1001"}
    first = await api_only.api.post("/v1/runs", json=GOOD, headers=headers)
    assert first.status_code == 202 and "Idempotency-Replayed" not in first.headers
    before = snapshot(api_only.redis_url)

    replay = await api_only.api.post("/v1/runs", json=GOOD, headers=headers)
    assert replay.status_code == 202 and replay.headers["Idempotency-Replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]

    reuse = await api_only.api.post("/v1/runs", json={**GOOD, "metadata": {"x": "y"}}, headers=headers)
    assert reuse.status_code == 409 and reuse.json()["code"] == "idempotency_key_reused"
    assert snapshot(api_only.redis_url) == before

    # The key is scoped to the client: bob's same key is a new run.
    other = await api_only.bob.post("/v1/runs", json=GOOD, headers=headers)
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]


async def test_a_run_over_multipart_is_accepted(api_only: Stack) -> None:
    response = await api_only.api.post(
        "/v1/runs",
        files={
            "file": ("scan.pdf", b"%PDF-1.4 multipart", "application/pdf"),
            "request": (
                None,
                json.dumps({"vendor": "nutrient", "operation": "parse", "metadata": {"k": "v"}}),
            ),
        },
    )
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/v1/runs/{response.json()['id']}"
    assert response.json()["operation"] == "parse"


async def test_cancel_of_an_ended_run_is_a_conflict(stack: Stack) -> None:
    run = await stack.submit("nutrient")
    await stack.wait_status(run["id"], "succeeded")
    response = await stack.api.post(f"/v1/runs/{run['id']}/cancel")
    assert response.status_code == 409 and response.json()["code"] == "run_not_cancelable"
    assert (await stack.api.get(f"/v1/runs/{run['id']}/result")).status_code == 200


async def test_result_of_a_running_run_is_not_ready(api_only: Stack) -> None:
    run = await api_only.submit("nutrient")
    response = await api_only.api.get(f"/v1/runs/{run['id']}/result")
    assert response.status_code == 404 and response.json()["code"] == "result_not_ready"


async def test_405_names_every_method_of_the_path(api_only: Stack) -> None:
    response = await api_only.api.put("/v1/subscriptions/sub_x")
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"
    assert set(response.headers["allow"].split(", ")) >= {"GET", "PATCH", "DELETE"}


async def test_nan_in_json_is_not_json(api_only: Stack) -> None:
    body = b'{"vendor": "nutrient", "document": {"url": "https://x.test/a.pdf"}, "options": {"t": NaN}}'
    response = await api_only.api.post("/v1/runs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({**GOOD, "document": {"url": 5}}, "/document/url"),
        ({**GOOD, "document": {"url": "ftp:nope"}}, "/document/url"),
        ({**GOOD, "document": {**DOC, "content_base64": "!!!!"}}, "/document/content_base64"),
    ],
)
async def test_a_422_has_one_error_per_field_pointing_into_the_body(
    api_only: Stack, body: dict[str, Any], pointer: str
) -> None:
    response = await api_only.api.post("/v1/runs", json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert [e["pointer"] for e in errors] == [pointer], errors  # no union tags, no second error


async def test_a_bad_event_type_is_one_error_at_its_index(api_only: Stack) -> None:
    response = await api_only.api.post(
        "/v1/subscriptions", json={"url": "http://10.1.2.3/x", "event_types": ["run.done"]}
    )
    assert [e["pointer"] for e in response.json()["errors"]] == ["/event_types/0"], response.text


async def test_a_multipart_file_part_is_checked_like_the_json_document(api_only: Stack) -> None:
    response = await api_only.api.post(
        "/v1/runs",
        files={
            "file": ("a.pdf", b"%PDF-1.4 x", "application/" + "x" * 3000),
            "request": (None, json.dumps({"vendor": "nutrient"})),
        },
    )
    assert response.status_code == 422
    assert [e["pointer"] for e in response.json()["errors"]] == ["/file/media_type"]
