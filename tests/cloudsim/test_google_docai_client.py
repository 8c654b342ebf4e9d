"""google-cloud-documentai's own client (REST transport) drives the simulated Document AI, with
credentials from a service-account key file whose token_uri is the simulator's token endpoint, and
google-cloud-storage reads the output shards back from the embedded GCS emulator."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import documentai_v1 as documentai
from google.cloud import storage
from google.oauth2 import service_account

from tests.cloudsim.conftest import Sim

PROJECT, NUMBER, LOCATION = "sim-project", "123456789012", "us"
THREE_PAGES = b"%PDF-1.7\n1 0 obj <</Type /Page>> 2 0 obj <</Type /Page>> 3 0 obj <</Type /Page>>\n"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def _key(sim: Sim, tmp_path: Path) -> Path:
    info = httpx.post(f"{sim.url}/_sim/google/service-account").json()
    assert info["token_uri"] == f"{sim.url}/token"
    path = tmp_path / "sa.json"
    path.write_text(json.dumps(info))
    return path


def _docai(sim: Sim, key: Path) -> documentai.DocumentProcessorServiceClient:
    credentials = service_account.Credentials.from_service_account_file(str(key))
    return documentai.DocumentProcessorServiceClient(
        credentials=credentials,
        transport="rest",
        client_options=ClientOptions(api_endpoint=f"{sim.url}/google_docai"),
    )


def _gcs(sim: Sim) -> storage.Client:
    return storage.Client(
        project=PROJECT, credentials=AnonymousCredentials(), client_options={"api_endpoint": f"{sim.url}/gcs"}
    )


def _stage(sim: Sim, bucket: str, names: dict[str, bytes]) -> storage.Bucket:
    gcs = _gcs(sim)
    staged = gcs.create_bucket(bucket)
    for name, body in names.items():
        staged.blob(name).upload_from_string(body, content_type="application/pdf")
    return staged


def _request(bucket: str, names: list[str], **output: Any) -> documentai.BatchProcessRequest:
    return documentai.BatchProcessRequest(
        name=f"projects/{PROJECT}/locations/{LOCATION}/processors/abc123",
        input_documents=documentai.BatchDocumentsInputConfig(
            gcs_documents=documentai.GcsDocuments(
                documents=[
                    documentai.GcsDocument(gcs_uri=f"gs://{bucket}/{n}", mime_type="application/pdf")
                    for n in names
                ]
            )
        ),
        document_output_config=documentai.DocumentOutputConfig(
            gcs_output_config=documentai.DocumentOutputConfig.GcsOutputConfig(
                gcs_uri=f"gs://{bucket}/out/", **output
            )
        ),
    )


def test_token_endpoint_honours_token_uri(sim: Sim, tmp_path: Path) -> None:
    import google.auth.transport.requests

    key = _key(sim, tmp_path)
    credentials = service_account.Credentials.from_service_account_file(str(key), scopes=[SCOPE])
    credentials.refresh(google.auth.transport.requests.Request())
    assert credentials.token.startswith("ya29.sim-")
    # The token it got opens Document AI; a made-up one does not.
    url = f"{sim.url}/google_docai/v1/projects/{NUMBER}/locations/{LOCATION}/operations/1"
    assert httpx.get(url, headers={"Authorization": f"Bearer {credentials.token}"}).status_code == 404
    refused = httpx.get(url, headers={"Authorization": "Bearer ya29.made-up"})
    assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"


def test_batch_with_a_per_document_failure_and_shards(sim: Sim, tmp_path: Path) -> None:
    bucket = _stage(sim, "docai-a", {"in/good.pdf": THREE_PAGES, "in/fail.pdf": b"%PDF-1.7 fail"})
    client = _docai(sim, _key(sim, tmp_path))
    request = _request(
        "docai-a",
        ["in/good.pdf", "in/fail.pdf"],
        sharding_config=documentai.DocumentOutputConfig.GcsOutputConfig.ShardingConfig(pages_per_shard=1),
    )
    operation = client.batch_process_documents(request=request)
    assert operation.operation.name.startswith(f"projects/{NUMBER}/locations/{LOCATION}/operations/")
    assert operation.operation.done is False
    operation.result(timeout=30)  # no error: the batch SUCCEEDED although one document failed
    # Google's generated client signs its own JWTs for a service-account key (always_use_jwt_access):
    # the token endpoint was not asked.
    assert sim.app.state.oauth.tokens == {}
    metadata = documentai.BatchProcessMetadata.deserialize(operation.operation.metadata.value)
    assert metadata.state == documentai.BatchProcessMetadata.State.SUCCEEDED
    good, failed = metadata.individual_process_statuses
    assert good.status.code == 0 and good.output_gcs_destination.startswith("gs://docai-a/out/")
    assert failed.status.code == 3 and failed.output_gcs_destination == ""
    # The shards, found from outputGcsDestination, read back with Google's storage client.
    prefix = good.output_gcs_destination.removeprefix("gs://docai-a/") + "/"
    blobs = sorted(_gcs(sim).list_blobs("docai-a", prefix=prefix), key=lambda b: b.name)
    shards = [
        documentai.Document.from_json(b.download_as_bytes(), ignore_unknown_fields=False) for b in blobs
    ]
    assert [(s.shard_info.shard_index, s.shard_info.shard_count) for s in shards] == [(0, 3), (1, 3), (2, 3)]
    assert [s.pages[0].page_number for s in shards] == [1, 2, 3]
    assert bucket.name == "docai-a"


def test_every_document_failed_is_a_failed_operation(sim: Sim, tmp_path: Path) -> None:
    _stage(sim, "docai-b", {"in/fail.pdf": b"%PDF fail"})
    client = _docai(sim, _key(sim, tmp_path))
    operation = client.batch_process_documents(request=_request("docai-b", ["in/fail.pdf", "in/missing.pdf"]))
    with pytest.raises(gexc.GoogleAPICallError) as caught:
        operation.result(timeout=30)
    assert caught.value.code == 400  # google.rpc.Code 3, INVALID_ARGUMENT
    metadata = documentai.BatchProcessMetadata.deserialize(operation.operation.metadata.value)
    assert metadata.state == documentai.BatchProcessMetadata.State.FAILED
    assert [s.status.code for s in metadata.individual_process_statuses] == [3, 5]


def test_cancel(make_sim: Callable[..., Sim], tmp_path: Path) -> None:
    sim = make_sim(duration_s=(60, 60))
    _stage(sim, "docai-c", {"in/a.pdf": THREE_PAGES})
    client = _docai(sim, _key(sim, tmp_path))
    operation = client.batch_process_documents(request=_request("docai-c", ["in/a.pdf"]))
    # Not operation.cancel(): google-api-core's operations REST transport (2.44) reads a "body" that the
    # Document AI binding of CancelOperation does not declare (KeyError: 'body'); the client's own
    # cancel_operation sends the documented POST .../operations/{id}:cancel.
    client.cancel_operation(request={"name": operation.operation.name})
    states = []
    deadline = time.monotonic() + 20
    while not operation.done() and time.monotonic() < deadline:
        states.append(
            documentai.BatchProcessMetadata.deserialize(operation.operation.metadata.value).state.name
        )
    states.append(documentai.BatchProcessMetadata.deserialize(operation.operation.metadata.value).state.name)
    assert "CANCELLING" in states and states[-1] == "CANCELLED"
    assert operation.cancelled()
    assert operation.operation.error.code == 1
    assert list(_gcs(sim).list_blobs("docai-c", prefix="out/")) == []


def test_over_quota_is_429_resource_exhausted(make_sim: Callable[..., Sim], tmp_path: Path) -> None:
    sim = make_sim(duration_s=(60, 60), google_docai_max_concurrent=1)
    _stage(sim, "docai-d", {"in/a.pdf": THREE_PAGES})
    client = _docai(sim, _key(sim, tmp_path))
    client.batch_process_documents(request=_request("docai-d", ["in/a.pdf"]))
    from google.api_core.retry import Retry

    with pytest.raises(gexc.TooManyRequests) as caught:
        client.batch_process_documents(request=_request("docai-d", ["in/a.pdf"]), retry=None)
    assert caught.value.response.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    # api-core's transient-error predicate retries it (until the deadline here).
    with pytest.raises(gexc.RetryError) as retried:
        client.batch_process_documents(
            request=_request("docai-d", ["in/a.pdf"]), retry=Retry(timeout=0.5, initial=0.1)
        )
    assert isinstance(retried.value.cause, gexc.TooManyRequests)
