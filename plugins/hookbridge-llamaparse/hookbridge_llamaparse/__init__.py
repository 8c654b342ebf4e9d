"""LlamaParse v2 (the LlamaCloud Parse API) as a hookbridge vendor, registered under the entry point group
``hookbridge.vendors`` as ``llamaparse`` (pyproject.toml): a distribution of its own, as a team outside
hookbridge would ship a vendor. The adapter is ``adapter.py``, the rules it applies ``rules.py``.

Contract §10: operation ``parse`` (options: ``tier`` required, ``version`` default ``latest``, the rest
passed through as the API names them); settings ``LLAMAPARSE_BASE_URL`` (default
``https://api.cloud.llamaindex.ai``) and ``LLAMAPARSE_API_KEY``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hookbridge_llamaparse.adapter import LlamaParseAdapter, build
from hookbridge_llamaparse.rules import DOCUMENT_FIELDS
from service.vendors.base import Kind, KindBudget, VendorDefaults, VendorSpec

__all__ = ["SPEC", "LlamaParseAdapter", "LlamaParseOptions"]


class LlamaParseOptions(BaseModel):
    """A LlamaParse run's ``options``: the fields of its create request (``POST /api/v2/parse``), as its
    API names them. ``tier`` is required; ``version`` is ``latest`` unless given; any other field
    (``processing_options``, ``output_options``, ``page_ranges``, ``agentic_options``, ...) is passed
    through. The document is the run's: ``file_id`` and ``source_url`` are not options."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"examples": [{"tier": "agentic", "version": "latest"}]}
    )

    # "``tier`` is **required** and is one of ``fast | cost_effective | agentic | agentic_plus``" (§4.2).
    tier: Literal["fast", "cost_effective", "agentic", "agentic_plus"] = Field(
        description="The parsing tier; `markdown` and `items` are not available on `fast`."
    )
    # "``version`` is **required**: a dated string such as ``2026-04-09``, or ``latest``" (§4.2).
    version: str = Field(
        "latest",
        pattern=r"^(latest|\d{4}-\d{2}-\d{2})$",
        description="The parser version: `latest` or a date (YYYY-MM-DD).",
    )
    processing_options: dict[str, Any] | None = Field(None, description="Passed through as sent.")
    output_options: dict[str, Any] | None = Field(None, description="Passed through as sent.")
    page_ranges: Any = Field(None, description="Passed through as sent.")

    @model_validator(mode="after")
    def _no_document_fields(self) -> LlamaParseOptions:
        named = sorted(DOCUMENT_FIELDS & set(self.model_extra or {}))
        if named:
            raise ValueError(f"{', '.join(named)}: the document is the run's `document`, not an option")
        return self


SPEC = VendorSpec(
    name=LlamaParseAdapter.name,
    operations=("parse",),
    supports_cancel=LlamaParseAdapter.supports_cancel,
    defaults=VendorDefaults(
        # "Base URL: ``https://api.cloud.llamaindex.ai`` for North America" (§4.1).
        base_url="https://api.cloud.llamaindex.ai",
        # The official SDK "starts at ``polling_interval=1.0`` s, backs off linearly (+1 s per poll) up to
        # ``max_interval=5.0`` s" (§4.4): 1 s to 5 s (ours grows by a factor; 1.5 reaches 5 s in 4 polls).
        poll_initial_s=1.0,
        poll_max_s=5.0,
        poll_multiplier=1.5,
        # "gives up after ``timeout`` = 2 h (``DEFAULT_TIMEOUT = 7200``)" (§4.4); the processing timeout is
        # "base up to 2 h (7,200 s), plus up to 5 min per page" (§4.5): a long document may need more.
        max_run_s=7200.0,
        # Polls, fetches, cancels and deletes: "Limits for ``POST /api/v2/parse``, ``/api/v2/parse/upload``
        # and the poll GET are **NOT FOUND**" (§4.7): no budget but the pause after a 429. The Free
        # tier's "20 requests per minute" (§4.7) is HOOKBRIDGE_LLAMAPARSE_MAX_RPS=0.33.
        max_rps=0.0,
    ),
    # "Parse Upload ... **50 QPS per 10 s window** ... per organization" (§4.7), named for the v1 route:
    # the submits (both v2 routes) on a budget of their own, 5 a second on average
    # (HOOKBRIDGE_LLAMAPARSE_SUBMIT_MAX_RPS), with a 429 pause of their own, so that a 429 on a submit
    # does not hold the polls of jobs already running.
    budgets=(KindBudget("submit", frozenset({Kind.SUBMIT}), max_rps=5.0),),
    required=("API_KEY",),  # every endpoint takes the Bearer key (next-vendors.md §4.1)
    # "Auth: ``Authorization: Bearer <key>`` on every endpoint" (§4.1).
    auth_headers=lambda key: {"Authorization": f"Bearer {key}"},
    build=build,
    description="LlamaParse v2 (LlamaCloud Parse API), async parse jobs",
    options=LlamaParseOptions,
)
