"""``body.one_pass``: a run's JSON body read in one pass (pydantic validating the text itself) gives the
request the full path gives (``parse_json``, then ``_model`` and ``validated`` on the parsed tree), or
nothing, whereupon the full path reads it and answers with its own errors. Never a request the full path
refuses, never another request than the one it gives: for every vendor, a table of bodies at and past
each check, and seeded random damage to valid ones."""

from __future__ import annotations

import datetime
import decimal
import enum
import json
import random
import uuid
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, field_validator

from service.api import models
from service.api.body import JSON_OVERHEAD, _model, one_pass, parse_json, validated
from service.api.models import RunRequestBase, reads_text_as_tree
from service.api.problems import Problem
from service.config.settings import Settings
from service.vendors.registry import load_settings

CONFIGURED = {
    "HOOKBRIDGE_AZURE_DI_BASE_URL": "https://az.example",
    "HOOKBRIDGE_AZURE_DI_API_KEY": "k",
    "HOOKBRIDGE_CLOUDSQUID_API_KEY": "k",
    "HOOKBRIDGE_GOOGLE_DOCAI_PROJECT": "p",
    "HOOKBRIDGE_GOOGLE_DOCAI_GCS_BUCKET": "b",
    "HOOKBRIDGE_NUTRIENT_API_KEY": "k",
    "HOOKBRIDGE_UPTIQ_API_KEY": "k",
    "HOOKBRIDGE_LLAMAPARSE_API_KEY": "k",
    "HOOKBRIDGE_MAX_OPTIONS_BYTES": "600",
    "HOOKBRIDGE_MAX_JSON_DEPTH": "8",
}
SETTINGS = load_settings(CONFIGURED)
MODELS = models.build(SETTINGS)
# A valid options object for each vendor.
OPTIONS: dict[str, Any] = {
    "azure_di": {"model_id": "prebuilt-invoice"},
    "cloudsquid": {"file_type": "uri"},
    "google_docai": {},
    "nutrient": {"instructions": {"mode": "fast"}},
    "textract": {"feature_types": ["TABLES"]},
    "uptiq": {"documentType": "BalanceSheet"},
    "llamaparse": {"tier": "agentic"},
}
URL_DOC = {"url": "https://docs.example/a.pdf", "media_type": "application/pdf"}
B64_DOC = {"content_base64": "JVBERi0xLjcK", "filename": "a.pdf"}


def _full(raw: bytes, settings: Settings = SETTINGS, m: models.Models = MODELS) -> Any:
    """What the full path makes of ``raw``: the request, or the problem it answers with."""
    try:
        body = parse_json(raw, settings.max_json_depth)
        return validated(_model(m.runs, body, settings), body)
    except Problem as problem:
        return problem


def _same(raw: bytes, settings: Settings = SETTINGS, m: models.Models = MODELS) -> RunRequestBase | None:
    """One pass's answer, held to the full path's: nothing where that refuses, else the same request."""
    fast = one_pass(raw, settings, m)
    full = _full(raw, settings, m)
    if fast is None:
        return None
    assert not isinstance(full, Problem), (raw, full)
    assert type(fast) is type(full), raw
    assert fast == full, raw
    assert fast.model_dump(exclude_unset=True) == full.model_dump(exclude_unset=True), raw
    return fast


def _body(vendor: str, **extra: Any) -> dict[str, Any]:
    return {"vendor": vendor, "document": URL_DOC, "options": OPTIONS[vendor], **extra}


VALID: list[dict[str, Any]] = [
    body
    for vendor in OPTIONS
    for body in (
        _body(vendor),
        _body(vendor, document=B64_DOC),
        _body(vendor, metadata={"customer": "acme", "é": "ü"}, zero_retention=True),
        _body(vendor, subscription_ids=["sub_" + "0" * 26]),
    )
] + [{"vendor": v, "document": URL_DOC} for v in ("cloudsquid", "google_docai", "nutrient", "textract")]


@pytest.mark.parametrize("body", VALID, ids=lambda b: b["vendor"])
def test_a_valid_body_takes_one_pass_to_the_same_request(body: dict[str, Any]) -> None:
    assert set(MODELS.one_pass) == set(MODELS.runs)  # every built-in vendor's model reads text as a tree
    for raw in (json.dumps(body).encode(), json.dumps(body, indent=2, ensure_ascii=False).encode()):
        assert _same(raw) is not None


def _raw(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


_DOC = b'{"vendor": "nutrient", "document": {"url": "https://d.example/a"}'  # the rest to follow
REFUSED: list[Any] = [
    b"",
    b"[]",
    b'"nutrient"',
    b"{",
    b"\xef\xbb\xbf" + _DOC + b"}",  # a BOM: json.loads reads it, pydantic does not
    _DOC + b', "options": {"instructions": {"n": NaN}}}',
    _DOC + b', "options": {"instructions": {"n": -Infinity}}}',
    _DOC + b', "metadata": {"a": "\\udc00"}}',
    _DOC + b', "metadata": {"a": "x\\ud800"}}',
    {"vendor": "nosuch", "document": URL_DOC},
    {"vendor": 7, "document": URL_DOC},
    {"document": URL_DOC},
    _body("nutrient", extra=1),
    _body("nutrient", zero_retention="true"),
    _body("nutrient", metadata={"a": 1}),
    _body("nutrient", metadata={"a": "x" * 5000}),
    _body("nutrient", subscription_ids=["sub_x"] * 51),
    _body("nutrient", operation="nosuch"),
    _body("nutrient", document={**URL_DOC, **B64_DOC}),
    _body("nutrient", document={"url": "ftp://d.example/a"}),
    _body("nutrient", document={"content_base64": "not base64"}),
    _body("azure_di", options={}),
    _body("textract", options={"feature_types": "TABLES"}),
    _body("nutrient", options={"instructions": {"k": [[[[[[[1]]]]]]]}}),  # deeper than 8
    _body("nutrient", options={"instructions": {"k": "x" * 600}}),  # options over 600 bytes
    _body("nutrient", options={"instructions": {"k": "\x7f" * 100}}),  # 100 bytes sent, 600 as json.dumps
    _body("nutrient", options={"instructions": {"k": "é" * 99}}),
    _body("nutrient", options={"instructions": {"k": [1e15] * 30}}),
    # Repeated members: json.loads keeps the last, and so must the one pass.
    b'{"vendor": "nosuch", "vendor": "nutrient", "document": {"url": "https://d.example/a"}}',
    b'{"vendor": "nutrient", "vendor": "nosuch", "document": {"url": "https://d.example/a"}}',
    b'{"vendor": "nutrient", "document": {"url": "https://d.example/a"}, "options": {"instructions": 1},'
    b' "options": {"instructions": {}}}',
    b'{"vendor": "nutrient", "document": {"url": "https://d.example/a"}, "options": {"instructions": {}},'
    b' "options": {"instructions": 1}}',
]


@pytest.mark.parametrize("body", REFUSED, ids=range(len(REFUSED)))
def test_a_body_at_or_past_a_check_gets_the_full_paths_answer(body: Any) -> None:
    """Each is refused by the full path, or (a repeated member) read alike by both."""
    raw = _raw(body)
    _same(raw)
    if isinstance(_full(raw), Problem):
        assert one_pass(raw, SETTINGS, MODELS) is None


def test_a_vendor_not_configured_goes_the_full_way() -> None:
    settings = load_settings({**CONFIGURED, "HOOKBRIDGE_NUTRIENT_API_KEY": ""})
    m = models.build(settings)
    raw = _raw(_body("nutrient"))
    assert one_pass(raw, settings, m) is None
    assert type(_full(raw, settings, m)).__name__ == "VendorNotConfigured"


def test_options_that_may_not_fit_go_the_full_way() -> None:
    """The one pass measures the options' text; json.dumps may take up to 6 times as many bytes."""
    assert _same(_raw(_body("nutrient", options={"instructions": {"k": "x" * 70}}))) is not None
    assert (
        one_pass(_raw(_body("nutrient", options={"instructions": {"k": "x" * 100}})), SETTINGS, MODELS)
        is None
    )


_DAMAGE = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"0", b"-", b"e", b" ", b"n", b"\x7f", b"\xc3"]


def test_damaged_bodies_never_read_otherwise() -> None:
    """Seeded random damage to valid bodies (a byte dropped, inserted, replaced; a member repeated):
    wherever the one pass answers, the full path answers alike."""
    rng = random.Random(30)
    taken = refused = 0
    for n in range(3000):
        raw = bytearray(json.dumps(VALID[n % len(VALID)]).encode())
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(raw))
            kind = rng.randrange(4)
            if kind == 0:
                del raw[at]
            elif kind == 1:
                raw[at:at] = rng.choice(_DAMAGE)
            elif kind == 2:
                raw[at : at + 1] = rng.choice(_DAMAGE)
            else:
                end = raw.rfind(b"}")
                raw[end:end] = b', "zero_retention": ' + rng.choice([b"true", b"1", b'"x"', b"null"])
        if _same(bytes(raw)) is not None:
            taken += 1
        elif isinstance(_full(bytes(raw)), Problem):
            refused += 1
    assert taken > 200 and refused > 1000, (taken, refused)  # the damage reaches both answers


class Color(enum.Enum):
    RED = "red"


def _options_of(annotation: Any) -> type[BaseModel]:
    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        value: annotation = None

    return Options


@pytest.mark.parametrize(
    ("annotation", "alike"),
    [
        (str, True),
        (int | None, True),
        (list[dict[str, float]], True),
        (dict[str, Any], True),
        (Color, False),  # strict Python takes only Color.RED, strict JSON "red"
        (datetime.datetime, False),
        (datetime.date, False),
        (uuid.UUID, False),
        (decimal.Decimal, False),
        (bytes, False),
        (tuple[int, ...], False),
        (set[str], False),
        (list[Color] | None, False),
    ],
)
def test_a_model_reads_text_as_a_tree_only_with_json_types(annotation: Any, alike: bool) -> None:
    assert reads_text_as_tree(_options_of(annotation)) is alike


def test_a_validator_sees_the_same_value_either_way() -> None:
    class Options(BaseModel):
        name: str

        @field_validator("name")
        @classmethod
        def _upper(cls, value: str) -> str:
            return value.upper()

    assert reads_text_as_tree(Options)
    assert Options.model_validate_json(b'{"name": "a"}', strict=True) == Options.model_validate(
        {"name": "a"}, strict=True
    )


def test_a_large_body_is_read_once() -> None:
    """A document inline past ``JSON_OVERHEAD`` goes the full way alone: were it refused by its model
    after one pass, it would have been read twice."""
    small = _body("nutrient", document={"content_base64": "A" * (JSON_OVERHEAD - 400)})
    large = _body("nutrient", document={"content_base64": "A" * JSON_OVERHEAD})
    assert _same(_raw(small)) is not None
    assert one_pass(_raw(large), SETTINGS, MODELS) is None
    assert not isinstance(_full(_raw(large)), Problem)
