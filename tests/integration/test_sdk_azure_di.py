"""The official ``azure-ai-documentintelligence`` client drives the simulated Azure AI Document Intelligence
end to end over a real socket: a simulator that the vendor's own SDK cannot use is wrong.

The SDK is synchronous (``requests``), so each call runs in a thread while the simulator's uvicorn serves
from the test's event loop. It takes ``http://127.0.0.1:port`` as its endpoint: ``AzureKeyCredential`` puts
the key in ``Ocp-Apim-Subscription-Key`` whatever the scheme (only bearer tokens insist on https, and take
``enforce_https=False`` per call).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import pytest
from azure.ai.documentintelligence import DocumentIntelligenceClient
from azure.ai.documentintelligence.models import (
    AnalyzeDocumentRequest,
    AnalyzeResult,
    DocumentAnalysisFeature,
)
from azure.core.credentials import AccessToken, AzureKeyCredential
from azure.core.exceptions import HttpResponseError

from service.simulator import SimulatorConfig

KEY = "sim-azure-di-key"
T = TypeVar("T")


@pytest.fixture
def sim_config() -> SimulatorConfig:
    # Short runs; no 2 s poll floor unless a test sets one, so the SDK's 0.05 s polls are welcome.
    return SimulatorConfig(duration_s=(0.2, 0.3), seed=7, azure_di_retry_after="never", azure_di_min_poll_s=0)


def sdk(simulator: str, **kwargs: Any) -> DocumentIntelligenceClient:
    return DocumentIntelligenceClient(simulator, AzureKeyCredential(KEY), polling_interval=0.05, **kwargs)


async def in_thread(call: Callable[[], T]) -> T:
    return await asyncio.to_thread(call)


async def sim_patch(simulator: str, **changes: Any) -> None:
    async with httpx.AsyncClient() as client:
        (await client.patch(f"{simulator}/_sim/config", json=changes)).raise_for_status()


async def sim_log(simulator: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as client:
        entries: list[dict[str, Any]] = (
            await client.get(f"{simulator}/_sim/requests", params={"vendor": "azure_di"})
        ).json()["data"]
    return entries


async def test_analyze_by_url_gives_the_inline_result(simulator: str) -> None:
    url = "https://docs.example/invoice.pdf"
    client = sdk(simulator)
    poller = await in_thread(
        lambda: client.begin_analyze_document("prebuilt-invoice", AnalyzeDocumentRequest(url_source=url))
    )
    result: AnalyzeResult = await in_thread(poller.result)
    digest = hashlib.sha256(url.encode()).hexdigest()
    assert result.api_version == "2024-11-30"
    assert result.model_id == "prebuilt-invoice"
    assert result.content.startswith(f"Invoice INV-{digest[:6]}")
    assert result.pages and result.pages[0].page_number == 1
    assert result.documents is not None
    invoice_id = result.documents[0].fields["InvoiceId"]
    assert invoice_id.value_string == f"INV-{digest[:6]}"
    # The SDK read the result id from the absolute Operation-Location.
    operation_id = poller.details["operation_id"]
    log = await sim_log(simulator)
    assert next((e["method"], e["status"]) for e in log) == ("POST", 202)
    assert all(e["path"].endswith(operation_id) for e in log[1:]) and len(log) >= 2


async def test_analyze_raw_bytes_and_base64_with_query_options(simulator: str) -> None:
    content = b"%PDF-1.7 purchase order"
    client = sdk(simulator)
    by_bytes = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-layout",
            content,
            content_type="application/octet-stream",
            pages="1",
            features=[DocumentAnalysisFeature.QUERY_FIELDS],
            query_fields=["PONumber"],
            output_content_format="markdown",
        ).result()
    )
    assert by_bytes.content_format == "markdown"
    assert [page.page_number for page in by_bytes.pages] == [1]
    assert by_bytes.documents is not None
    assert by_bytes.documents[0].fields["PONumber"].value_string.startswith("PONumber-")
    by_base64 = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-layout", AnalyzeDocumentRequest(bytes_source=content)
        ).result()
    )
    digest = hashlib.sha256(content).hexdigest()
    assert f"INV-{digest[:6]}" in by_base64.content and f"INV-{digest[:6]}" in by_bytes.content


async def test_failed_analysis_is_an_error_of_the_poller(simulator: str) -> None:
    client = sdk(simulator)
    poller = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-read", AnalyzeDocumentRequest(url_source="https://docs.example/will-fail.pdf")
        )
    )
    with pytest.raises(HttpResponseError) as raised:
        await in_thread(poller.result)
    assert poller.status() == "failed"
    assert raised.value.error is not None and raised.value.error.code == "InvalidRequest"


async def test_delete_analyze_result_then_the_result_is_gone(simulator: str) -> None:
    client = sdk(simulator)
    poller = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-read", AnalyzeDocumentRequest(url_source="https://docs.example/a.pdf")
        )
    )
    await in_thread(poller.result)
    result_id = poller.details["operation_id"]
    await in_thread(lambda: client.delete_analyze_result("prebuilt-read", result_id))
    async with httpx.AsyncClient() as raw:
        gone = await raw.get(
            f"{simulator}/documentintelligence/documentModels/prebuilt-read/analyzeResults/{result_id}",
            params={"api-version": "2024-11-30"},
            headers={"Ocp-Apim-Subscription-Key": KEY},
        )
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "NotFound"


async def test_sdk_waits_as_retry_after_says_and_never_meets_the_poll_floor(simulator: str) -> None:
    await sim_patch(
        simulator,
        azure_di_retry_after="always",
        azure_di_retry_after_s=1,
        azure_di_min_poll_s=1.0,
        azure_di_running_polls=1,
    )
    client = sdk(simulator)
    started = time.monotonic()
    result = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-read", AnalyzeDocumentRequest(url_source="https://docs.example/b.pdf")
        ).result()
    )
    assert result.model_id == "prebuilt-read"
    log = await sim_log(simulator)
    gets = [e for e in log if e["method"] == "GET"]
    assert len(gets) >= 2 and all(e["status"] == 200 for e in gets)  # no 429: the SDK waited 1 s each time
    assert all(b["t"] - a["t"] >= 0.95 for a, b in itertools.pairwise(gets))
    # The SDK polls once at once after the 202 (azure-core's LROBasePolling), then waits as told.
    assert time.monotonic() - started >= 1.0


async def test_sdk_recovers_from_429_without_retry_after(simulator: str) -> None:
    await sim_patch(
        simulator, azure_di_min_poll_s=0.5, azure_di_429_retry_after="never", azure_di_running_polls=2
    )
    client = sdk(simulator)
    result = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-read", AnalyzeDocumentRequest(url_source="https://docs.example/c.pdf")
        ).result()
    )
    assert result.model_id == "prebuilt-read"
    statuses = [e["status"] for e in await sim_log(simulator) if e["method"] == "GET"]
    assert 429 in statuses and statuses[-1] == 200


async def test_unknown_status_keeps_the_sdk_polling(simulator: str) -> None:
    await sim_patch(simulator, azure_di_unknown_status="skipped")
    client = sdk(simulator)
    poller = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-read", AnalyzeDocumentRequest(url_source="https://docs.example/d.pdf")
        )
    )
    await in_thread(lambda: poller.wait(1.0))
    assert not poller.done() and poller.status() == "skipped"
    await sim_patch(simulator, azure_di_unknown_status="")
    assert (await in_thread(poller.result)).model_id == "prebuilt-read"


class _Token:
    """A credential handing out the simulator's Entra ID token (Entra itself is not simulated)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        assert scopes == ("https://cognitiveservices.azure.com/.default",)
        return AccessToken("sim-azure-di-token", int(time.time()) + 3600)


async def test_entra_id_bearer_token_is_accepted(simulator: str) -> None:
    client = DocumentIntelligenceClient(simulator, _Token(), polling_interval=0.05)  # type: ignore[arg-type]
    result = await in_thread(
        lambda: client.begin_analyze_document(
            "prebuilt-read",
            AnalyzeDocumentRequest(url_source="https://docs.example/e.pdf"),
            enforce_https=False,
        ).result()
    )
    assert result.model_id == "prebuilt-read"
    bad = DocumentIntelligenceClient(simulator, AzureKeyCredential("wrong"), polling_interval=0.05)
    with pytest.raises(HttpResponseError) as raised:
        await in_thread(
            lambda: bad.begin_analyze_document(
                "prebuilt-read", AnalyzeDocumentRequest(url_source="https://docs.example/e.pdf")
            )
        )
    assert raised.value.status_code == 401
