"""Textract's and Document AI's decisions as tables (next-vendors.md §2, §3): pure functions, no I/O."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from service.vendors import aws, base, gcp
from service.vendors import google_docai as gd
from service.vendors import textract as tx
from service.vendors.base import Document
from service.vendors.results import JsonWriter


@pytest.mark.parametrize(
    ("status", "type_", "kind"),
    [
        (400, "ProvisionedThroughputExceededException", base.VendorRateLimited),  # §2.7: throttling, 400
        (500, "ThrottlingException", base.VendorRateLimited),  # §2.7: throttling, 500
        (400, "LimitExceededException", base.VendorRateLimited),  # §2.7: the concurrent-job cap
        (429, "", base.VendorRateLimited),  # not documented; a proxy's 429 is a rate limit still
        (500, "InternalServerError", base.VendorTransient),  # "Try your call again"
        (400, "ExpiredTokenException", base.VendorTransient),  # temporary credentials: refreshed
        (400, "InvalidJobIdException", base.VendorExpired),  # §2.8: the JobId died after 7 days
        (400, "InvalidParameterException", base.VendorRejected),
        (400, "InvalidS3ObjectException", base.VendorRejected),
        (400, "IdempotentParameterMismatchException", base.VendorRejected),
        (400, "AccessDeniedException", base.VendorRejected),
        (503, "SomethingNew", base.VendorTransient),  # unknown: 5xx transient
        (400, "SomethingNew", base.VendorRejected),  # unknown: 4xx refused
    ],
)
def test_textract_errors_by_type_then_status(status: int, type_: str, kind: type) -> None:
    error = tx.classify(status, type_, "message")
    assert type(error) is kind and error.status_code == status


@pytest.mark.parametrize(
    ("answer", "status", "needs_fetch"),
    [
        ({"JobStatus": "IN_PROGRESS"}, base.RUNNING, False),  # no queued state (§2.4)
        ({"JobStatus": "SUCCEEDED"}, base.SUCCEEDED, True),
        ({"JobStatus": "PARTIAL_SUCCESS", "Warnings": [{}]}, base.SUCCEEDED, True),  # contract §10
        ({"JobStatus": "FAILED", "StatusMessage": "bad"}, base.FAILED, False),
        ({"JobStatus": "SOMETHING_NEW"}, base.RUNNING, False),  # unknown: never terminal (§0)
    ],
)
def test_textract_job_status(answer: dict[str, Any], status: str, needs_fetch: bool) -> None:
    polled = tx.poll_result(answer)
    assert (polled.status, polled.needs_fetch, polled.vendor_status) == (
        status,
        needs_fetch,
        answer["JobStatus"],
    )
    if status == base.FAILED:
        assert polled.error == "bad"


def test_textract_answer_without_status_is_transient() -> None:
    with pytest.raises(base.VendorTransient):
        tx.poll_result({})


@pytest.mark.parametrize(
    ("run_id", "token"),
    [("run_01ABC", "run_01ABC"), ("run.x/y", "run-x-y"), ("r" * 80, "r" * 64), ("", "run")],
)
def test_client_request_token_fits_its_pattern(run_id: str, token: str) -> None:
    assert tx.request_token(run_id) == token  # ^[a-zA-Z0-9-_]+$, 1-64 (§2.2)


def test_document_location_s3_url_as_is_else_staged() -> None:
    given = tx.document_location("s3://in/a/b.pdf", "stage", "p/", "run_1", "x.pdf")
    assert (given.bucket, given.key) == ("in", "a/b.pdf")
    staged = tx.document_location("https://h/x.pdf", "stage", "p/", "run_1", "dir/x.pdf")
    assert (staged.bucket, staged.key) == ("stage", "p/run_1/dir_x.pdf")


def test_start_params_queries_add_the_feature() -> None:
    location = aws.S3Location("bkt", "k")
    params = tx.start_params(
        "analyze",
        "run_1",
        location,
        {"feature_types": ["TABLES"], "queries": [{"text": "Total?", "alias": "total", "pages": ["1"]}]},
    )
    assert params["FeatureTypes"] == ["TABLES", "QUERIES"]
    assert params["QueriesConfig"] == {"Queries": [{"Text": "Total?", "Alias": "total", "Pages": ["1"]}]}
    assert params["ClientRequestToken"] == "run_1"
    assert "FeatureTypes" not in tx.start_params("text", "run_1", location, {"feature_types": ["TABLES"]})
    # The service model refuses what Textract would (§2.2: FeatureTypes required), before anything is sent.
    with pytest.raises(aws.RefusedByModel, match="FeatureTypes"):
        aws.serialize("textract", "StartDocumentAnalysis", tx.start_params("analyze", "r", location, {}))
    body, headers = aws.serialize(
        "textract", "StartDocumentTextDetection", tx.start_params("text", "r", location, {})
    )
    assert headers["X-Amz-Target"] == "Textract.StartDocumentTextDetection"
    assert headers["Content-Type"] == "application/x-amz-json-1.1"
    assert json.loads(body)["DocumentLocation"] == {"S3Object": {"Bucket": "bkt", "Name": "k"}}


def test_pages_merge_items_in_order_metadata_once_warnings_without_repeats() -> None:
    pages = tx.Pages("Blocks", JsonWriter(cap=10**6, spill_bytes=10**6))
    warning = {"ErrorCode": "PAGE_PROCESSING_FAILED", "Pages": [3]}
    pages.add(
        {
            "JobStatus": "PARTIAL_SUCCESS",
            "DocumentMetadata": {"Pages": 3},
            "Blocks": [{"Id": "1"}],
            "NextToken": "t1",
            "Warnings": [warning],
        }
    )
    pages.add(
        {
            "JobStatus": "PARTIAL_SUCCESS",
            "DocumentMetadata": {"Pages": 3},
            "Blocks": [{"Id": "2"}],
            "Warnings": [warning],
        }
    )
    result = pages.finish().value
    assert result == {
        "JobStatus": "PARTIAL_SUCCESS",
        "DocumentMetadata": {"Pages": 3},
        "Blocks": [{"Id": "1"}, {"Id": "2"}],
        "Warnings": [warning],
    }


def test_json_writer_spills_to_a_file_and_keeps_its_cap() -> None:
    writer = JsonWriter(cap=10_000, spill_bytes=100)
    writer.raw(b'{"items":[')
    for i in range(20):
        writer.item({"i": i, "pad": "x" * 10})
    writer.raw(b"]}")
    made = writer.finish()
    assert made.value is None and made.path is not None
    try:
        with open(made.path, "rb") as f:
            assert json.load(f) == {"items": [{"i": i, "pad": "x" * 10} for i in range(20)]}
        assert os.path.getsize(made.path) == made.size
    finally:
        os.unlink(made.path)
    capped = JsonWriter(cap=200, spill_bytes=100)
    capped.raw(b"[")
    with pytest.raises(base.VendorResultTooLarge):
        for _ in range(20):
            capped.item("y" * 20)
    assert capped._path is None  # the spilled file is gone


def _op(done: bool | None = None, **fields: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {"name": "projects/1/locations/us/operations/9", **fields}
    if done is not None:
        operation["done"] = done
    return operation


def _statuses(*codes: int) -> dict[str, Any]:
    return {
        "individualProcessStatuses": [
            {"inputGcsSource": f"gs://b/{i}", "status": {"code": c} if c else {}} for i, c in enumerate(codes)
        ]
    }


@pytest.mark.parametrize(
    ("operation", "status"),
    [
        (_op(metadata={"state": "WAITING"}), base.QUEUED),  # §3.9.2: no done field at first
        (_op(False, metadata={"state": "RUNNING"}), base.RUNNING),
        (_op(False, metadata={"state": "CANCELLING"}), base.RUNNING),
        (_op(False, metadata={"state": "SOMETHING_NEW"}), base.RUNNING),  # unknown, not done: running
        (_op(False, metadata={"state": "SUCCEEDED"}), base.RUNNING),  # not done is never an end
        (_op(True, metadata={"state": "CANCELLED"}, error={"code": 1}), base.CANCELED),  # §3.9.7
        (_op(True, metadata={"state": "FAILED"}, error={"code": 3, "message": "x"}), base.FAILED),
        (_op(True, metadata={"state": "SUCCEEDED", **_statuses(0, 3)}, response={}), base.SUCCEEDED),
        (_op(True, metadata={"state": "SUCCEEDED", **_statuses(3, 5)}, response={}), base.FAILED),  # §3.8
        (_op(True, metadata={"state": "SOMETHING_NEW", **_statuses(0)}, response={}), base.SUCCEEDED),
    ],
)
def test_docai_operation_status(operation: dict[str, Any], status: str) -> None:
    assert gd.poll_result(operation).status == status


def test_docai_requests() -> None:
    one = gd.batch_request("gs://b/in/a.pdf", "application/pdf", "gs://b/out/", {"ocrConfig": {}})
    assert one["inputDocuments"] == {
        "gcsDocuments": {"documents": [{"gcsUri": "gs://b/in/a.pdf", "mimeType": "application/pdf"}]}
    }
    assert one["processOptions"] == {"ocrConfig": {}}
    prefix = gd.batch_request("gs://b/in/", "application/pdf", "gs://b/out/", None)
    assert prefix["inputDocuments"] == {"gcsPrefix": {"gcsUriPrefix": "gs://b/in/"}}
    assert gd.output_uri("bkt", "p/", "run_1") == "gs://bkt/p/run_1/output/"
    assert gd.input_uri("gs://x/y.pdf", "bkt", "p/", "run_1", "a.pdf") == "gs://x/y.pdf"
    assert gd.input_uri(None, "bkt", "p/", "run_1", "a.pdf") == "gs://bkt/p/run_1/a.pdf"
    assert (
        gd.processor_path("p", "eu", "proc", "v2")
        == "projects/p/locations/eu/processors/proc/processorVersions/v2"
    )
    assert gcp.parse_gs_url("gs://b") is None and gcp.parse_gs_url("gs://b/o") == ("b", "o")


@pytest.mark.parametrize(
    ("document", "mime"),
    [
        (Document(content=b"x", media_type="image/png"), "image/png"),
        (Document(content=b"%PDF-1.7"), "application/pdf"),
        (Document(content=b"\x89PNG\r\n\x1a\nrest"), "image/png"),
        (Document(content=b"II*\x00rest"), "image/tiff"),
        (Document(url="gs://b/scan.jpg"), "image/jpeg"),
        (Document(content=b"??", filename="unknown"), "application/pdf"),
    ],
)
def test_docai_media_type(document: Document, mime: str) -> None:
    assert gd.media_type(document) == mime
