"""A vendor installed but not configured (contract §10): the API starts, lists it, and refuses a submit to
it with ``422 vendor_not_configured`` naming what is unset; nothing is written. Every installed vendor is
in the API's validation and OpenAPI document, generically (azure_di's options as its spec declares them)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import redis

from service.vendors import registry
from tests.conftest import StackFactory

DOC = {"content_base64": base64.b64encode(b"%PDF-1.4 x").decode(), "filename": "a.pdf"}


def keys(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return sorted(client.keys("*"))
    finally:
        client.close()


async def test_an_unconfigured_vendor_is_refused_naming_what_is_missing(make_stack: StackFactory) -> None:
    # "" is unset (the loader's rule for an empty text setting).
    stack = await make_stack(worker=False, HOOKBRIDGE_AZURE_DI_API_KEY="", HOOKBRIDGE_AZURE_DI_BASE_URL="")
    before = keys(stack.redis_url)
    answer = await stack.api.post(
        "/v1/runs", json={"vendor": "azure_di", "document": DOC, "options": {"model_id": "prebuilt-read"}}
    )
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "vendor_not_configured"
    assert problem["missing"] == ["HOOKBRIDGE_AZURE_DI_BASE_URL", "HOOKBRIDGE_AZURE_DI_API_KEY"]
    assert "HOOKBRIDGE_AZURE_DI_API_KEY" in problem["detail"]
    assert keys(stack.redis_url) == before
    # The others still take runs, and the API lists the vendor as installed.
    ok = await stack.api.post("/v1/runs", json={"vendor": "nutrient", "document": DOC})
    assert ok.status_code == 202, ok.text
    doc = (await stack.api.get("/openapi.json")).json()
    assert "azure_di" in doc["components"]["schemas"]["Vendor"]["enum"]
    assert "vendor_not_configured" in doc["components"]["schemas"]["ProblemCode"]["enum"]


async def test_multipart_submits_are_refused_the_same(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_AZURE_DI_API_KEY="")
    answer = await stack.api.post(
        "/v1/runs",
        files={
            "file": ("a.pdf", b"%PDF-1.4", "application/pdf"),
            "request": (
                None,
                '{"vendor": "azure_di", "options": {"model_id": "prebuilt-read"}}',
                "application/json",
            ),
        },
    )
    assert answer.status_code == 422 and answer.json()["code"] == "vendor_not_configured", answer.text
    assert answer.json()["missing"] == ["HOOKBRIDGE_AZURE_DI_API_KEY"]


async def test_every_installed_vendor_is_in_the_openapi_document(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    doc = (await stack.api.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    installed = list(registry.vendors())
    assert schemas["Vendor"]["enum"] == installed
    mapping = schemas["RunRequest"]["discriminator"]["mapping"]
    assert set(mapping) == set(installed)
    azure = schemas[mapping["azure_di"].rsplit("/", 1)[1]]
    assert mapping["azure_di"].endswith("/AzureDiRunRequest")
    options = azure["properties"]["options"]
    options = schemas[options["$ref"].rsplit("/", 1)[1]] if "$ref" in options else options
    assert options["required"] == ["model_id"]
    assert set(options["properties"]) == {
        "model_id",
        "pages",
        "locale",
        "features",
        "query_fields",
        "output_content_format",
    }
    examples = doc["paths"]["/v1/runs"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert {e["value"]["vendor"] for e in examples.values()} <= set(installed)
    assert any(e["value"]["vendor"] == "azure_di" for e in examples.values())


@pytest.mark.parametrize(
    ("options", "pointer"),
    [
        ({}, "/options/model_id"),
        ({"model_id": "-x"}, "/options/model_id"),
        ({"model_id": "prebuilt-read", "pages": "1-"}, "/options/pages"),
        ({"model_id": "prebuilt-read", "features": ["ocr"]}, "/options/features/0"),
        ({"model_id": "prebuilt-read", "output_content_format": "html"}, "/options/output_content_format"),
        ({"model_id": "prebuilt-read", "stringIndexType": "utf16CodeUnit"}, "/options/stringIndexType"),
    ],
)
async def test_azure_di_options_are_validated_at_the_api(
    make_stack: StackFactory, options: dict[str, Any], pointer: str
) -> None:
    stack = await make_stack(worker=False)
    answer = await stack.api.post(
        "/v1/runs", json={"vendor": "azure_di", "document": DOC, "options": options}
    )
    assert answer.status_code == 422 and answer.json()["code"] == "validation_error", answer.text
    assert pointer in [e["pointer"] for e in answer.json()["errors"]], answer.text
