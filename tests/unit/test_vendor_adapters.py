"""Adapter details that need no simulator: registration and headers, request bodies, media types, the
Uptiq 404 window. The vendor is an ``httpx.MockTransport``; the contract tests in tests/integration run
the same adapters against the simulator."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from service.vendors import base, build_adapters, registry
from service.vendors.base import Document, SubmitRequest, VendorExpired, VendorRejected, VendorTransient
from service.vendors.cloudsquid import CloudsquidAdapter
from service.vendors.http import get_bounded
from service.vendors.registry import load_settings
from service.vendors.uptiq import SUBMITTED_KEY, UptiqAdapter

ENV = {
    "HOOKBRIDGE_CLOUDSQUID_API_KEY": "cs-key",
    "HOOKBRIDGE_CLOUDSQUID_PROJECT": "proj",
    "HOOKBRIDGE_CLOUDSQUID_TABLE_ID": "tbl",
    "HOOKBRIDGE_UPTIQ_API_KEY": "up-key",
    "HOOKBRIDGE_NUTRIENT_API_KEY": "nu-key",
    "HOOKBRIDGE_AZURE_DI_API_KEY": "az-key",
}


def request(document: Document, options: dict[str, Any], zero_retention: bool = False) -> SubmitRequest:
    return SubmitRequest("run_1", "extract", document, options, zero_retention)


async def test_build_adapters_registers_every_vendor_with_its_auth_header() -> None:
    seen: list[httpx.Request] = []

    def vendor(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path.endswith("/files"):
            return httpx.Response(201, json={"row_id": "row-1"})
        if req.url.path.endswith("/run"):
            return httpx.Response(202, json={"run_id": "run-1"})
        return httpx.Response(200, json={"data": {"_id": "x1", "documentStatus": "Pending"}})

    clients, adapters = build_adapters(load_settings(ENV), {}, None, transport=httpx.MockTransport(vendor))
    try:
        # Every installed vendor (the plugins installed by default, LlamaParse, included).
        assert (
            set(adapters)
            == set(registry.vendors())
            >= {"nutrient", "cloudsquid", "uptiq", "azure_di", "textract", "google_docai"}
        )
        assert adapters["azure_di"]._client.headers["Ocp-Apim-Subscription-Key"] == "az-key"  # type: ignore[attr-defined]
        for name, adapter in adapters.items():
            assert adapter.name == name
        assert not adapters["cloudsquid"].supports_cancel and not adapters["uptiq"].supports_cancel
        doc = Document(content=b"%PDF", filename="a.pdf", media_type="application/pdf")
        await adapters["cloudsquid"].submit(request(doc, {}))
        await adapters["uptiq"].submit(request(doc, {"documentType": "Invoice"}))
    finally:
        for c in clients:
            await c.aclose()
    upload, start, extract = seen
    assert str(upload.url) == "https://api.cloudsquid.io/api/projects/proj/tables/tbl/files"
    assert upload.headers["x-api-key"] == "cs-key" and start.headers["x-api-key"] == "cs-key"
    assert upload.extensions["kind"] == "submit" and start.extensions["kind"] == "submit"  # one submit
    assert str(extract.url) == "https://api-docai-uat.uptiq.ai/extract"
    assert extract.headers["x-api-key"] == "up-key"


async def cloudsquid_bodies(document: Document, options: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []

    def vendor(req: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(req.content))
        key = "row_id" if req.url.path.endswith("/files") else "run_id"
        return httpx.Response(200, json={key: f"{key}-1"})  # any 2xx will do

    async with httpx.AsyncClient(base_url="http://cs.test/api", transport=httpx.MockTransport(vendor)) as c:
        await CloudsquidAdapter(c, project="p", table_id="t").submit(request(document, options, **kw))
    return bodies


@pytest.mark.parametrize(
    ("media_type", "filename", "expected"),
    [
        ("application/pdf", "a.pdf", "application/pdf"),
        ("text/plain; charset=utf-8", "a.txt", "text/plain"),
        ("application/octet-stream", "scan.png", "image/png"),  # unspecified: guessed from the name
        ("audio/mpeg", "a.mp3", "audio/mp3"),
        ("IMAGE/JPG", "a.jpg", "image/jpg"),
    ],
)
async def test_cloudsquid_mimetype_mapping(media_type: str, filename: str, expected: str) -> None:
    upload, start = await cloudsquid_bodies(
        Document(content=b"abc", filename=filename, media_type=media_type), {}, zero_retention=True
    )
    assert upload == {"file": "YWJj", "filename": filename, "mimetype": expected, "file_type": "binary"}
    assert start == {"row_id": "row_id-1", "zero_retention": True}


@pytest.mark.parametrize(
    ("document", "options", "match"),
    [
        (Document(content=b"x", filename="a.gif", media_type="image/gif"), {}, "image/gif"),
        (Document(content=b"x", filename="a.bin"), {}, "application/octet-stream"),
        (Document(content=b"x", filename="a.pdf", media_type="application/pdf"), {"file_type": "uri"}, "uri"),
        (Document(content=b"", filename="a.pdf", media_type="application/pdf"), {}, "empty"),
        (Document(content=b"x", filename="m.eml"), {"file_type": "multipart", "parts": []}, "parts"),
    ],
)
async def test_cloudsquid_refuses_before_calling(
    document: Document, options: dict[str, Any], match: str
) -> None:
    def vendor(req: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing may be sent")

    async with httpx.AsyncClient(base_url="http://cs.test/api", transport=httpx.MockTransport(vendor)) as c:
        with pytest.raises(VendorRejected, match=match):
            await CloudsquidAdapter(c, project="p", table_id="t").submit(request(document, options))


async def test_cloudsquid_multipart_sends_the_parts_as_file() -> None:
    parts = [{"headers": {"Subject": "hi"}, "body": "x"}, {"filename": "a.pdf", "content": "JVBE"}]
    doc = Document(content=b"From: a", filename="mail.eml", media_type="application/octet-stream")
    upload, _ = await cloudsquid_bodies(doc, {"file_type": "multipart", "parts": parts})
    assert upload == {
        "file": parts,
        "filename": "mail.eml",
        "mimetype": "message/rfc822",
        "file_type": "multipart",
    }


async def test_cloudsquid_error_without_message_still_says_something() -> None:
    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "error", "data": {}, "reasoning": ""})

    async with httpx.AsyncClient(base_url="http://cs.test/api", transport=httpx.MockTransport(vendor)) as c:
        result = await CloudsquidAdapter(c).poll("r", {"project": "p", "table_id": "t"})
    assert result.status == base.FAILED and result.error == "the vendor reported an error and gave no reason"


async def test_cloudsquid_upload_without_row_id_is_transient() -> None:
    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={})

    async with httpx.AsyncClient(base_url="http://cs.test/api", transport=httpx.MockTransport(vendor)) as c:
        with pytest.raises(VendorTransient, match="row_id"):
            doc = Document(content=b"x", filename="a.pdf", media_type="application/pdf")
            await CloudsquidAdapter(c, project="p", table_id="t").submit(request(doc, {}))


@pytest.mark.parametrize(
    ("age", "expected"), [(0.0, VendorTransient), (4.9, VendorTransient), (5.1, VendorExpired)]
)
async def test_uptiq_404_window(age: float, expected: type[Exception]) -> None:
    def vendor(req: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"status": "error", "message": "Extraction not found"})

    async with httpx.AsyncClient(base_url="http://up.test", transport=httpx.MockTransport(vendor)) as c:
        with pytest.raises(expected) as info:
            await UptiqAdapter(c, early_404_window_s=5).poll("x1", {SUBMITTED_KEY: time.time() - age})
    assert type(info.value) is expected and "Extraction not found" in str(info.value)


async def test_uptiq_failed_without_document_quality() -> None:
    def vendor(req: httpx.Request) -> httpx.Response:
        stage = {"stage": "failed", "message": "OCR gave up"}
        return httpx.Response(200, json={"extraction": {"status": "Failed", "processingStage": stage}})

    async with httpx.AsyncClient(base_url="http://up.test", transport=httpx.MockTransport(vendor)) as c:
        result = await UptiqAdapter(c).poll("x1", {})
    assert result.status == base.FAILED and result.error == "OCR gave up"
    assert result.progress == base.Progress(phase="failed", message="OCR gave up")


class TestBoundedReads:
    """A result asset is read up to a limit. The simulator always sends Content-Length, so a MockTransport
    plays a vendor that streams without one, or lies about it."""

    @staticmethod
    def client(body: bytes, *, status: int = 200, declare: bool = False) -> httpx.AsyncClient:
        async def chunks() -> Any:
            for i in range(0, len(body), 1000):
                yield body[i : i + 1000]

        def vendor(req: httpx.Request) -> httpx.Response:
            headers = {"content-length": str(len(body))} if declare else {}
            return httpx.Response(status, headers=headers, content=chunks())

        return httpx.AsyncClient(base_url="http://vendor.test", transport=httpx.MockTransport(vendor))

    async def test_a_stream_past_the_limit_is_refused_as_read(self) -> None:
        async with self.client(b"x" * 10_000) as client:
            with pytest.raises(base.VendorResultTooLarge, match="5000"):
                await get_bounded(client, "/a", limit=5_000)

    async def test_a_declared_length_past_the_limit_is_refused_before_reading(self) -> None:
        async with self.client(b"x" * 10_000, declare=True) as client:
            with pytest.raises(base.VendorResultTooLarge, match="10000 bytes"):
                await get_bounded(client, "/a", limit=5_000)

    async def test_within_the_limit_the_body_is_whole(self) -> None:
        async with self.client(b'{"a": 1}') as client:
            response, body = await get_bounded(client, "/a", limit=8)
        assert body == b'{"a": 1}' and response.json() == {"a": 1}

    async def test_an_error_body_is_cut_not_refused(self) -> None:
        async with self.client(b"e" * 200_000, status=503) as client:
            response, body = await get_bounded(client, "/a", limit=10_000_000)
        assert response.status_code == 503 and len(body) == 64 * 1024

    async def test_a_body_that_does_not_decode_is_transient(self) -> None:
        def vendor(req: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers={"content-encoding": "gzip"}, content=b"not gzip at all")

        async with httpx.AsyncClient(
            base_url="http://v.test", transport=httpx.MockTransport(vendor)
        ) as client:
            with pytest.raises(VendorTransient, match="does not decode"):
                await get_bounded(client, "/a", limit=1000)
