"""Reading requests: what no model can say (the body's size while it streams, JSON depth, multipart, the
document's decoded size, the size of ``options``), then validation by the declared models
(:mod:`service.api.models`), with every bad field reported (``errors[]``, each with a JSON pointer).

A run's JSON body that none of those checks can refuse is read in one pass (:func:`one_pass`: pydantic
parses the text itself); any other goes the full way, which says what is wrong with it."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request

from service.api.models import DocumentFields, Models, RunFields, RunRequestBase
from service.api.problems import (
    DocumentTooLarge,
    InvalidJSON,
    InvalidRequest,
    OptionsTooLarge,
    UnknownVendor,
    UnsupportedMediaType,
    ValidationFailed,
    VendorNotConfigured,
)
from service.config.settings import Settings

JSON_OVERHEAD = 256 * 1024  # what a JSON or multipart body may hold besides the document
_PRINTABLE = re.compile(r"^[\x20-\x7e]{1,255}$")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
M = TypeVar("M", bound=BaseModel)


def _real_loc(loc: tuple[Any, ...], root: Any, missing: bool) -> tuple[Any, ...]:
    """``loc`` without pydantic's union tags (``constrained-str``, ``none``, ``str-enum[EventType]``): only
    the steps that are in the request (a key or an index), and a missing member's own name."""
    out: list[Any] = []
    node = root
    for i, step in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and isinstance(step, str) and (step in node or (last and missing)):
            out.append(step)
            node = node.get(step)
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            out.append(step)
            node = node[step]
        elif root is None:
            out.append(step)  # nothing to check against: kept as pydantic gives it
    return tuple(out)


def field_errors(
    exc: ValidationError, prefix: tuple[str | int, ...] = (), *, body: bool = True, raw: Any = None
) -> list[Any]:
    """One entry per bad field (the first of its errors; a union's "is not null" last): a JSON pointer (in
    a body), the dotted name, and what is wrong with the value it names. With ``raw`` (what was
    validated), pydantic's union tags are left out of the pointer and the name."""
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] == "none_required")
    out: dict[tuple[Any, ...], dict[str, str]] = {}
    for error in errors:
        loc = (*prefix, *_real_loc(tuple(error["loc"]), raw, error["type"] == "missing"))
        if loc in out:
            continue
        value = error.get("input")
        got = f" (got {json.dumps(value)[:80]})" if isinstance(value, str | int | float | bool) else ""
        entry = {"field": ".".join(map(str, loc)), "message": error["msg"] + got}
        if body:
            entry["pointer"] = "".join(f"/{str(p).replace('~', '~0').replace('/', '~1')}" for p in loc)
        out[loc] = entry
    return list(out.values())


def validated(model: type[M], raw: bytes | str | dict[str, Any], *, prefix: tuple[str | int, ...] = ()) -> M:
    """``raw`` as ``model``, strictly; a run request comes parsed already (no second pass over a document
    in base64), which strict Python mode allows as it holds no enum or time."""
    try:
        if isinstance(raw, dict):
            return model.model_validate(raw, strict=True)
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        root = raw if isinstance(raw, dict) else _parsed_or_none(raw)
        raise ValidationFailed(
            "The request has invalid fields.", field_errors(exc, prefix, raw=root)
        ) from None


def _parsed_or_none(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def query(request: Request, model: type[M], *, lists: tuple[str, ...] = (), skip: str = "") -> M:
    """The query parameters, validated (an unknown one is refused); those in ``lists`` may be repeated
    and are joined with commas; those that start with ``skip`` are the caller's to check."""
    raw = {k: v for k, v in request.query_params.items() if not (skip and k.startswith(skip))}
    for name in lists:
        if name in raw:
            raw[name] = ",".join(request.query_params.getlist(name))
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ValidationFailed(
            "The query has invalid parameters.", field_errors(exc, body=False, raw=raw)
        ) from None


def small_body(request: Request) -> bool:
    """Whether the request declares a body of at most ``JSON_OVERHEAD`` bytes (a run with a URL
    document); a streamed body (no Content-Length) may be of any size."""
    declared = request.headers.get("content-length", "")
    return declared.isascii() and declared.isdigit() and int(declared) <= JSON_OVERHEAD


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and not (declared.isascii() and declared.isdigit()):  # "²".isdigit()
        raise InvalidRequest("Content-Length is not a number.")
    if declared is not None and int(declared) > limit:
        raise DocumentTooLarge(f"The request body is larger than {limit} bytes.")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise DocumentTooLarge(f"The request body is larger than {limit} bytes.")
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # Starlette replays a read body to form() and json()
    return body


def parse_json(raw: bytes, max_depth: int) -> Any:
    """The JSON value, refused (400) when it is not JSON, is nested deeper than ``max_depth``, holds NaN
    or Infinity, or a lone surrogate that no UTF-8 text can hold."""
    try:
        value = json.loads(raw, parse_constant=_no_constants)
    except ValueError as exc:
        raise InvalidJSON(f"The body is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidJSON("The JSON is nested too deep.") from None
    # A value is at most one level deeper than the containers on its deepest path, which are no more than
    # the brackets in the text (some may be inside strings): a typical body has a handful, so the walk is
    # only for the rare one with enough brackets to matter.
    brackets = raw.count(b"{") + raw.count(b"[")
    if brackets + 1 > max_depth and _depth(value, max_depth + 1) > max_depth:
        raise InvalidJSON(f"The JSON is nested deeper than {max_depth} levels.")
    if _SURROGATE_ESCAPE.search(raw) and not _encodable(value):
        raise InvalidJSON("The JSON holds a lone surrogate escape, which is not Unicode text.")
    if not isinstance(value, dict):
        raise InvalidJSON("The body must be a JSON object.")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")  # not JSON (RFC 8259); a vendor would choke on it


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _depth(value: Any, cap: int) -> int:
    stack = [(value, 1)]
    deepest = 0
    while stack and deepest < cap:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, level + 1) for child in children)
    return deepest


async def json_body(request: Request, settings: Settings, model: type[M]) -> M:
    """A JSON request body of ``model``; an empty body without a content type is ``{}``."""
    content_type = request.headers.get("content-type", "")
    raw = await read_body(request, JSON_OVERHEAD)
    if not raw.strip() and not content_type:
        raw = b"{}"
    elif content_type and not content_type.split(";")[0].strip().lower().endswith("json"):
        raise UnsupportedMediaType("Send the body as application/json.")
    parse_json(raw, settings.max_json_depth)
    return validated(model, raw)


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is not None and not _PRINTABLE.match(key):
        raise ValidationFailed(
            "Idempotency-Key must be 1 to 255 printable ASCII characters.",
            [{"field": "Idempotency-Key", "message": f"1 to 255 printable characters (got {len(key)})"}],
        )
    return key


@dataclass(frozen=True)
class Submission:
    """A validated run request; the document's bytes travel beside it (``content``)."""

    request: RunFields
    document: dict[str, Any]  # url, or filename + media_type + size
    content: bytes | None
    options: dict[str, Any]

    def fingerprint(self) -> str:
        """What makes two submissions "the same request" for ``Idempotency-Key``."""
        ident = self.request.model_dump(mode="json", exclude={"document", "options"})
        ident.update(document=self.document, options=self.options)
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode())
        digest.update(hashlib.sha256(self.content or b"").digest())
        return digest.hexdigest()


async def submission(request: Request, settings: Settings, models: Models) -> Submission:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        return await _multipart(request, settings, models)
    if content_type not in ("application/json", "") and not content_type.endswith("+json"):
        raise UnsupportedMediaType("Send application/json or multipart/form-data.")
    raw = await read_body(request, settings.max_document_bytes * 4 // 3 + JSON_OVERHEAD)
    req = one_pass(raw, settings, models)
    if req is None:
        body = parse_json(raw, settings.max_json_depth)
        req = validated(_model(models.runs, body, settings), body)
    assert isinstance(req, RunRequestBase)
    doc = req.document
    meta = {"filename": doc.filename, "media_type": doc.media_type}
    if doc.url is not None:
        return _done(req, {"url": doc.url, **meta}, None)
    content = _decoded(doc.content_base64 or "", settings.max_document_bytes)
    return _done(req, {**meta, "size": len(content)}, content)


class _Head(msgspec.Struct):
    """What the one pass needs to know first: the vendor (its model) and the text of the options."""

    vendor: str
    options: msgspec.Raw = msgspec.Raw(b"null")


_HEAD = msgspec.json.Decoder(_Head)  # strict JSON: no NaN, no Infinity; the last of a repeated key wins
# json.dumps(options), as _options_fit measures them, takes at most 6 bytes for a byte of their JSON text
# (DEL becomes \u007f; other characters and numbers grow less: 1e15 is 1000000000000000.0).
_OPTIONS_GROWTH = 6


def one_pass(raw: bytes, settings: Settings, models: Models) -> RunRequestBase | None:
    """The run request in ``raw`` validated by pydantic from the JSON text itself (no Python tree of the
    body first: about half the CPU of json.loads, then validating the tree), when none of the full path's
    checks (:func:`parse_json`, :func:`_model`) can refuse it and its vendor's model reads text as it
    reads the parsed value (``Models.one_pass``). None for any other body, valid or not: the full path
    then reads it, and says what is wrong with it. tests/unit/test_one_pass_body.py holds the two paths
    to the same answer. Only a body of at most ``JSON_OVERHEAD`` bytes (a URL, or a small document
    inline): one that passes these checks and is refused by its model is read twice, and twice a 64 MB
    document would be a hostile tenant's lever."""
    if len(raw) > JSON_OVERHEAD:
        return None
    if raw.count(b"{") + raw.count(b"[") + 1 > settings.max_json_depth or _SURROGATE_ESCAPE.search(raw):
        return None  # parse_json would walk its depth, or look for a lone surrogate
    try:
        head = _HEAD.decode(raw)  # also refuses what is not a JSON object, NaN and Infinity
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    model = models.one_pass.get(head.vendor)
    if model is None or settings.vendors[head.vendor].missing:
        return None
    if len(head.options) * _OPTIONS_GROWTH > settings.max_options_bytes:
        return None  # may not fit: _options_fit measures them
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError:
        return None


def _model(
    by_vendor: dict[str, type[M]], body: dict[str, Any], settings: Settings, pointer: str = ""
) -> type[M]:
    """The vendor's model for ``body``, once its options fit the size limit."""
    _options_fit(body, settings.max_options_bytes, pointer)
    vendor = body.get("vendor")
    if not isinstance(vendor, str):
        message = "required" if vendor is None else f"must be a string (got {json.dumps(vendor)[:40]})"
        raise ValidationFailed(
            "The request has invalid fields.",
            [{"field": "vendor", "pointer": f"{pointer}/vendor", "message": message}],
        )
    if vendor not in by_vendor:
        raise UnknownVendor(f"Unknown vendor {vendor[:40]!r}; use one of {', '.join(by_vendor)}.")
    missing = settings.vendors[vendor].missing
    if missing:
        # Installed, not configured: the API starts without the vendor's settings, and says what is unset.
        raise VendorNotConfigured(
            f"Vendor {vendor!r} is not configured: set {', '.join(missing)}.", missing=list(missing)
        )
    return by_vendor[vendor]


def _decoded(b64: str, most: int) -> bytes:
    if len(b64) * 3 // 4 > most + 3:
        raise DocumentTooLarge(f"The document is larger than {most} bytes.")
    content = base64.b64decode(b64, validate=True)  # the model's pattern has checked the alphabet
    if len(content) > most:
        raise DocumentTooLarge(f"The document is larger than {most} bytes.")
    return content


def _done(req: RunFields, document: dict[str, Any], content: bytes | None) -> Submission:
    options = req.options if isinstance(req.options, dict) else req.options.model_dump(exclude_unset=True)
    return Submission(req, document, content, options)


def _options_fit(body: dict[str, Any], most: int, pointer: str) -> None:
    """Every transition of the run decodes its options inside Lua: a large one costs every step."""
    size = len(json.dumps(body.get("options"), separators=(",", ":")).encode())
    if size > most:
        raise OptionsTooLarge(
            f"options take {size} bytes as JSON, more than {most} (HOOKBRIDGE_MAX_OPTIONS_BYTES).",
            errors=[
                {"field": "options", "pointer": f"{pointer}/options", "message": f"at most {most} bytes"}
            ],
        )


async def _multipart(request: Request, settings: Settings, models: Models) -> Submission:
    most = settings.max_document_bytes
    await read_body(request, most + JSON_OVERHEAD)  # caches the body; refuses early when too large
    try:
        async with request.form(max_files=1, max_fields=4) as form:
            file, part = form.get("file"), form.get("request")
            missing = [
                {"field": name, "pointer": f"/{name}", "message": f"the multipart body needs a '{name}' part"}
                for name, ok in (("file", isinstance(file, UploadFile)), ("request", isinstance(part, str)))
                if not ok
            ]
            if missing:
                raise ValidationFailed("The multipart body misses a part.", missing)
            assert isinstance(file, UploadFile) and isinstance(part, str)
            content = await file.read()
            filename = file.filename or "document"
            media_type = (file.content_type or "application/octet-stream").split(";")[0].strip()
    except MultiPartException as exc:
        raise InvalidRequest(f"The multipart body cannot be read: {exc.message}") from None
    body = parse_json(part.encode(), settings.max_json_depth)
    req = validated(_model(models.parts, body, settings, "/request"), body, prefix=("request",))
    # The file part's name and type pass the JSON document's own checks (length, pattern, no control
    # characters): one validation for both doors.
    validated(DocumentFields, {"filename": filename, "media_type": media_type}, prefix=("file",))
    if len(content) > most:
        raise DocumentTooLarge(f"The document is larger than {most} bytes.")
    if not content:
        raise ValidationFailed(
            "The file is empty.", [{"field": "file", "pointer": "/file", "message": "the file is empty"}]
        )
    return _done(req, {"filename": filename, "media_type": media_type, "size": len(content)}, content)


def bad_cursor() -> ValidationFailed:
    return ValidationFailed(
        "The cursor is not one this API gave out.",
        [{"field": "cursor", "message": "not a cursor this API gave out"}],
    )
