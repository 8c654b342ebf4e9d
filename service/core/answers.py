"""A vendor's answers as the core decides on them: the plain values of the vendor protocol.

An adapter turns what its vendor said into these (``service/vendors/base.py``, which re-exports every
name here, so that adapters and plugins import them from there as before); ``core/runs.py`` decides what
follows each. Nothing here does anything: values, and the bound of a vendor's words.

By the time the core reads an answer, the worker has made its vendor text safe (``service/vendors/text.py``:
cut short and scrubbed of our credentials); the core only cuts the messages it composes (:func:`cut`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.core.domain import RunStatus

# What a poll can say, in our words (shared/vendors/NOTES.md §0): the run statuses' words, as plain strings.
QUEUED, RUNNING = RunStatus.QUEUED.value, RunStatus.RUNNING.value
SUCCEEDED, FAILED, CANCELED = RunStatus.SUCCEEDED.value, RunStatus.FAILED.value, RunStatus.CANCELED.value

# What is left of one vendor string: enough for any error message a person reads, small enough that a run
# record, a feed entry and a callback stay small whatever the vendor answers.
MAX_TEXT = 2048


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut short of ``limit`` characters, with a mark, when it is longer."""
    if len(text) > limit:
        return text[: limit - 13] + " [truncated]"
    return text


@dataclass(frozen=True)
class Submitted:
    vendor_run_id: str
    vendor_status: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # kept with the run, handed back on every call
    # The vendor's "ask again in N s" (Retry-After on its 202): the first poll's time, within
    # [POLL_INITIAL_S, PAUSE_MAX_S]. None: the poll schedule's own.
    retry_after_s: float | None = None


@dataclass(frozen=True)
class PollProgress:
    """How far the vendor says it is (``Progress`` in the vendor protocol; not the API's shape of it,
    ``core/shapes.py``'s ``Progress``)."""

    percent: float | None = None
    phase: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class PollResult:
    status: str  # QUEUED | RUNNING | SUCCEEDED | FAILED | CANCELED; unknown vendor statuses are RUNNING
    vendor_status: str | None
    progress: PollProgress | None = None
    result: Any = None  # the result, when the poll itself carries it
    needs_fetch: bool = False  # SUCCEEDED, and the result must be fetched with fetch_result
    error: str | None = None  # the vendor's own message on FAILED
    error_details: dict[str, Any] | None = None
    # What the vendor reports the run cost: {"credits": number or None, "reported": its own usage object}.
    usage: dict[str, Any] | None = None
    # The vendor's "ask again in N s" (Retry-After on its 200): the next poll's time, within
    # [POLL_INITIAL_S, PAUSE_MAX_S], even past POLL_MAX_S. None: the poll schedule's own.
    retry_after_s: float | None = None
    # Keys to merge into the run's adapter state, with the poll's change (a page token, a name learned).
    state: dict[str, Any] | None = None


@dataclass(frozen=True)
class FileResult:
    """A result that is a file rather than JSON (Nutrient split's zip asset), with the JSON beside it.

    The adapter shapes ``data`` as the client sees it: where it names the file, it names
    ``call.result_url`` (hookbridge serves the kept file there). Under ``call.zero_retention`` nothing is
    kept: the adapter returns JSON only (the file inline, if at all)."""

    content: bytes
    media_type: str
    data: Any = None  # the result's JSON, which names the file
