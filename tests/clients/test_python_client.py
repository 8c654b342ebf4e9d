"""The document as a Python team uses it: ``openapi-python-client`` generates a client from the live
``/openapi.json`` without a warning, and that client registers a subscription, submits a run to each
vendor (JSON and multipart), reads a typed error and fetches a result."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ALICE, Receiver, StackFactory

GENERATOR = Path(sys.executable).parent / "openapi-python-client"
PACKAGE = "hookbridge_generated_client"
ARGS = ("--output-path", PACKAGE, "--config", "config.yaml")


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def _generate(where: Path, document: str) -> None:
    (where / "openapi.json").write_text(document)
    (where / "config.yaml").write_text("post_hooks: []\n")  # no ruff run over the generated code
    done = subprocess.run(
        [*(str(GENERATOR), "generate", "--path", "openapi.json", "--meta", "none"), *ARGS],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Warning" not in output and "Unable" not in output, output


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


async def test_a_generated_client_drives_the_api(
    make_stack: StackFactory, receiver: Receiver, generated: Path
) -> None:
    stack = await make_stack()
    await asyncio.to_thread(_generate, generated, (await stack.api.get("/openapi.json")).text)
    m = _module("models")
    client = _module("client").AuthenticatedClient(base_url=stack.api_url, token=ALICE)
    create_subscription = _module("api.subscriptions.create_subscription")
    create_run = _module("api.runs.create_run")
    get_run = _module("api.runs.get_run")
    get_result = _module("api.runs.get_run_result")

    sub = await create_subscription.asyncio(client=client, body=m.SubscriptionCreate(url=receiver.url))
    assert isinstance(sub, m.SubscriptionWithSecret) and sub.secret.startswith("whsec_")

    by_url = m.DocumentByURL(url="https://example.com/invoice.pdf")
    inline = m.DocumentByContent(
        content_base64="JVBERi0xLjQK", filename="a.pdf", media_type="application/pdf"
    )
    bodies: list[Any] = [
        m.NutrientRunRequest(vendor="nutrient", document=by_url, options=m.NutrientOptions()),
        m.CloudsquidRunRequest(vendor="cloudsquid", document=inline),
        m.UptiqRunRequest(vendor="uptiq", document=by_url, options=m.UptiqOptions(document_type="Invoice")),
    ]
    for vendor, part in (
        ("nutrient", m.NutrientRunRequestPart(vendor="nutrient")),
        ("cloudsquid", m.CloudsquidRunRequestPart(vendor="cloudsquid")),
        ("uptiq", m.UptiqRunRequestPart(vendor="uptiq", options=m.UptiqOptions(document_type="W2"))),
    ):
        file = _module("types").File(
            payload=b"%PDF-1.4 " + vendor.encode(), file_name="a.pdf", mime_type="application/pdf"
        )
        bodies.append(m.CreateRunFilesBody(file=file, request=part))
    runs = [await create_run.asyncio(client=client, body=body) for body in bodies]
    assert all(isinstance(run, m.Run) for run in runs), runs
    assert sorted(run.vendor for run in runs) == sorted(["nutrient", "cloudsquid", "uptiq"] * 2)

    refused = await create_run.asyncio_detailed(
        client=client, body=m.UptiqRunRequest(vendor="uptiq", document=by_url, options=m.UptiqOptions())
    )
    problem = refused.parsed
    assert refused.status_code == 422 and isinstance(problem, m.Problem)
    assert problem.code == m.ProblemCode.VALIDATION_ERROR and problem.errors[0].pointer.startswith("/options")

    done = await stack.wait_status(runs[0].id, "succeeded")
    assert (await get_run.asyncio(run_id=done["id"], client=client)).status == m.RunStatus.SUCCEEDED
    result = await get_result.asyncio_detailed(run_id=done["id"], client=client)
    assert result.status_code == 200 and isinstance(result.parsed, m.GetRunResultResponse200)
    await client.get_async_httpx_client().aclose()
