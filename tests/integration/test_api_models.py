"""The declared models at work: errors[] names each bad field with a JSON pointer and the bad value, the
document states the limits the server enforces (a non-default one too), an unknown query parameter is
refused, a vendor's options are checked at submit, and a run that ended without a result says so."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from tests.conftest import Stack, StackFactory


def _errors(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["code"] == "validation_error"
    return {e.get("pointer", e["field"]): e["message"] for e in problem["errors"]}


async def test_errors_name_every_bad_field_with_a_pointer(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    body: dict[str, Any] = {
        "vendor": "nutrient",
        "operation": "nope",
        "document": {"url": "https://x.test/a.pdf", "filename": ""},
        "metadata": {"n": 1},
        "zero_retention": "yes",
    }
    errors = _errors(await stack.api.post("/v1/runs", json=body))
    assert set(errors) == {"/operation", "/document/filename", "/metadata/n", "/zero_retention"}
    assert '"nope"' in errors["/operation"] and '"yes"' in errors["/zero_retention"]

    typo = await stack.api.post(
        "/v1/subscriptions", json={"url": "http://10.1.2.3/x", "event_types": ["run.done"]}
    )
    assert any('"run.done"' in message for message in _errors(typo).values())

    no_request = await stack.api.post("/v1/runs", files={"file": ("a.pdf", b"%PDF", "application/pdf")})
    assert "'request' part" in _errors(no_request)["/request"]
    bad_part = await stack.api.post(
        "/v1/runs",
        files={
            "file": ("a.pdf", b"%PDF", "application/pdf"),
            "request": (None, json.dumps({"vendor": "nutrient", "colour": 1})),
        },
    )
    assert set(_errors(bad_part)) == {"/request/colour"}


async def test_the_document_states_the_running_limits(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_MAX_DOCUMENT_BYTES="3000")
    schemas = (await stack.api.get("/openapi.json")).json()["components"]["schemas"]
    assert schemas["DocumentByContent"]["properties"]["content_base64"]["maxLength"] == 4000
    assert schemas["Metadata"]["maxProperties"] == stack.settings.max_metadata_pairs
    document = {"content_base64": base64.b64encode(b"x" * 3001).decode()}
    response = await stack.api.post("/v1/runs", json={"vendor": "nutrient", "document": document})
    assert response.status_code == 413 and response.json()["code"] == "document_too_large"


async def test_unknown_query_parameters_are_refused(stack: Stack) -> None:
    response = await stack.api.get("/v1/runs", params={"state": "x"})
    assert "state" in _errors(response)
    assert (await stack.api.get("/v1/subscriptions", params={"page": "2"})).status_code == 422


async def test_uptiq_without_a_document_type_is_refused_at_submit(stack: Stack) -> None:
    body = {"vendor": "uptiq", "document": {"url": "https://x.test/a.pdf"}}
    assert "/options" in _errors(await stack.api.post("/v1/runs", json=body))
    body["options"] = {"documentType": "W2", "model": "m-2"}  # Uptiq's other body fields pass through
    assert (await stack.api.post("/v1/runs", json=body)).status_code == 202


async def test_the_result_of_a_failed_run_is_its_own_code(stack: Stack) -> None:
    run = await stack.submit("nutrient", filename="fail-me.pdf")
    await stack.wait_status(run["id"], "failed")
    response = await stack.api.get(f"/v1/runs/{run['id']}/result")
    assert response.status_code == 409 and response.json()["code"] == "run_not_succeeded"
