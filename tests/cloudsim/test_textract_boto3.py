"""boto3's own Textract and S3 clients drive the simulated Textract and the embedded S3 (moto): the
service model validates our answers, botocore's SigV4 signs the requests the simulator checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.cloudsim.conftest import Sim

KEY_ID, SECRET = "AKIASIMULATOR0000001", "sim-textract-secret-access-key"
BUCKET = "hookbridge-staging"
THREE_PAGES = b"%PDF-1.7\n1 0 obj <</Type /Page>> 2 0 obj <</Type /Page>> 3 0 obj <</Type /Page>>\n"


def _clients(
    sim: Sim, *, retries: int = 0, region: str = "us-east-1", secret: str = SECRET
) -> tuple[Any, Any]:
    common: dict[str, Any] = {
        "aws_access_key_id": KEY_ID,
        "aws_secret_access_key": secret,
        "region_name": region,
    }
    config = Config(retries={"mode": "standard", "total_max_attempts": retries + 1})
    textract = boto3.client("textract", endpoint_url=f"{sim.url}/textract", config=config, **common)
    # Through the simulator's own port (/s3 forwards to moto's).
    s3 = boto3.client("s3", endpoint_url=f"{sim.url}/s3", **common)
    return textract, s3


def _stage(s3: Any, key: str, body: bytes = THREE_PAGES) -> dict[str, Any]:
    try:
        s3.create_bucket(Bucket=BUCKET)
    except ClientError as exc:
        assert exc.response["Error"]["Code"] in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists")
    s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    return {"S3Object": {"Bucket": BUCKET, "Name": key}}


def _wait(textract: Any, job_id: str, get: str = "get_document_analysis", **kw: Any) -> dict[str, Any]:
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        answer: dict[str, Any] = getattr(textract, get)(JobId=job_id, **kw)
        if answer["JobStatus"] != "IN_PROGRESS":
            return answer
        time.sleep(0.05)
    raise AssertionError("job did not finish")


def test_analysis_three_pages_and_idempotent_start(sim: Sim) -> None:
    textract, s3 = _clients(sim)
    location = _stage(s3, "runs/r1/invoice.pdf")
    start = {
        "DocumentLocation": location,
        "FeatureTypes": ["QUERIES"],
        "QueriesConfig": {"Queries": [{"Text": "What is the invoice number?", "Alias": "number"}]},
        "ClientRequestToken": "run-r1",
    }
    job_id = textract.start_document_analysis(**start)["JobId"]
    # A retried start (same token, same input) is the same job; another Start operation is a new one.
    assert textract.start_document_analysis(**start)["JobId"] == job_id
    other = textract.start_document_text_detection(DocumentLocation=location, ClientRequestToken="run-r1")
    assert other["JobId"] != job_id
    with pytest.raises(ClientError) as mismatch:
        textract.start_document_analysis(**{**start, "FeatureTypes": ["QUERIES", "TABLES"]})
    assert mismatch.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    assert mismatch.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400

    first = _wait(textract, job_id, MaxResults=11)
    assert first["JobStatus"] == "SUCCEEDED"
    pages, blocks, token = [first], list(first["Blocks"]), first.get("NextToken")
    while token:
        page = textract.get_document_analysis(JobId=job_id, MaxResults=11, NextToken=token)
        pages.append(page)
        blocks += page["Blocks"]
        token = page.get("NextToken")
    # 3 PDF pages x 10 blocks + the query's 2 blocks = 32 blocks in pages of 11.
    assert [len(p["Blocks"]) for p in pages] == [11, 11, 10]
    assert all(p["DocumentMetadata"] == {"Pages": 3} for p in pages)
    assert "NextToken" not in pages[-1]
    assert [b["BlockType"] for b in blocks].count("PAGE") == 3
    assert {b["BlockType"] for b in blocks} >= {"QUERY", "QUERY_RESULT", "LINE", "WORD"}

    # botocore's paginator walks the same pages.
    paginator = (
        textract.get_paginator("get_document_analysis")
        if textract.can_paginate("get_document_analysis")
        else None
    )
    if paginator is not None:
        walked = list(paginator.paginate(JobId=job_id, PaginationConfig={"PageSize": 11}))
        assert len(walked) == 3


def test_page_cap_knob_pages_a_default_get(make_sim: Callable[..., Sim]) -> None:
    sim = make_sim(textract_page_blocks=10)
    textract, s3 = _clients(sim)
    job_id = textract.start_document_text_detection(DocumentLocation=_stage(s3, "r2/doc.pdf"))["JobId"]
    first = _wait(textract, job_id, get="get_document_text_detection")
    assert len(first["Blocks"]) == 10 and first["NextToken"]
    assert first["DetectDocumentTextModelVersion"]


def test_partial_success_and_failed(sim: Sim) -> None:
    textract, s3 = _clients(sim)
    partial = textract.start_document_text_detection(DocumentLocation=_stage(s3, "r3/partial.pdf"))["JobId"]
    answer = _wait(textract, partial, get="get_document_text_detection")
    assert answer["JobStatus"] == "PARTIAL_SUCCESS"
    assert answer["Warnings"] == [{"ErrorCode": "PAGE_PROCESSING_FAILED", "Pages": [3]}]
    assert {b["Page"] for b in answer["Blocks"]} == {1, 2}
    failed = textract.start_document_text_detection(DocumentLocation=_stage(s3, "r3/fail.pdf"))["JobId"]
    answer = _wait(textract, failed, get="get_document_text_detection")
    assert answer["JobStatus"] == "FAILED" and answer["StatusMessage"]
    assert "Blocks" not in answer


def test_expense(sim: Sim) -> None:
    textract, s3 = _clients(sim)
    job_id = textract.start_expense_analysis(DocumentLocation=_stage(s3, "r4/receipt.pdf"))["JobId"]
    answer = _wait(textract, job_id, get="get_expense_analysis", MaxResults=2)
    assert answer["JobStatus"] == "SUCCEEDED"
    assert [d["ExpenseIndex"] for d in answer["ExpenseDocuments"]] == [1, 2]
    rest = textract.get_expense_analysis(JobId=job_id, MaxResults=2, NextToken=answer["NextToken"])
    assert [d["ExpenseIndex"] for d in rest["ExpenseDocuments"]] == [3] and "NextToken" not in rest


@pytest.mark.parametrize(
    ("knob", "status", "code"),
    [
        ("textract_rate_throughput", 400, "ProvisionedThroughputExceededException"),
        ("textract_rate_throttling", 500, "ThrottlingException"),
    ],
)
def test_throttling_is_400_or_500_and_botocore_retries_it(
    make_sim: Callable[..., Sim], knob: str, status: int, code: str
) -> None:
    sim = make_sim(**{knob: 1.0})
    textract, s3 = _clients(sim, retries=2)
    location = _stage(s3, "r5/doc.pdf")
    with pytest.raises(ClientError) as caught:
        textract.start_document_text_detection(DocumentLocation=location)
    error = caught.value.response
    assert error["Error"]["Code"] == code
    assert error["ResponseMetadata"]["HTTPStatusCode"] == status
    # botocore's standard retry mode classed it as a throttle and retried: three attempts.
    assert error["ResponseMetadata"]["RetryAttempts"] == 2
    from botocore.retries.standard import RetryContext, ThrottledRetryableChecker

    context = RetryContext(attempt_number=1, parsed_response=error, http_response=None)
    assert ThrottledRetryableChecker().is_retryable(context)
    requests = [e for e in _log(sim) if e["vendor"] == "textract"]
    assert len(requests) == 3 and {e["status"] for e in requests} == {status}


def test_concurrent_job_cap(make_sim: Callable[..., Sim]) -> None:
    sim = make_sim(textract_max_concurrent_jobs=1, duration_s=(30, 30))
    textract, s3 = _clients(sim)
    location = _stage(s3, "r6/doc.pdf")
    textract.start_document_text_detection(DocumentLocation=location)
    with pytest.raises(ClientError) as caught:
        textract.start_document_text_detection(DocumentLocation=location)
    assert caught.value.response["Error"]["Code"] == "LimitExceededException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # Another Start operation has its own cap.
    assert textract.start_document_analysis(DocumentLocation=location, FeatureTypes=["TABLES"])["JobId"]


def test_signature_is_verified(sim: Sim) -> None:
    _, s3 = _clients(sim)
    location = _stage(s3, "r7/doc.pdf")
    for kwargs, code in (
        ({"secret": "not-the-secret"}, "InvalidSignatureException"),
        ({"region": "eu-west-1"}, "InvalidSignatureException"),
    ):
        textract, _ = _clients(sim, **kwargs)
        with pytest.raises(ClientError) as caught:
            textract.start_document_text_detection(DocumentLocation=location)
        assert caught.value.response["Error"]["Code"] == code


def test_missing_object_and_wrong_format(sim: Sim) -> None:
    textract, s3 = _clients(sim)
    _stage(s3, "r8/doc.pdf")
    with pytest.raises(ClientError) as caught:
        textract.start_document_text_detection(
            DocumentLocation={"S3Object": {"Bucket": BUCKET, "Name": "nope.pdf"}}
        )
    assert caught.value.response["Error"]["Code"] == "InvalidS3ObjectException"
    location = _stage(s3, "r8/notes.txt", b"plain text, not a document format")
    with pytest.raises(ClientError) as caught:
        textract.start_document_text_detection(DocumentLocation=location)
    assert caught.value.response["Error"]["Code"] == "UnsupportedDocumentException"


def _log(sim: Sim) -> list[dict[str, Any]]:
    import httpx

    data: list[dict[str, Any]] = httpx.get(f"{sim.url}/_sim/requests").json()["data"]
    return data
