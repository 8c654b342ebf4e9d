"""The API's shapes, declared once (pydantic v2): requests, responses and the callbacks' bodies.

They validate requests and give the OpenAPI document its schemas. The limits that are settings
(metadata, document size, the registered vendors and their ``options``) are applied by :func:`build`,
which derives the request models from the running :class:`~service.settings.Settings` at app start, so
that the server and its document enforce and state the same numbers. pydantic rather than msgspec:
msgspec is 2-5x faster per body (``bench/models.py``) but stops at the first bad field, and ``errors[]``
names every one.
"""

from __future__ import annotations

import functools
import json
import operator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    create_model,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, SkipJsonSchema
from typing_extensions import TypeAliasType, TypedDict

from service import domain
from service.api.problems import codes_by_status
from service.settings import Settings

REF = "#/components/schemas/"
B64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"
ID_BODY = "[0-9A-HJKMNP-TV-Z]{26}"  # domain.new_id: 26 Crockford base32 characters


RunId = Annotated[str, Field(pattern="^run_[0-9A-Za-z]+$")]
SubId = Annotated[str, Field(pattern="^sub_[0-9A-Za-z]+$")]
EventId = Annotated[str, Field(pattern="^evt_[0-9A-Za-z]+$")]
# Names of the registered vendors and operations: enums that build() adds to the document from Settings.
VendorName = Annotated[str, WithJsonSchema({"x-ref": "Vendor"})]
OperationName = Annotated[str, WithJsonSchema({"x-ref": "Operation"})]
MetadataOut = Annotated[dict[str, str], WithJsonSchema({"x-ref": "Metadata"})]


class RunStatus(StrEnum):
    queued, submitted, running = domain.QUEUED, domain.SUBMITTED, domain.RUNNING
    succeeded, failed, canceled = domain.SUCCEEDED, domain.FAILED, domain.CANCELED


EventType = StrEnum("EventType", {t.replace(".", "_"): t for t in domain.EVENT_TYPES})  # type: ignore[misc]
EventTypeFilter = Annotated[
    EventType | Literal["run.*"], Field(description="An event type, or `run.*` for every run event.")
]


class DeliveryStatus(StrEnum):
    pending, succeeded, failed = "pending", "succeeded", "failed"


class RunErrorCode(StrEnum):
    vendor_rejected, vendor_failed = domain.VENDOR_REJECTED, domain.VENDOR_FAILED
    vendor_unreachable, timed_out = domain.VENDOR_UNREACHABLE, domain.TIMED_OUT
    vendor_expired, result_too_large = domain.VENDOR_EXPIRED, domain.RESULT_TOO_LARGE


class Out(BaseModel):
    """A response: every member is always sent, so every member is required in the document."""

    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


class In(BaseModel):
    """A request: unknown members are refused, and JSON types are taken strictly (no "1" for 1)."""

    model_config = ConfigDict(extra="forbid", strict=True)


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

    run: Run
    result: dict[str, Any] | list[Any] | None = Field(description="The vendor's result, inline; else null.")
    result_url: str | None = Field(description="`/v1/runs/{id}/result` when the result is not inline.")


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


class Health(Out):
    status: str


class FieldError(TypedDict):
    field: str
    message: str
    pointer: NotRequired[str]  # a JSON pointer into the body (RFC 6901); absent for headers and query


class Problem(BaseModel):
    """An RFC 9457 problem, with the extra member `code`."""

    model_config = ConfigDict(json_schema_extra={"additionalProperties": True})

    type: str = Field(description="https://hookbridge.dev/errors/{code}")
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    code: Annotated[str, WithJsonSchema({"x-ref": "ProblemCode"})]
    instance: str = Field("", description="The request path.")
    errors: list[FieldError] = Field([], description="With `validation_error`: every bad field, and why.")


class TestEventData(Out):
    subscription_id: SubId
    message: str


def _literal(*values: str) -> Any:
    return Literal[values]


def _event_model(event_type: str, data: type[BaseModel]) -> type[BaseModel]:
    name = "".join(part.title() for part in event_type.split(".")) + "Event"  # RunSucceededEvent
    return create_model(
        name,
        __base__=Out,
        __doc__=f"The body POSTed for `{event_type}`.",
        type=(_literal(event_type), ...),
        timestamp=(datetime, ...),
        data=(data, ...),
    )


CALLBACKS = {t: _event_model(t, RunEventData) for t in domain.RUN_EVENTS} | {
    domain.EVENT_TEST: _event_model(domain.EVENT_TEST, TestEventData)
}


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("may be left out, not null")
    return value


Url = Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^https?://\S+$")]
# Any scheme but http(s) is refused by the URL policy (callback_url_not_allowed), after validation.
CallbackUrl = Annotated[str, Field(min_length=1, max_length=2048, json_schema_extra={"format": "uri"})]
NoNull = SkipJsonSchema[None]  # a PATCH member that may be absent, never null


class _DocumentFields(In):
    filename: str = Field("document", min_length=1, max_length=255)
    media_type: str = Field("application/octet-stream", max_length=127, pattern=r"^[\w.+-]+/[\w.+-]+$")


class DocumentByURL(_DocumentFields):
    """A document the vendor fetches."""

    url: Url


class DocumentByContent(_DocumentFields):
    """A document's bytes; build() states the size limit of the running settings."""

    content_base64: str = Field(min_length=4, pattern=B64, description="Standard base64.")


class DocumentInput(_DocumentFields):
    """Validates either document shape with errors at their own pointers; the document shows the two
    shapes as what they are, ``DocumentByURL`` or ``DocumentByContent``."""

    url: Url | NoNull = None
    content_base64: Annotated[str, Field(min_length=4, pattern=B64)] | NoNull = None

    @model_validator(mode="after")
    def _one_source(self) -> DocumentInput:
        if (self.url is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of url and content_base64")
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core: Any, handler: Any) -> dict[str, Any]:
        return {"oneOf": [{"x-ref": "DocumentByURL"}, {"x-ref": "DocumentByContent"}]}


class RunFields(In):
    """What every vendor's submission holds; build() adds ``vendor``, ``operation`` and ``options``."""

    vendor: str
    operation: str
    options: Any
    metadata: dict[str, str] = {}
    subscription_ids: list[Annotated[str, Field(pattern=f"^sub_{ID_BODY}$")]] = Field(
        [], max_length=50, description="Narrows delivery to these subscriptions of the caller."
    )
    zero_retention: bool = Field(False, description="Keep neither document nor result after delivery.")


class RunRequestBase(RunFields):
    document: DocumentInput


class SubscriptionFields(In):
    event_types: Annotated[list[EventTypeFilter], Field(min_length=1)] | None = Field(
        None, description="Omitted or null: the three terminal run events."
    )
    description: Annotated[str, Field(max_length=500)] | None = None
    metadata: dict[str, str] = {}
    max_in_flight: Annotated[int, Field(ge=1, le=1000)] | None = None
    rate_limit_per_s: Annotated[float, Field(gt=0, le=10000)] | None = None


class SubscriptionCreate(SubscriptionFields):
    url: CallbackUrl = Field(description="An http(s) URL whose addresses are allowed (CONTRACT §6).")


class SubscriptionUpdate(SubscriptionFields):
    """The members to change; the others stay."""

    url: Annotated[CallbackUrl | NoNull, AfterValidator(_not_null)] = None
    disabled: bool | NoNull = Field(None, description="false re-enables it and resets its health.")


class Recover(In):
    since: AwareDatetime = Field(description="RFC 3339 with an offset.")


# The event feed (GET /v1/events) and its streams ------------------------------------------------------


class TrailEntry(Out):
    """One step at the vendor."""

    at: datetime
    kind: Literal["submitted", "poll", "rate_limited", "progress", "result", "error", "timeout"]
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


class FeedQuery(In):
    """What a feed reader asks for; unknown parameters are refused."""

    model_config = ConfigDict(strict=False)

    type: Annotated[str, Field(max_length=200)] | NoNull = Field(
        None, description="Event types, comma-separated or repeated: exact types or `run.*`."
    )
    run_id: RunId | NoNull = Field(None, description="Only this run's events.")
    vendor: Annotated[str, Field(max_length=64)] | NoNull = Field(
        None, description="Only runs at this vendor."
    )


Position = Annotated[str, Field(max_length=64)]


class EventQuery(FeedQuery):
    iterator: Position | NoNull = Field(
        None, description="`iterator` of the last page; none: the oldest kept."
    )
    limit: int = Field(50, ge=1, le=200, description="Page size.")
    wait: float = Field(0, ge=0, le=30, description="Seconds to hold the request until a matching event.")


class StreamQuery(FeedQuery):
    last_event_id: Position | NoNull = Field(
        None, description="Resume after it (as the `Last-Event-ID` header)."
    )


class RunStreamQuery(In):
    model_config = ConfigDict(strict=False)

    last_event_id: Position | NoNull = Field(
        None, description="Resume after it (as the `Last-Event-ID` header)."
    )


class Page(In):
    """Query parameters of a list: unknown ones are refused."""

    model_config = ConfigDict(strict=False)

    limit: int = Field(50, ge=1, le=200, description="Page size.")
    cursor: Annotated[str, Field(max_length=512)] | NoNull = Field(
        None, description="`next_cursor` of the last page."
    )


class RunPage(Page):
    status: RunStatus | NoNull = Field(None, description="Only runs in this status.")
    vendor: str | NoNull = Field(None, description="Only runs at this vendor.")


class DeliveryPage(Page):
    status: DeliveryStatus | NoNull = Field(None, description="Only deliveries in this status.")


@dataclass(frozen=True)
class Models:
    """The request models with the running settings' limits, and the enums of the registered vendors."""

    runs: dict[str, type[RunRequestBase]]  # by vendor: the JSON body
    parts: dict[str, type[RunFields]]  # by vendor: the multipart ``request`` part
    subscription_create: type[SubscriptionCreate]
    subscription_update: type[SubscriptionUpdate]
    run_page: type[RunPage]
    schemas: dict[str, Any]  # component name -> JSON schema: every model of the document


def _metadata(settings: Settings) -> Any:
    limit = settings.max_metadata_value_bytes

    def fits(value: str) -> str:
        if len(value.encode()) > limit:
            raise ValueError(f"{value[:20]!r}… takes more than {limit} bytes of UTF-8")
        return value

    value = Annotated[str, Field(max_length=limit), AfterValidator(fits)]
    key = Annotated[str, Field(pattern=r"^[\w.:-]{1,40}$")]
    return TypeAliasType(
        "Metadata",
        Annotated[
            dict[key, value],
            Field(
                max_length=settings.max_metadata_pairs,
                description=f"Up to {settings.max_metadata_pairs} string pairs, echoed in every event; "
                f"keys of 1 to 40 letters, digits, '_', '-', '.', ':'; values of at most {limit} bytes.",
                examples=[{"order_id": "A-1001"}],
            ),
        ],
    )


def _document(settings: Settings) -> type[DocumentByContent]:
    most = (settings.max_document_bytes + 2) // 3 * 4
    b64 = Field(
        min_length=4,
        pattern=B64,
        # Larger is 413 document_too_large (checked while reading), not a 422: stated, not validated here.
        json_schema_extra={"maxLength": most},
        description=f"The document, standard base64; at most {settings.max_document_bytes} bytes decoded.",
    )
    return create_model("DocumentByContent", __base__=DocumentByContent, content_base64=(str, b64))


def _needs_options(options: type[BaseModel]) -> bool:
    try:
        return options() is None
    except ValidationError:
        return True


def _vendor_models(settings: Settings, metadata: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    parts: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for name, vendor in settings.vendors.items():
        ops = vendor.operations
        spec_options = vendor.spec.options if vendor.spec is not None else None
        options: Any = spec_options or dict[str, Any]
        needed = spec_options is not None and _needs_options(spec_options)
        default: Any = ... if needed else Field(default_factory=options)
        title = name.title()
        parts[name] = create_model(
            f"{title}RunRequestPart",
            __base__=RunFields,
            __doc__=f"A run at {name}: the `request` part of a multipart submission (no `document`).",
            vendor=(_literal(name), ...),
            operation=(_literal(*ops), "extract" if "extract" in ops else ops[0]),
            options=(options, default),
            metadata=(metadata, {}),
        )
        runs[name] = create_model(
            f"{title}RunRequest",
            __base__=(parts[name], RunRequestBase),
            __doc__=f"A run at {name}, as a JSON body.",
        )
    return runs, parts


def build(settings: Settings) -> Models:
    """The models and the document's schemas for these settings (limits, vendors, their options)."""
    metadata = _metadata(settings)
    runs, parts = _vendor_models(settings, metadata)
    create = create_model("SubscriptionCreate", __base__=SubscriptionCreate, metadata=(metadata, {}))
    update = create_model(
        "SubscriptionUpdate", __base__=SubscriptionUpdate, metadata=(metadata | NoNull, None)
    )
    vendors = tuple(settings.vendors)
    vendor: Any = Annotated[_literal(*vendors), WithJsonSchema({"x-ref": "Vendor"})]
    run_page = create_model(
        "RunPage",
        __base__=RunPage,
        vendor=(vendor | NoNull, Field(None, description="Only runs at this vendor.")),
    )
    operations = sorted({op for v in settings.vendors.values() for op in v.operations})
    enums = {
        "Vendor": {"type": "string", "enum": list(vendors), "description": "A registered vendor."},
        "Operation": {"type": "string", "enum": operations, "description": "What the vendor does."},
        "ProblemCode": {
            "type": "string",
            "enum": [c for codes in codes_by_status().values() for c in codes],
            "description": "The stable, machine-readable error code.",
        },
    }
    schemas = _schemas(runs, parts, create, update, _document(settings), DocumentByURL)
    return Models(runs, parts, create, update, run_page, {**schemas, **enums})


def _responses(cls: type[BaseModel]) -> list[type[BaseModel]]:
    """Every response model: the subclasses of ``Out`` (lists and callbacks included)."""
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_responses(direct))]


def _schemas(runs: dict[str, Any], parts: dict[str, Any], *request_models: Any) -> dict[str, Any]:
    responses: list[type[BaseModel]] = [*_responses(Out), Problem]
    named: list[tuple[str, Any, Any]] = [
        ("RunRequest", "validation", TypeAdapter(_discriminated(runs))),
        ("RunRequestPart", "validation", TypeAdapter(_discriminated(parts))),
        ("Recover", "validation", TypeAdapter(Recover)),
        *((m.__name__, "validation", TypeAdapter(m)) for m in request_models),
        *((m.__name__, "serialization", TypeAdapter(m)) for m in responses),
    ]
    top, defs = TypeAdapter.json_schemas(
        [(name, mode, adapter) for name, mode, adapter in named],
        ref_template=REF + "{model}",
        schema_generator=_Untitled,
    )
    out = dict(defs.get("$defs", {}))
    for (name, _mode), schema in top.items():
        out.setdefault(name, schema)
    return {name: _refs(schema) for name, schema in sorted(out.items())}


class _Untitled(GenerateJsonSchema):
    """No ``title`` on members: generators would name a type after each ("Vendor", "Metadata") and clash
    with the components of those names."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def json_schema(adapter: TypeAdapter[Any]) -> Any:
    return _refs(adapter.json_schema(ref_template=REF + "{model}", schema_generator=_Untitled))


def _refs(schema: Any) -> Any:
    """Replaces the ``x-ref`` placeholders (WithJsonSchema cannot name a component) by references, and
    states defaults in words: generators (openapi-typescript) make a member with a ``default`` required."""
    if isinstance(schema, dict):
        if "x-ref" in schema:
            return {"$ref": REF + schema["x-ref"]}
        out = {key: _refs(value) for key, value in schema.items() if key != "default"}
        if schema.get("default") not in (None, [], {}):
            default = f"Default: `{json.dumps(schema['default'])}`."
            out["description"] = f"{out['description']} {default}" if "description" in out else default
        return out
    if isinstance(schema, list):
        return [_refs(item) for item in schema]
    return schema


def _discriminated(models: dict[str, Any]) -> Any:
    union = functools.reduce(operator.or_, models.values())
    return Annotated[union, Field(discriminator="vendor")] if len(models) > 1 else union
