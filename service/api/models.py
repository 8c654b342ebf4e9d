"""The API's requests, declared once (pydantic v2), and the OpenAPI document's schemas.

The request models validate requests; with the public shapes (:mod:`service.core.shapes`: responses and
callback bodies) they give the document its schemas. The limits that are settings
(metadata, document size, the registered vendors and their ``options``) are applied by :func:`build`,
which derives the request models from the running :class:`~service.config.settings.Settings` at app start, so
that the server and its document enforce and state the same numbers. pydantic rather than msgspec:
msgspec is 2-5x faster per body (``bench/models.py``) but stops at the first bad field, and ``errors[]``
names every one.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
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

from service.api.problems import codes_by_status
from service.config.settings import Settings
from service.core import domain
from service.core.shapes import DeliveryStatus, EventType, EventTypeFilter, Out, RunId, RunStatus, literal
from service.delivery.schedule import MAX_IN_FLIGHT_MAX, RATE_LIMIT_MAX_PER_S, RATE_LIMIT_MIN_PER_S
from service.vendors import registry

REF = "#/components/schemas/"
B64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"


class In(BaseModel):
    """A request: unknown members are refused, and JSON types are taken strictly (no "1" for 1)."""

    model_config = ConfigDict(extra="forbid", strict=True)


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
    request_id: str = Field("", description="The request's id, as its `X-Request-Id` header.")


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("may be left out, not null")
    return value


Url = Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^https?://\S+$")]
# Any scheme but http(s) is refused by the URL policy (callback_url_not_allowed), after validation.
CallbackUrl = Annotated[str, Field(min_length=1, max_length=2048, json_schema_extra={"format": "uri"})]
NoNull = SkipJsonSchema[None]  # a PATCH member that may be absent, never null


class DocumentFields(In):
    """A document's name and type, as either door (JSON, multipart) gives them."""

    # No control characters: the name goes into vendors' multipart headers and the run's record.
    filename: str = Field("document", min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")
    media_type: str = Field(
        "application/octet-stream", max_length=127, pattern=r"^[A-Za-z0-9_.+-]+/[A-Za-z0-9_.+-]+$"
    )


class DocumentByURL(DocumentFields):
    """A document the vendor fetches."""

    url: Url


class DocumentByContent(DocumentFields):
    """A document's bytes; build() states the size limit of the running settings."""

    content_base64: str = Field(min_length=4, pattern=B64, description="Standard base64.")


class DocumentInput(DocumentFields):
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
    subscription_ids: list[Annotated[str, Field(pattern=f"^sub_{domain.ID_BODY}$")]] = Field(
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
    max_in_flight: Annotated[int, Field(ge=1, le=MAX_IN_FLIGHT_MAX)] | None = None
    rate_limit_per_s: (
        Annotated[
            float,
            Field(ge=RATE_LIMIT_MIN_PER_S, le=RATE_LIMIT_MAX_PER_S, allow_inf_nan=False),
        ]
        | None
    ) = Field(None, description="Deliveries per second at most; from one each 1,000 s to 10,000 a second.")


class SubscriptionCreate(SubscriptionFields):
    url: CallbackUrl = Field(description="An http(s) URL whose addresses are allowed (CONTRACT §6).")


class SubscriptionUpdate(SubscriptionFields):
    """The members to change; the others stay."""

    url: Annotated[CallbackUrl | NoNull, AfterValidator(_not_null)] = None
    disabled: bool | NoNull = Field(None, description="false re-enables it and resets its health.")


class Recover(In):
    since: AwareDatetime = Field(description="RFC 3339 with an offset.")
    until: AwareDatetime | None = Field(None, description="Exclusive; RFC 3339 with an offset.")
    cursor: Annotated[str, Field(min_length=1, max_length=1024)] | None = Field(
        None, description="`next_cursor` of the previous answer: the next page of the log."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Recover:
        if self.until is not None and self.until < self.since:
            raise ValueError("until is before since")
        return self


class TestEventRequest(In):
    """Which event to send; none (or an empty body): `subscription.test`."""

    event_type: Annotated[EventType | NoNull, AfterValidator(_not_null)] = Field(
        None,
        description="Any concrete event type: an example of it, shaped as the real one with "
        '`"example": true` in `data`, whatever the subscription\'s `event_types`; not in the feed.',
    )


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


def _rfc3339(value: Any) -> Any:
    # Lax mode would take a number ("1767225600") as Unix time: the filters take RFC 3339 only.
    if not (isinstance(value, str) and RFC3339.fullmatch(value)):
        raise ValueError("not an RFC 3339 time with an offset (2026-01-01T00:00:00Z)")
    return value


RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")
QueryTime = Annotated[AwareDatetime, BeforeValidator(_rfc3339)]
# Query parameters ``metadata.KEY=VALUE`` (runs): not a member of the model, which cannot name them.
METADATA_PREFIX = "metadata."
METADATA_KEY = re.compile(r"[\w.:-]{1,40}")


class RunPage(Page):
    status: RunStatus | NoNull = Field(None, description="Only runs in this status.")
    vendor: str | NoNull = Field(None, description="Only runs at this vendor.")
    created_after: QueryTime | NoNull = Field(
        None, description="Only runs created at or after this time: RFC 3339 with an offset."
    )
    created_before: QueryTime | NoNull = Field(
        None, description="Only runs created before this time (exclusive): RFC 3339 with an offset."
    )


class DeliveryPage(Page):
    status: DeliveryStatus | NoNull = Field(None, description="Only deliveries in this status.")
    event_type: EventType | NoNull = Field(None, description="Only deliveries of this event type.")
    run_id: RunId | NoNull = Field(None, description="Only deliveries of this run's events.")


@dataclass(frozen=True)
class Models:
    """The request models with the running settings' limits, and the enums of the registered vendors."""

    runs: dict[str, type[RunRequestBase]]  # by vendor: the JSON body
    parts: dict[str, type[RunFields]]  # by vendor: the multipart ``request`` part
    subscription_create: type[SubscriptionCreate]
    subscription_update: type[SubscriptionUpdate]
    run_page: type[RunPage]
    schemas: dict[str, Any]  # component name -> JSON schema: every model of the document
    # by vendor: the JSON body's model where it reads JSON text as it reads the parsed value (body.one_pass)
    one_pass: dict[str, type[RunRequestBase]]


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


def _document_input(schemes: tuple[str, ...]) -> Any:
    """The run's document for a vendor that also reads URLs of ``schemes`` itself (``s3://``, ``gs://``,
    contract §10); other vendors keep :class:`DocumentInput` (``http(s)`` only)."""
    if not schemes:
        return DocumentInput
    alternatives = "|".join(["https?", *(re.escape(s) for s in schemes)])
    url = Annotated[str, Field(min_length=1, max_length=2048, pattern=rf"^({alternatives})://\S+$")]
    name = "DocumentInput" + "".join(s.title() for s in schemes)
    return create_model(name, __base__=DocumentInput, url=(url | NoNull, None))


def _vendor_models(settings: Settings, metadata: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    parts: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for name, vendor in settings.vendors.items():
        ops = vendor.operations
        spec = registry.spec_of(vendor)
        spec_options = spec.options if spec is not None else None
        options: Any = spec_options or dict[str, Any]
        needed = spec_options is not None and _needs_options(spec_options)
        default: Any = ... if needed else Field(default_factory=options)
        title = "".join(part.title() for part in name.split("_"))  # azure_di -> AzureDi
        parts[name] = create_model(
            f"{title}RunRequestPart",
            __base__=RunFields,
            __doc__=f"A run at {name}: the `request` part of a multipart submission (no `document`).",
            vendor=(literal(name), ...),
            operation=(literal(*ops), "extract" if "extract" in ops else ops[0]),
            options=(options, default),
            metadata=(metadata, {}),
        )
        schemes = spec.document_schemes if spec is not None else ()
        own_document: dict[str, Any] = {"document": (_document_input(schemes), ...)} if schemes else {}
        runs[name] = create_model(
            f"{title}RunRequest",
            __base__=(parts[name], RunRequestBase),
            __doc__=f"A run at {name}, as a JSON body.",
            **own_document,
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
    vendor: Any = Annotated[literal(*vendors), WithJsonSchema({"x-ref": "Vendor"})]
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
    schemas = _schemas(runs, parts, create, update, _document(settings), DocumentByURL, TestEventRequest)
    one_pass = {name: model for name, model in runs.items() if reads_text_as_tree(model)}
    return Models(runs, parts, create, update, run_page, {**schemas, **enums}, one_pass)


# Core schemas that strict validation treats alike in JSON text and in its parsed value (json.loads):
# the JSON types, containers of them, models and their fields, unions, defaults and validators (which
# see the parsed value either way). Not among them: enums, dates and times, UUIDs, decimals, bytes,
# tuples and sets, which strict Python validation takes only as their own objects, strict JSON
# validation from text.
_TEXT_AS_TREE = frozenset(
    {
        "any", "none", "bool", "int", "float", "str", "literal", "list", "dict", "nullable", "default",
        "union", "tagged-union", "chain", "model", "model-fields", "model-field", "typed-dict",
        "typed-dict-field", "definitions", "definition-ref", "custom-error", "function-before",
        "function-after", "function-wrap", "function-plain",
    }
)  # fmt: skip
# Members of a core schema that hold no schema that validates: a validator's function, what serializes.
_NOT_SCHEMAS = frozenset({"function", "metadata", "serialization", "computed_fields"})


def reads_text_as_tree(model: type[BaseModel]) -> bool:
    """Whether strict validation of JSON text by ``model`` gives what strict validation of the text's
    ``json.loads`` gives: every schema in its core schema (a dict with a ``type``) is one of
    :data:`_TEXT_AS_TREE`. A type it does not know (a vendor's options may hold any) answers no."""
    stack: list[Any] = [model.__pydantic_core_schema__]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str) and kind not in _TEXT_AS_TREE:
                return False
            stack.extend(value for key, value in node.items() if key not in _NOT_SCHEMAS)
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return True


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
