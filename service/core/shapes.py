"""The public shapes, declared once (pydantic v2): what the API answers and what the callbacks carry.

The store keeps typed records (:mod:`service.core.records`); these models say what of each record is shown,
under which name and type, and :mod:`service.core.records` derives its ``public_*`` views from them (their
fields, in their order, times as RFC 3339). The lifecycle builds each event's body in this shape
(``RunEventData``, ``CALLBACKS``), the API answers in it, and the OpenAPI document's response and webhook
schemas are generated from these classes (every subclass of :class:`Out`, by
:func:`service.api.models.build`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from service.core import domain

# The statuses' own classes, shown by the API's schema under these names (api/models.py imports them here).
from service.core.domain import DeliveryStatus as DeliveryStatus
from service.core.domain import RunStatus as RunStatus

RunId = Annotated[str, Field(pattern="^run_[0-9A-Za-z]+$")]
SubId = Annotated[str, Field(pattern="^sub_[0-9A-Za-z]+$")]
EventId = Annotated[str, Field(pattern="^evt_[0-9A-Za-z]+$")]
# Names of the registered vendors and operations: enums that build() adds to the document from Settings.
VendorName = Annotated[str, WithJsonSchema({"x-ref": "Vendor"})]
OperationName = Annotated[str, WithJsonSchema({"x-ref": "Operation"})]
MetadataOut = Annotated[dict[str, str], WithJsonSchema({"x-ref": "Metadata"})]


EventType = StrEnum("EventType", {t.replace(".", "_"): t for t in domain.EVENT_TYPES})  # type: ignore[misc]
EventTypeFilter = Annotated[
    EventType | Literal["run.*"], Field(description="An event type, or `run.*` for every run event.")
]


class RunErrorCode(StrEnum):
    vendor_rejected, vendor_failed = domain.VENDOR_REJECTED, domain.VENDOR_FAILED
    vendor_unreachable, timed_out = domain.VENDOR_UNREACHABLE, domain.TIMED_OUT
    vendor_expired, result_too_large = domain.VENDOR_EXPIRED, domain.RESULT_TOO_LARGE
    vendor_submit_ambiguous = domain.VENDOR_SUBMIT_AMBIGUOUS
    document_unavailable = domain.DOCUMENT_UNAVAILABLE


class Out(BaseModel):
    """A response: every member is always sent, so every member is required in the document."""

    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


def _list(name: str, item: type[BaseModel]) -> Any:
    """A page: ``data``, and ``next_cursor`` to pass as ``cursor`` for the next (null on the last)."""
    return create_model(name, __base__=Out, data=(list[item], ...), next_cursor=(str | None, ...))  # type: ignore[valid-type]


class Progress(Out):
    """What the vendor says about a run in progress; every member may be null."""

    percent: float | None = Field(description="0 to 100, as the vendor reports it.")
    phase: str | None
    message: str | None


class Usage(Out):
    """What the vendor reports a finished run cost."""

    credits: float | None = Field(description="What the vendor says the run cost.")
    reported: dict[str, Any] | None = Field(description="The vendor's own usage record; null above 1 KiB.")


class RunError(BaseModel):
    """Why a run failed."""

    code: RunErrorCode
    message: str
    vendor_status: str | None
    details: dict[str, Any] = Field(default_factory=dict, description="What else the vendor said.")


class Run(Out):
    """A document-extraction run: `queued` → `submitted` → `running` → `succeeded` | `failed` | `canceled`."""

    id: RunId
    status: RunStatus
    vendor: VendorName
    operation: OperationName
    vendor_run_id: str | None = Field(description="The vendor's id for the run, once it accepted it.")
    vendor_status: str | None = Field(description="The vendor's own status word, as last seen.")
    progress: Progress | None
    metadata: MetadataOut
    zero_retention: bool
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    polls: int = Field(ge=0, description="How often the vendor was polled.")
    error: RunError | None
    usage: Usage | None
    vendor_deleted: bool | None = Field(
        description="With `zero_retention`: whether the vendor's copy is deleted (Nutrient); else null."
    )
    vendor_delete_error: str | None = Field(description="Why the vendor's copy was not deleted.")


RunList = _list("RunList", Run)


class RunEventData(Out):
    """What a run event carries: the run, and its result inline or where to fetch it."""

    # `example` is the one member a real event leaves out, so it is the one not required.
    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    run: Run
    result: dict[str, Any] | list[Any] | None = Field(description="The vendor's result, inline; else null.")
    result_url: str | None = Field(description="`/v1/runs/{id}/result` when the result is not inline.")
    example: bool = Field(
        False,
        description="Present (true) only in an example event (`POST /v1/subscriptions/{id}/test` with "
        "`event_type`): its run is made up.",
    )


class Event(Out):
    id: EventId = Field(description="The event's id; the `webhook-id` of its deliveries.")
    type: EventType
    created_at: datetime
    data: RunEventData


EventList = _list("EventList", Event)


class Subscription(Out):
    """Where and which events are delivered."""

    id: SubId
    url: str
    event_types: list[EventTypeFilter] | None = Field(description="null: the three terminal run events.")
    description: str | None
    metadata: MetadataOut
    disabled: bool
    disabled_reason: str | None
    max_in_flight: int | None
    rate_limit_per_s: float | None
    consecutive_failures: int = Field(ge=0)
    created_at: datetime
    updated_at: datetime


SecretText = Annotated[str, Field(pattern="^whsec_[A-Za-z0-9+/=]+$", description="The signing secret.")]


class SubscriptionWithSecret(Subscription):
    secret: SecretText


SubscriptionList = _list("SubscriptionList", Subscription)


class Secret(Out):
    secret: SecretText


class DeliveryAttempt(Out):
    """One attempt to deliver an event."""

    at: datetime
    status_code: int | None = Field(description="null when no answer came.")
    duration_ms: float = Field(ge=0)
    error: str | None
    response_body: str | None = Field(description="The start of the receiver's answer.")


class Delivery(Out):
    """One event on its way to one subscription."""

    id: Annotated[str, Field(pattern="^dlv_[0-9a-f]+$")]
    event_id: EventId
    event_type: EventType
    subscription_id: SubId
    run_id: RunId | None
    status: DeliveryStatus
    attempts: int = Field(ge=0)
    last_status_code: int | None
    next_attempt_at: datetime | None
    created_at: datetime
    updated_at: datetime


class DeliveryWithAttempts(Delivery):
    attempt_log: list[DeliveryAttempt]


DeliveryList = _list("DeliveryList", Delivery)


class TestEventAccepted(Out):
    event_id: EventId


class RecoverAccepted(Out):
    retried: int = Field(ge=0)
    next_cursor: str | None = Field(
        description="Pass it back as `cursor` for the next page of the log (each request reads at most 500 "
        "deliveries); null when the whole range is done."
    )


class Health(Out):
    status: str


class TestEventData(Out):
    subscription_id: SubId
    message: str


def literal(*values: str) -> Any:
    """The type `Literal[values]`, from values known at run time."""
    return Literal[values]


def _event_model(event_type: str, data: type[BaseModel]) -> type[BaseModel]:
    name = "".join(part.title() for part in event_type.split(".")) + "Event"  # RunSucceededEvent
    return create_model(
        name,
        __base__=Out,
        __doc__=f"The body POSTed for `{event_type}`.",
        type=(literal(event_type), ...),
        timestamp=(datetime, ...),
        data=(data, ...),
    )


CALLBACKS = {t: _event_model(t, RunEventData) for t in domain.RUN_EVENTS} | {
    domain.EVENT_TEST: _event_model(domain.EVENT_TEST, TestEventData)
}


# The vendor trail and the event feed ------------------------------------------------------------------


TrailKind = Literal["submitted", "poll", "rate_limited", "progress", "result", "error", "timeout"]


class TrailEntry(Out):
    """One step at the vendor."""

    at: datetime
    kind: TrailKind
    vendor_status: str | None = Field(description="The vendor's own status word, as it said it.")
    latency_ms: int | None = Field(description="How long the call to the vendor took.")
    detail: str | None


class RunDetail(Run):
    """A run with its vendor trail (only `GET /v1/runs/{id}` shows the trail)."""

    trail: list[TrailEntry] = Field(
        description="The first 2 and the last 8 steps at the vendor, oldest first."
    )
    trail_dropped: int = Field(ge=0, description="Steps left out between those.")
    rate_limited: int = Field(ge=0, description="The vendor's 429s for this run.")


class FeedEvent(Out):
    """An event in the client's feed: the callback's body, with its place in the feed."""

    id: str = Field(description="Its position in the feed: pass it as `iterator` or `Last-Event-ID`.")
    event_id: EventId = Field(description="The callbacks' `webhook-id`: deduplicate on it.")
    type: EventType
    timestamp: datetime
    data: RunEventData | TestEventData


class FeedPage(Out):
    data: list[FeedEvent]
    iterator: str = Field(description="Pass it back as `iterator` for what comes next.")
    done: bool = Field(description="The page reached the feed's end (for now).")
