"""The LlamaParse rules as tables: what each answer means, what each request carries (rules.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hookbridge_llamaparse import SPEC, LlamaParseOptions, rules
from service.vendors.base import CANCELED, FAILED, QUEUED, RUNNING, SUCCEEDED, Kind

JOB = {"id": "j1", "status": "PENDING", "tier": "agentic"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (JOB, rules.Created("j1", "PENDING")),  # the SDK's flat job
        ({"job": JOB}, rules.Created("j1", "PENDING")),  # the REST guide's job.id
        ({**JOB, "job": {**JOB, "id": "other"}}, rules.Created("j1", "PENDING")),  # both: the flat one
        ({"id": "j2"}, rules.Created("j2", None)),
        ({"id": "", "job": {"id": "j3", "status": 5}}, rules.Created("j3", None)),
        ({"id": 7}, None),
        ({"job": {"status": "PENDING"}}, None),
        ({}, None),
        ([JOB], None),
        (None, None),
        ("j1", None),
    ],
)
def test_created_job_reads_id_or_job_id(body: Any, expected: rules.Created | None) -> None:
    assert rules.created_job(body) == expected


@pytest.mark.parametrize(
    ("vendor_status", "status"),
    [
        ("PENDING", QUEUED),
        ("RUNNING", RUNNING),
        ("COMPLETED", SUCCEEDED),
        ("FAILED", FAILED),
        ("CANCELLED", CANCELED),
        ("CANCELED", RUNNING),  # not the API's spelling: unknown, never terminal
        ("EXPIRED", RUNNING),  # v1's timeout status, unknown to v2
        ("completed", RUNNING),
    ],
)
def test_statuses(vendor_status: str, status: str) -> None:
    result = rules.poll_result({"job": {"id": "j", "status": vendor_status}})
    assert result is not None and (result.status, result.vendor_status) == (status, vendor_status)
    assert result.needs_fetch is (status == SUCCEEDED)
    assert result.result is None  # a poll asks for no content


@pytest.mark.parametrize(
    "body",
    [None, [], {}, {"status": "COMPLETED"}, {"job": None}, {"job": {}}, {"job": {"status": ""}}, {"job": 1}],
)
def test_a_poll_without_job_status_says_nothing(body: Any) -> None:
    assert rules.poll_result(body) is None


@pytest.mark.parametrize(
    ("job", "error", "details"),
    [
        ({"status": "FAILED", "error_message": "bad scan"}, "bad scan", {"error_message": "bad scan"}),
        ({"status": "FAILED", "error_message": None}, rules.FAILED_WITHOUT_MESSAGE, None),
        ({"status": "FAILED", "error_message": ""}, rules.FAILED_WITHOUT_MESSAGE, None),
        ({"status": "FAILED"}, rules.FAILED_WITHOUT_MESSAGE, None),
    ],
)
def test_failed_carries_error_message(job: dict[str, Any], error: str, details: Any) -> None:
    result = rules.poll_result({"job": job})
    assert result is not None and result.status == FAILED
    assert (result.error, result.error_details) == (error, details)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"credits": 30}, {"credits": 30.0, "reported": {"credits": 30}}),
        ({"credits": 1.5}, {"credits": 1.5, "reported": {"credits": 1.5}}),
        ({"credits": None}, None),  # "Null until billing has recorded it"
        ({"credits": True}, None),
        ({}, None),
        (None, None),
        ("30", None),
    ],
)
def test_usage(usage: Any, expected: Any) -> None:
    assert rules.usage_of({"usage": usage}) == expected
    completed = rules.poll_result({"job": {"status": "COMPLETED", "usage": usage}})
    assert completed is not None and completed.usage == expected


@pytest.mark.parametrize(
    ("tier", "parts"),
    [
        ("fast", ("text",)),
        ("cost_effective", ("text", "markdown", "items")),
        ("agentic", ("text", "markdown", "items")),
        ("agentic_plus", ("text", "markdown", "items")),
    ],
)
def test_parts_by_tier(tier: str, parts: tuple[str, ...]) -> None:
    assert rules.parts_for(tier) == parts


@pytest.mark.parametrize(
    ("options", "zero_retention", "body"),
    [
        ({"tier": "fast"}, False, {"tier": "fast", "version": "latest"}),
        ({"tier": "fast", "version": "2026-04-09"}, False, {"tier": "fast", "version": "2026-04-09"}),
        ({"tier": "fast"}, True, {"tier": "fast", "version": "latest", "disable_cache": True}),
        (
            {"tier": "fast", "disable_cache": False},
            True,
            {"tier": "fast", "version": "latest", "disable_cache": False},
        ),
        (
            {"tier": "agentic", "page_ranges": "1-3", "processing_options": {"ocr": True}, "crop_box": None},
            False,
            {
                "tier": "agentic",
                "version": "latest",
                "page_ranges": "1-3",
                "processing_options": {"ocr": True},
            },
        ),
        (
            {"tier": "fast", "source_url": "https://x", "file_id": "f"},
            False,
            {"tier": "fast", "version": "latest"},
        ),
    ],
)
def test_configuration(options: dict[str, Any], zero_retention: bool, body: dict[str, Any]) -> None:
    assert rules.configuration(options, zero_retention=zero_retention) == body


@pytest.mark.parametrize(
    ("metadata", "parts", "expected"),
    [
        (None, ("text",), None),
        ({"result_content_metadata": None}, ("text",), None),
        ({"result_content_metadata": {}}, ("text",), {}),
        (
            {"result_content_metadata": {"text": {"size_bytes": 10, "exists": True, "presigned_url": "u"}}},
            ("text", "markdown"),
            {"text": rules.Stored(10, "u")},
        ),
        (
            {
                "result_content_metadata": {
                    "text": {"size_bytes": 10, "exists": False},
                    "markdown": {"size_bytes": -1, "exists": True},
                    "items": {"size_bytes": 5, "exists": True, "presigned_url": ""},
                }
            },
            ("text", "markdown", "items"),
            {"markdown": rules.Stored(0, None), "items": rules.Stored(5, None)},
        ),
    ],
)
def test_stored_parts(metadata: Any, parts: tuple[str, ...], expected: Any) -> None:
    assert rules.stored_parts(metadata, parts) == expected


@pytest.mark.parametrize(
    ("sizes", "limit", "plan"),
    [
        (None, 10, "inline"),
        ([], 10, "inline"),
        ([4, 6], 10, "inline"),
        ([4, 7], 10, "presigned"),
        ([11], 10, "presigned"),
    ],
)
def test_fetch_plan(sizes: list[int] | None, limit: int, plan: str) -> None:
    stored = None if sizes is None else {str(i): rules.Stored(n, "u") for i, n in enumerate(sizes)}
    assert rules.fetch_plan(stored, limit) == plan


@pytest.mark.parametrize(
    ("content", "value"),
    [(b'{"pages": []}', {"pages": []}), (b"# Title", "# Title"), (b"\xff", "\ufffd"), (b"[1]", [1])],
)
def test_downloaded(content: bytes, value: Any) -> None:
    assert rules.downloaded(content) == value


def test_result_is_the_job_with_its_parts() -> None:
    parts = {"text": {"pages": []}, "markdown": None, "items": {"pages": []}, "metadata": {}}
    assert rules.result(JOB, parts) == {"job": JOB, "text": {"pages": []}, "items": {"pages": []}}


@pytest.mark.parametrize(
    ("status", "submit", "poll", "cancel", "delete"),
    [
        (400, "rejected", "rejected", "done", "cancel_first"),
        (401, "rejected", "rejected", "rejected", "rejected"),
        (402, "rejected", "transient", "done", "cancel_first"),
        (403, "rejected", "rejected", "rejected", "rejected"),
        (404, "rejected", "expired", "done", "confirm"),
        (405, "rejected", "transient", "done", "confirm"),
        (409, "transient", "transient", "done", "cancel_first"),
        (410, "rejected", "expired", "done", "confirm"),
        (422, "rejected", "rejected", "done", "cancel_first"),
    ],
)
def test_refusals(status: int, submit: str, poll: str, cancel: str, delete: str) -> None:
    assert rules.submit_refusal(status) == submit
    assert rules.poll_refusal(status) == poll
    assert rules.cancel_refusal(status) == cancel
    assert rules.delete_refusal(status) == delete


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({}, "tier"),
        ({"tier": "premium"}, "tier"),
        ({"tier": "fast", "version": "v2"}, "version"),
        ({"tier": "fast", "source_url": "https://x"}, "source_url"),
        ({"tier": "fast", "file_id": "f"}, "file_id"),
    ],
)
def test_options_refused(options: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        LlamaParseOptions.model_validate(options)


def test_options_pass_the_rest_through() -> None:
    options = LlamaParseOptions.model_validate({"tier": "agentic", "agentic_options": {"x": 1}})
    assert options.model_dump(exclude_none=True) == {
        "tier": "agentic",
        "version": "latest",
        "agentic_options": {"x": 1},
    }


def test_the_spec() -> None:
    assert (SPEC.name, SPEC.operations, SPEC.supports_cancel) == ("llamaparse", ("parse",), True)
    d = SPEC.defaults
    assert d.base_url == "https://api.cloud.llamaindex.ai"
    # The SDK's poll: 1 s, growing to 5 s; its timeout 2 h. No shared request budget (NOT FOUND).
    assert (d.poll_initial_s, d.poll_max_s, d.max_run_s, d.max_rps) == (1.0, 5.0, 7200.0, 0.0)
    assert SPEC.auth_headers("llx-k") == {"Authorization": "Bearer llx-k"}
    assert [(b.name, b.kinds, b.max_rps) for b in SPEC.budgets] == [("submit", frozenset({Kind.SUBMIT}), 5.0)]
    assert SPEC.options.model_json_schema()["required"] == ["tier"]
