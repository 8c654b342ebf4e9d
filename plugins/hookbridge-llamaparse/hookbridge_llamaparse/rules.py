"""What LlamaParse's answers mean and what its requests carry: pure functions, tested as tables
(tests/test_llamaparse_rules.py). The adapter (``adapter.py``) sends, and applies what these decide.

Each rule cites the sentence of ``next-vendors.md`` §4 (hookbridge's shared vendor notes, sources
LP-REST, LP-GET, LP-SDK...) it rests on; where the document is silent the comment says so, and the
simulator (``service/simulator/llamaparse.py``) plays each reading.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.vendors.base import CANCELED, FAILED, QUEUED, RUNNING, SUCCEEDED, PollResult

# "``job.status`` values: ``PENDING`` and ``RUNNING`` are transient; ``COMPLETED``, ``FAILED`` and
# ``CANCELLED`` are terminal" (§4.4). "Treat an unknown status as non-terminal" (§0): RUNNING.
STATUSES = {
    "PENDING": QUEUED,
    "RUNNING": RUNNING,
    "COMPLETED": SUCCEEDED,
    "FAILED": FAILED,
    "CANCELLED": CANCELED,
}
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})

# "``tier`` is **required** and is one of ``fast | cost_effective | agentic | agentic_plus``" (§4.2).
TIERS = ("fast", "cost_effective", "agentic", "agentic_plus")
# The result's parts, asked for by ``expand`` (§4.5 "Inline content": ``text``, ``markdown``, ``items``):
# the contract's result is "the job with ``markdown`` and ``text`` (and ``items`` where the tier gives
# them)"; "``markdown``, ``markdown_full`` and ``items`` are not available on the ``fast`` tier" (§4.5).
PARTS = ("text", "markdown", "items")
_NOT_ON_FAST = frozenset({"markdown", "items"})

# The document is the run's: these create fields name it, and the adapter sets them from the run.
DOCUMENT_FIELDS = frozenset({"file_id", "source_url"})

FAILED_WITHOUT_MESSAGE = "LlamaParse reported the job FAILED and gave no error_message"


def parts_for(tier: str) -> tuple[str, ...]:
    """The ``expand`` values of the result for a job of ``tier``."""
    return tuple(p for p in PARTS if not (tier == "fast" and p in _NOT_ON_FAST))


def configuration(options: Mapping[str, Any], *, zero_retention: bool) -> dict[str, Any]:
    """The create request's options, as the API names them (contract §10: "``tier`` required,
    ``version`` default ``latest``, the rest passed through").

    "``version`` is **required**" (§4.2): always sent, ``latest`` unless the run names one. With zero
    retention, ``disable_cache``: files are "cached for 48 hours and then permanently deleted" unless
    caching is disabled ("v2 field ``disable_cache``", §4.5); a run that asks for ``disable_cache: false``
    explicitly keeps its choice.
    """
    body = {k: v for k, v in options.items() if v is not None and k not in DOCUMENT_FIELDS}
    body.setdefault("version", "latest")
    if zero_retention:
        body.setdefault("disable_cache", True)
    return body


@dataclass(frozen=True)
class Created:
    job_id: str
    status: str | None


def created_job(body: Any) -> Created | None:
    """The job named by a create answer, or None when it names none (which may still have made one).

    "The SDK casts the POST response to ``ParsingCreateResponse``, which is a bare job object"; "The REST
    guide says 'The response includes a ``job.id``'" ... "**Accept both ``id`` and ``job.id``**" (§4.3).
    Both present: the flat one, which the official SDK reads.
    """
    if not isinstance(body, dict):
        return None
    for job in (body, body.get("job")):
        if isinstance(job, dict) and isinstance(job.get("id"), str) and job["id"]:
            status = job.get("status")
            return Created(job["id"], status if isinstance(status, str) else None)
    return None


def usage_of(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """``usage.credits``: "Null until billing has recorded it" (§4.4): None then."""
    usage = job.get("usage")
    if not isinstance(usage, dict):
        return None
    credits = usage.get("credits")
    if not isinstance(credits, int | float) or isinstance(credits, bool):
        return None
    return {"credits": float(credits), "reported": usage}


def poll_result(body: Any) -> PollResult | None:
    """A poll's answer in our words; None when it says nothing about the job (no ``job.status``).

    "By default returns job metadata only. The ``job`` object is always present" (§4.4): a poll asks for
    no ``expand``, and a ``COMPLETED`` job's result is fetched (``needs_fetch``). "``job.error_message``
    holds 'Error details when status is FAILED'" (§4.4).
    """
    job = body.get("job") if isinstance(body, dict) else None
    if not isinstance(job, dict):
        return None
    vendor_status = job.get("status")
    if not isinstance(vendor_status, str) or not vendor_status:
        return None
    status = STATUSES.get(vendor_status, RUNNING)
    if status == SUCCEEDED:
        return PollResult(SUCCEEDED, vendor_status, needs_fetch=True, usage=usage_of(job))
    if status == FAILED:
        message = job.get("error_message")
        return PollResult(
            FAILED,
            vendor_status,
            error=message if isinstance(message, str) and message else FAILED_WITHOUT_MESSAGE,
            error_details={"error_message": message} if message else None,
            usage=usage_of(job),
        )
    return PollResult(status, vendor_status)


@dataclass(frozen=True)
class Stored:
    """One part of the result at its presigned URL (``result_content_metadata``)."""

    size: int
    url: str | None


def stored_parts(body: Any, parts: Iterable[str]) -> dict[str, Stored] | None:
    """The presigned entries of ``parts`` that exist, from an answer asked with ``{part}_content_metadata``;
    None when the answer has no ``result_content_metadata`` at all.

    "Presigned entries sit in ``result_content_metadata{<name>: {size_bytes (req), exists,
    presigned_url}}``" (§4.5). An entry without ``exists: true`` is a part the job does not have.
    """
    metadata = body.get("result_content_metadata") if isinstance(body, dict) else None
    if not isinstance(metadata, dict):
        return None
    found: dict[str, Stored] = {}
    for part in parts:
        entry = metadata.get(part)
        if not isinstance(entry, dict) or entry.get("exists") is not True:
            continue
        size = entry.get("size_bytes")
        url = entry.get("presigned_url")
        found[part] = Stored(
            size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0,
            url if isinstance(url, str) and url else None,
        )
    return found


def fetch_plan(stored: Mapping[str, Stored] | None, inline_max_bytes: int) -> str:
    """``inline`` (one GET with the parts expanded) or ``presigned`` (each part from its URL).

    Results come inline through ``expand``, or as presigned download URLs, to be used "when the result is
    large" (§4.5). How large is large, the document is silent: past ``inline_max_bytes`` together, so
    that a poll's answer stays small; without any metadata (an answer that gives none), inline.
    """
    if stored is None:
        return "inline"
    return "presigned" if sum(s.size for s in stored.values()) > inline_max_bytes else "inline"


def downloaded(content: bytes) -> Any:
    """A part read from its presigned URL. What the stored object holds (the JSON of the inline value, or
    the bare text) the document is silent about: JSON where it parses, else the text."""
    try:
        return json.loads(content)
    except ValueError:
        return content.decode("utf-8", errors="replace")


def result(job: Mapping[str, Any], parts: Mapping[str, Any]) -> dict[str, Any]:
    """The run's result (contract §10): "the job with ``markdown`` and ``text`` (and ``items`` where the
    tier gives them)", in the shape of the API's own answer ``{job, text, markdown, items}``. A
    ``COMPLETED`` job "can include failed pages" (§4.8): they stay in the pages, marked as the API marks
    them (``success: false``); the run succeeds, as the API's job did."""
    out: dict[str, Any] = {"job": dict(job)}
    for name in PARTS:
        if parts.get(name) is not None:
            out[name] = parts[name]
    return out


# Refusals ------------------------------------------------------------------------------------------


def submit_refusal(status: int) -> str:
    """What a non-2xx, non-transient answer to a create means: ``rejected`` (for good) or ``transient``.

    "**401**: bad or revoked key, wrong header format, or wrong region"; "**403**: resource belongs to
    another organization or project, insufficient role, or project disabled"; "credit-consuming requests
    return **402** when credits run out" (§4.7): the run cannot go through as configured: rejected. A
    400/422 is the request refused ("422/400 if missing [inference]", §4.9.1): rejected. 409: the
    document is silent; the SDK retries it (§4.4 "retries 408, 409, 429 and ≥500"), and a conflict created
    no job: transient. Any other 4xx: rejected.
    """
    return "transient" if status == 409 else "rejected"


def poll_refusal(status: int) -> str:
    """``rejected``, ``expired`` or ``transient`` for a non-2xx, non-transient answer to a poll.

    401/403 (§4.7): the key is refused, asking again will not help: rejected. 400/422: our request is
    wrong (an ``expand`` value the API does not know): rejected. 404: the document gives no retention
    ("how long a job and its results stay fetchable: **NOT FOUND**", §4.5), and a job id the API gave
    cannot come back: expired; 410 likewise. 409 and anything else: transient (the SDK retries 409).
    """
    if status in (401, 403, 400, 422):
        return "rejected"
    if status in (404, 410):
        return "expired"
    return "transient"


def cancel_refusal(status: int) -> str:
    """``done`` (nothing left to stop) or ``rejected`` for a non-2xx, non-transient answer to a cancel.

    "Jobs already in a terminal state (COMPLETED, FAILED, CANCELLED) cannot be cancelled"; "The HTTP
    status for cancelling a terminal job is **NOT FOUND**" (§4.6): any 4xx but 401/403 is read as that
    (the request has nothing else in it to be wrong), as is 404 (gone). 401/403: rejected.
    """
    return "rejected" if status in (401, 403) else "done"


def delete_refusal(status: int) -> str:
    """``confirm`` (ask whether the job is still there), ``cancel_first`` or ``rejected`` for a non-2xx,
    non-transient answer to ``DELETE /api/v2/parse/{id}``.

    "**Delete** a parse job: **NOT FOUND**" (§4.6); contract §10 names ``DELETE /api/v2/parse/{id}``, and
    the SDK 2.19 has it ("The job must be in a terminal state"), its refusal status undocumented. 404 and
    405 may be a job already gone or a route that does not exist: a GET of the job confirms which ("A
    deletion is reported only when confirmed", contract §10). 401/403: rejected. Any other 4xx: the job is
    not terminal yet: cancel it, then delete again.
    """
    if status in (404, 405, 410):
        return "confirm"
    if status in (401, 403):
        return "rejected"
    return "cancel_first"
