"""Reading request bodies: size, JSON depth, and the fields of each request. Every refusal is an
:class:`InvalidInput` that the problems module turns into an RFC 9457 answer; nothing is written before
a request has passed here."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

from service.domain import EVENT_TYPES, InvalidInput, ValidationErrors
from service.settings import Settings

JSON_OVERHEAD = 256 * 1024  # what a JSON or multipart body may hold besides the document
_MEDIA_TYPE = re.compile(r"^[\w.+-]+/[\w.+-]+$")
_PRINTABLE = re.compile(r"^[\x20-\x7e]{1,255}$")
_METADATA_KEY = re.compile(r"^[\w.:-]{1,40}$")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
# The exact shapes of the ids we hand out (domain.new_id; deliveries: a digest in _fanout.lua). An id is
# checked before it becomes part of a key, so that "sub_X:deliveries" can never name another key.
_IDS = {
    "run": re.compile(r"run_[0-9A-HJKMNP-TV-Z]{26}"),
    "sub": re.compile(r"sub_[0-9A-HJKMNP-TV-Z]{26}"),
    "dlv": re.compile(r"dlv_[0-9a-f]{26}"),
}


def is_id(kind: str, value: str) -> bool:
    """Whether ``value`` has the shape of an id of ``kind`` (``run``, ``sub``, ``dlv``) that we issue."""
    return _IDS[kind].fullmatch(value) is not None


def too_large(detail: str) -> InvalidInput:
    return InvalidInput(detail, code="document_too_large", status=413)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_large(f"The request body is larger than {limit} bytes.")
        except ValueError:
            raise InvalidInput(
                "Content-Length is not a number.", code="invalid_request", status=400
            ) from None
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"The request body is larger than {limit} bytes.")
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # Starlette replays a read body to form() and json()
    return body


def parse_json(raw: bytes, max_depth: int) -> Any:
    try:
        value = json.loads(raw, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        detail = (
            f"The body is not valid JSON: {exc}"
            if isinstance(exc, ValueError)
            else "The JSON is nested too deep."
        )
        raise InvalidInput(detail, code="invalid_json", status=400) from None
    if _depth(value, max_depth + 1) > max_depth:
        raise InvalidInput(
            f"The JSON is nested deeper than {max_depth} levels.", code="invalid_json", status=400
        )
    if _SURROGATE_ESCAPE.search(raw) and not _encodable(value):
        # json.loads accepts a lone "\udcff"; no such string can be encoded as UTF-8 (or stored).
        raise InvalidInput(
            "The JSON holds a lone surrogate escape, which is not Unicode text.",
            code="invalid_json",
            status=400,
        )
    return value


def _no_constants(name: str) -> Any:
    # NaN and Infinity are not JSON (RFC 8259), and a vendor would choke on them later.
    raise ValueError(f"{name} is not a JSON number")


def _encodable(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return False
    return True


def _depth(value: Any, cap: int) -> int:
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest >= cap:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


async def json_object(request: Request, settings: Settings, limit: int = JSON_OVERHEAD) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "")
    raw = await read_body(request, limit)
    if not raw.strip() and not content_type:
        return {}
    if content_type and not content_type.split(";")[0].strip().lower().endswith("json"):
        raise InvalidInput("Send the body as application/json.", code="unsupported_media_type", status=415)
    value = parse_json(raw, settings.max_json_depth)
    if not isinstance(value, dict):
        raise InvalidInput("The body must be a JSON object.", code="invalid_json", status=400)
    return value


@dataclass(frozen=True)
class RunRequest:
    vendor: str
    operation: str
    document: dict[str, Any]  # url, or filename + media_type + size (the bytes travel separately)
    content: bytes | None
    options: dict[str, Any]
    metadata: dict[str, str]
    subscription_ids: list[str]
    zero_retention: bool

    def fingerprint(self) -> str:
        """What makes two submissions "the same request" for ``Idempotency-Key``."""
        digest = hashlib.sha256()
        ident = {
            "vendor": self.vendor,
            "operation": self.operation,
            "document": self.document,
            "options": self.options,
            "metadata": self.metadata,
            "subscription_ids": self.subscription_ids,
            "zero_retention": self.zero_retention,
        }
        digest.update(json.dumps(ident, sort_keys=True).encode())
        digest.update(hashlib.sha256(self.content or b"").digest())
        return digest.hexdigest()


_RUN_FIELDS = {"vendor", "operation", "document", "options", "metadata", "subscription_ids", "zero_retention"}


async def run_request(request: Request, settings: Settings) -> RunRequest:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    max_doc = settings.max_document_bytes
    if content_type == "multipart/form-data":
        await read_body(request, max_doc + JSON_OVERHEAD)  # caches the body; refuses early when too large
        try:
            async with request.form(max_files=1, max_fields=4) as form:
                file = form.get("file")
                meta = form.get("request")
                if not isinstance(file, UploadFile):
                    raise InvalidInput(
                        "The multipart body needs a 'file' part.",
                        errors=[{"field": "file", "message": "required"}],
                    )
                raw_request = meta if isinstance(meta, str) else "{}"
                content = await file.read()
                filename, media_type = (
                    file.filename or "document",
                    (file.content_type or "application/octet-stream").split(";")[0].strip(),
                )
        except InvalidInput:
            raise
        except Exception as exc:  # the multipart parser's own errors
            raise InvalidInput(
                f"The multipart body cannot be read: {exc}", code="invalid_request", status=400
            ) from None
        body = parse_json(raw_request.encode(), settings.max_json_depth)
        if not isinstance(body, dict):
            raise InvalidInput("The 'request' part must be a JSON object.", code="invalid_json", status=400)
        if "document" in body:
            raise InvalidInput(
                "With multipart, the document is the 'file' part; leave 'document' out.",
                errors=[{"field": "document", "message": "not allowed with multipart"}],
            )
        if len(content) > max_doc:
            raise too_large(f"The document is larger than {max_doc} bytes.")
        body["document"] = {"content": content, "filename": filename, "media_type": media_type}
    elif content_type in ("application/json", "") or content_type.endswith("+json"):
        raw = await read_body(request, max_doc * 4 // 3 + JSON_OVERHEAD)
        body = parse_json(raw, settings.max_json_depth)
        if not isinstance(body, dict):
            raise InvalidInput("The body must be a JSON object.", code="invalid_json", status=400)
    else:
        raise InvalidInput(
            "Send application/json or multipart/form-data.", code="unsupported_media_type", status=415
        )
    return _run_fields(body, settings)


def _run_fields(body: dict[str, Any], settings: Settings) -> RunRequest:
    errors = ValidationErrors()
    for name in sorted(set(body) - _RUN_FIELDS):
        errors.add(name, "unknown field")
    operations = {name: v.operations for name, v in settings.vendors.items()}
    vendor = body.get("vendor")
    if vendor is None:
        errors.add("vendor", "required")
    elif not isinstance(vendor, str):
        errors.add("vendor", "must be a string")
    elif vendor not in operations:
        raise InvalidInput(
            f"Unknown vendor {vendor[:40]!r}; use one of {', '.join(operations)}.",
            code="unknown_vendor",
        )
    operation = body.get("operation", "extract")
    if isinstance(vendor, str) and vendor in operations and operation not in operations[vendor]:
        errors.add("operation", f"must be one of {', '.join(operations[vendor])} for {vendor}")

    document, content = _document(body.get("document"), settings, errors)

    options = body.get("options", {})
    if not isinstance(options, dict):
        errors.add("options", "must be an object")
        options = {}
    elif len(json.dumps(options, separators=(",", ":")).encode()) > settings.max_options_bytes:
        # Every transition of the run decodes its options inside Lua: a large one costs every step.
        raise InvalidInput(
            f"options take more than {settings.max_options_bytes} bytes as JSON "
            "(HOOKBRIDGE_MAX_OPTIONS_BYTES).",
            code="options_too_large",
            errors=[{"field": "options", "message": f"at most {settings.max_options_bytes} bytes"}],
        )
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        errors.add("metadata", "must be an object of strings")
        metadata = {}
    else:
        check_metadata(metadata, settings, errors)
    subs = body.get("subscription_ids", [])
    if not isinstance(subs, list) or not all(isinstance(s, str) and is_id("sub", s) for s in subs):
        errors.add("subscription_ids", "must be a list of subscription ids (sub_...)")
        subs = []
    elif len(subs) > 50:
        errors.add("subscription_ids", "at most 50")
    zero_retention = body.get("zero_retention", False)
    if not isinstance(zero_retention, bool):
        errors.add("zero_retention", "must be true or false")
    errors.raise_if_any()
    assert isinstance(vendor, str) and isinstance(operation, str)
    return RunRequest(
        vendor,
        operation,
        document,
        content,
        options,
        metadata,
        list(dict.fromkeys(subs)),
        bool(zero_retention),
    )


def _document(doc: Any, settings: Settings, errors: ValidationErrors) -> tuple[dict[str, Any], bytes | None]:
    if doc is None:
        errors.add("document", 'required: {"url"} or {"content_base64", "filename", "media_type"}')
        return {}, None
    if not isinstance(doc, dict):
        errors.add("document", "must be an object")
        return {}, None
    filename = doc.get("filename", "document")
    media_type = doc.get("media_type", "application/octet-stream")
    if not isinstance(filename, str) or not 0 < len(filename) <= 255:
        errors.add("document.filename", "must be a string of 1 to 255 characters")
        filename = "document"
    if not isinstance(media_type, str) or not _MEDIA_TYPE.match(media_type) or len(media_type) > 127:
        errors.add("document.media_type", "must be a media type such as application/pdf")
        media_type = "application/octet-stream"
    content = doc.get("content")
    if isinstance(content, bytes):  # multipart: the bytes came as the file part (JSON cannot make bytes)
        if not content:
            errors.add("file", "the file is empty")
        return {"filename": filename, "media_type": media_type, "size": len(content)}, content
    url, b64 = doc.get("url"), doc.get("content_base64")
    unknown = set(doc) - {"url", "content_base64", "filename", "media_type"}
    for name in sorted(unknown):
        errors.add(f"document.{name}", "unknown field")
    if (url is None) == (b64 is None):
        errors.add("document", "give exactly one of url and content_base64")
        return {}, None
    if url is not None:
        if not isinstance(url, str) or not re.match(r"^https?://[^\s]+$", url) or len(url) > 2048:
            errors.add("document.url", "must be an http(s) URL of at most 2048 characters")
        return {"url": url, "filename": filename, "media_type": media_type}, None
    content = _base64_content(b64, settings, errors)
    if content is None:
        return {}, None
    return {"filename": filename, "media_type": media_type, "size": len(content)}, content


def _base64_content(b64: Any, settings: Settings, errors: ValidationErrors) -> bytes | None:
    """document.content_base64, decoded; None (with the error added) when it is not base64."""
    if not isinstance(b64, str):
        errors.add("document.content_base64", "must be a base64 string")
        return None
    if len(b64) * 3 // 4 > settings.max_document_bytes + 3:
        raise too_large(f"The document is larger than {settings.max_document_bytes} bytes.")
    try:
        content = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        errors.add("document.content_base64", "is not valid base64")
        return None
    if len(content) > settings.max_document_bytes:
        raise too_large(f"The document is larger than {settings.max_document_bytes} bytes.")
    if not content:
        errors.add("document.content_base64", "the document is empty")
    return content


def check_metadata(metadata: dict[str, Any], settings: Settings, errors: ValidationErrors) -> None:
    if len(metadata) > settings.max_metadata_pairs:
        errors.add("metadata", f"at most {settings.max_metadata_pairs} pairs")
    for key, value in metadata.items():
        if not _METADATA_KEY.match(key):
            errors.add("metadata", f"key {key[:40]!r}: 1 to 40 letters, digits, '_', '-', '.', ':'")
        if not isinstance(value, str) or len(value.encode()) > settings.max_metadata_value_bytes:
            errors.add(
                f"metadata.{key[:40]}",
                f"must be a string of at most {settings.max_metadata_value_bytes} bytes",
            )


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not _PRINTABLE.match(key):
        raise InvalidInput(
            "Idempotency-Key must be 1 to 255 printable ASCII characters.",
            errors=[{"field": "Idempotency-Key", "message": "1 to 255 printable characters"}],
        )
    return key


def event_types(value: Any, errors: ValidationErrors) -> list[str] | None:
    if value is None:
        return None
    allowed = (*EVENT_TYPES, "run.*")
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, str) and v in allowed for v in value)
    ):
        errors.add("event_types", f"a non-empty list of: {', '.join(allowed)}")
        return None
    return list(dict.fromkeys(value))


def limit_param(request: Request) -> int:
    raw = request.query_params.get("limit", "50")
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 200:
        raise InvalidInput(
            "limit must be a whole number from 1 to 200.", errors=[{"field": "limit", "message": "1 to 200"}]
        )
    return limit


def choice_param(request: Request, name: str, options: tuple[str, ...]) -> str | None:
    value = request.query_params.get(name)
    if value is not None and value not in options:
        raise InvalidInput(
            f"{name} must be one of {', '.join(options)}.",
            errors=[{"field": name, "message": f"one of {', '.join(options)}"}],
        )
    return value


def timestamp(value: Any, name: str) -> int:
    if not isinstance(value, str):
        raise InvalidInput(
            f"{name} must be an RFC 3339 time.", errors=[{"field": name, "message": "RFC 3339"}]
        )
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{name} must be an RFC 3339 time.", errors=[{"field": name, "message": "RFC 3339"}]
        ) from None
    if parsed.tzinfo is None:
        raise InvalidInput(
            f"{name} needs a time zone.", errors=[{"field": name, "message": "RFC 3339 with offset"}]
        )
    return int(parsed.timestamp() * 1000)
