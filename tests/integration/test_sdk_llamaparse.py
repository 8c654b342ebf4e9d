"""The official ``llama-cloud`` client (``AsyncLlamaCloud``, whose ``parsing`` resource speaks the v2 Parse
API) drives the simulated LlamaParse end to end over a real socket, with ``base_url`` set to the
simulator's ``/llamaparse`` prefix: a simulator that the vendor's own SDK cannot use is wrong."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest
from llama_cloud import AsyncLlamaCloud, BadRequestError, NotFoundError

from service.simulator import SimulatorConfig

KEY = "llx-sim-llamaparse-key"
FAST_POLL: dict[str, Any] = {"polling_interval": 0.05, "backoff": "constant", "timeout": 20}


@pytest.fixture
def sim_config() -> SimulatorConfig:
    return SimulatorConfig(duration_s=(0.2, 0.3), seed=7)


def sdk(simulator: str, **kwargs: Any) -> AsyncLlamaCloud:
    return AsyncLlamaCloud(api_key=KEY, base_url=f"{simulator}/llamaparse", **kwargs)


async def sim_patch(simulator: str, **changes: Any) -> None:
    async with httpx.AsyncClient() as client:
        (await client.patch(f"{simulator}/_sim/config", json=changes)).raise_for_status()


async def sim_log(simulator: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as client:
        entries: list[dict[str, Any]] = (
            await client.get(f"{simulator}/_sim/requests", params={"vendor": "llamaparse"})
        ).json()["data"]
    return entries


async def test_parse_by_url_polls_and_gets_the_expanded_result(simulator: str) -> None:
    url = "https://docs.example/invoice.pdf"
    async with sdk(simulator) as client:
        result = await client.parsing.parse(
            tier="agentic",
            version="latest",
            source_url=url,
            expand=["text", "markdown", "items"],
            **FAST_POLL,
        )
    digest = hashlib.sha256(url.encode()).hexdigest()
    assert result.job.status == "COMPLETED" and result.job.tier == "agentic"
    assert result.text is not None and result.text.pages[0].text.startswith(f"Invoice INV-{digest[:6]}")
    assert result.markdown is not None and result.markdown.pages[0].success is True
    assert result.items is not None and result.items.pages[0].items[0].type == "heading"
    requests = [(e["method"], e["path"]) for e in await sim_log(simulator)]
    assert requests[0] == ("POST", "/llamaparse/api/v2/parse")
    assert all(path == f"/llamaparse/api/v2/parse/{result.job.id}" for _, path in requests[1:])


async def test_parse_by_upload_on_the_fast_tier_has_no_markdown(simulator: str) -> None:
    content = b"%PDF-1.7 receipt"
    async with sdk(simulator) as client:
        result = await client.parsing.parse(
            tier="fast",
            version="latest",
            upload_file=("receipt.pdf", content, "application/pdf"),
            expand=["text", "markdown"],
            **FAST_POLL,
        )
    assert result.job.status == "COMPLETED"
    assert result.text is not None
    assert hashlib.sha256(content).hexdigest()[:6] in result.text.pages[0].text
    assert result.markdown is None  # "not available on the fast tier"
    assert (await sim_log(simulator))[0]["path"] == "/llamaparse/api/v2/parse/upload"


async def test_presigned_url_is_served_on_another_host_without_the_key(simulator: str) -> None:
    async with sdk(simulator) as client:
        job = await client.parsing.create(
            tier="agentic", version="latest", source_url="https://docs.example/a.pdf"
        )
        assert job.status == "PENDING"
        await client.parsing.wait_for_completion(job.id, **FAST_POLL)
        result = await client.parsing.get(job.id, expand=["markdown_full", "markdown_full_content_metadata"])
    assert result.result_content_metadata is not None
    entry = result.result_content_metadata["markdown_full"]
    assert entry.presigned_url is not None and entry.size_bytes == len(result.markdown_full or "")
    presigned = httpx.URL(entry.presigned_url)
    assert presigned.host == "localhost" and presigned.path.startswith("/llamaparse-storage/")
    async with httpx.AsyncClient() as plain:
        downloaded = await plain.get(entry.presigned_url)
        tampered = await plain.get(entry.presigned_url.replace("X-Signature=", "X-Signature=0"))
    assert downloaded.status_code == 200 and downloaded.text == result.markdown_full
    assert tampered.status_code == 403


async def test_cancel_then_cancel_again_is_refused(simulator: str) -> None:
    async with sdk(simulator) as client:
        job = await client.parsing.create(
            tier="agentic", version="latest", source_url="https://docs.example/stuck.pdf"
        )
        canceled = await client.parsing.cancel(job.id)
        assert canceled.status == "CANCELLED"
        with pytest.raises(BadRequestError):
            await client.parsing.cancel(job.id)
        # The async client's poller (2.19) logs a FAILED or CANCELLED job and returns it.
        assert (await client.parsing.wait_for_completion(job.id, **FAST_POLL)).status == "CANCELLED"


async def test_delete_after_completion_then_the_job_is_gone(simulator: str) -> None:
    async with sdk(simulator) as client:
        job = await client.parsing.create(
            tier="fast", version="latest", source_url="https://docs.example/b.pdf"
        )
        with pytest.raises(BadRequestError):  # not terminal yet: "Cancel a job that is still running"
            await client.parsing.delete(job.id)
        await client.parsing.wait_for_completion(job.id, **FAST_POLL)
        deleted = await client.parsing.delete(job.id)
        assert deleted.id == job.id
        with pytest.raises(NotFoundError):
            await client.parsing.get(job.id)


async def test_failed_job_carries_its_error_message_and_no_content(simulator: str) -> None:
    async with sdk(simulator) as client:
        result = await client.parsing.parse(
            tier="agentic",
            version="latest",
            source_url="https://docs.example/will-fail.pdf",
            expand=["text"],
            **FAST_POLL,
        )
    assert result.job.status == "FAILED"
    assert result.job.error_message == "simulated failure: unreadable document"
    assert result.text is None


async def test_no_idempotency_two_identical_creates_make_two_jobs(simulator: str) -> None:
    async with sdk(simulator) as client:
        first = await client.parsing.create(
            tier="fast", version="latest", source_url="https://docs.example/c.pdf"
        )
        second = await client.parsing.create(
            tier="fast", version="latest", source_url="https://docs.example/c.pdf"
        )
    assert first.id != second.id


async def test_sdk_reads_the_create_answer_carrying_both_id_and_job(simulator: str) -> None:
    await sim_patch(simulator, llamaparse_id_shape="both")
    async with sdk(simulator) as client:
        job = await client.parsing.create(
            tier="fast", version="latest", source_url="https://docs.example/d.pdf"
        )
        assert (await client.parsing.get(job.id)).job.id == job.id


async def test_sdk_waits_out_a_429_that_carries_retry_after(simulator: str) -> None:
    await sim_patch(
        simulator, llamaparse_window_limit=1, llamaparse_window_s=1.0, llamaparse_429_retry_after="always"
    )
    async with sdk(simulator) as client:
        first = await client.parsing.create(
            tier="fast", version="latest", source_url="https://docs.example/e.pdf"
        )
        second = await client.parsing.create(
            tier="fast", version="latest", source_url="https://docs.example/e.pdf"
        )
    assert first.id != second.id
    statuses = [e["status"] for e in await sim_log(simulator) if e["method"] == "POST"]
    assert statuses[0] == 200 and 429 in statuses and statuses[-1] == 200


async def test_the_sdk_cannot_read_a_create_answer_with_job_id_only(simulator: str) -> None:
    """Why ``flat`` is the default: the REST guide's ``job.id`` alone leaves the SDK's job without an id."""
    await sim_patch(simulator, llamaparse_id_shape="nested")
    async with sdk(simulator) as client:
        job = await client.parsing.create(
            tier="fast", version="latest", source_url="https://docs.example/f.pdf"
        )
        assert job.id is None  # type: ignore[comparison-overlap]
        assert job.model_extra is not None and job.model_extra["job"]["status"] == "PENDING"
        with pytest.raises(ValueError, match="job_id"):
            await client.parsing.wait_for_completion(job.id, **FAST_POLL)
