"""Vendor text is data, not trusted: every string a vendor sends is cut short and scrubbed of our own
credentials before it is stored, logged, traced or delivered.

A vendor that echoes a request header in an error ("invalid token: Bearer sk-...") would otherwise put the
platform's key into a tenant's run, its feed and its callbacks; a vendor that answers a 1 MiB error would
make a 2 MiB run record and a 1 MiB callback per subscriber. The adapters' clients register the keys they
send (:func:`register`, from ``build_adapters``); :func:`clean` and :func:`clean_json` replace each of them,
and its usual encodings, with :data:`REDACTED`, then cut the text to :data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from urllib.parse import quote, quote_plus

# What is left of one vendor string (the core's bound: it cuts the messages it composes the same way).
from service.core.answers import MAX_TEXT as MAX_TEXT
from service.core.answers import FileResult, PollResult, Submitted, cut

# What is left of a vendor's structured error details (Uptiq's documentQuality, Nutrient's error object).
MAX_DETAILS_BYTES = 4096
REDACTED = "[redacted]"
# A secret shorter than this is not scrubbed: replacing "a" or "1" everywhere would garble every message
# and protect nothing (no vendor key is that short).
MIN_SECRET = 6

_forms: set[str] = set()
_static: set[str] = set()  # the forms of what register() was given outside rotate(): never forgotten
_ordered: tuple[str, ...] = ()


def forms_of(secret: str) -> set[str]:
    """The secret and the encodings a vendor might echo it in: URL-encoded, base64 (of the value and of
    ``value:`` / ``:value``, HTTP Basic's user:pass with the key on either side), JSON-escaped."""
    if len(secret) < MIN_SECRET:
        return set()
    found = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    for raw in (secret, f"{secret}:", f":{secret}"):
        encoded = raw.encode()
        for b64 in (base64.b64encode(encoded), base64.urlsafe_b64encode(encoded)):
            text = b64.decode("ascii")
            found.update({text, text.rstrip("=")})
    return {form for form in found if len(form) >= MIN_SECRET}


def register(secrets: Iterable[str]) -> None:
    """Adds credentials (API keys, whole auth header values) to what :func:`clean` scrubs, process-wide."""
    global _ordered
    rotating = {s for kept in _rotating.values() for s in kept}
    for secret in secrets:
        if isinstance(secret, str):
            forms = forms_of(secret)
            _forms.update(forms)
            if secret not in rotating:
                _static.update(forms)
    # Longest first: a header value "Bearer KEY" goes whole, not as "Bearer [redacted]" twice.
    _ordered = tuple(sorted(_forms, key=len, reverse=True))


# Secrets that replace each other (a bearer token refreshed hourly): the last few per slot, so that a
# process that runs for months does not scrub thousands of dead tokens from every string.
_rotating: dict[str, list[str]] = {}
ROTATING_KEPT = 3


def rotate(slot: str, secret: str) -> None:
    """Registers ``secret`` as the newest of ``slot`` (one auth's tokens), forgetting all but the last
    :data:`ROTATING_KEPT` of them: an answer to a request sent with an older one can no longer arrive."""
    kept = _rotating.setdefault(slot, [])
    if secret in kept:
        return
    kept.append(secret)
    register([secret])
    if len(kept) > ROTATING_KEPT:
        _forget(kept.pop(0))


def _forget(secret: str) -> None:
    global _ordered
    still = {form for secrets in _rotating.values() for s in secrets for form in forms_of(s)}
    _forms.difference_update(forms_of(secret) - still - _static)
    _ordered = tuple(sorted(_forms, key=len, reverse=True))


def forget() -> None:
    """Clears the registry (tests)."""
    global _ordered
    _forms.clear()
    _static.clear()
    _rotating.clear()
    _ordered = ()


def scrub(text: str) -> str:
    """``text`` with every registered credential replaced, uncut."""
    for form in _ordered:
        if form in text:
            text = text.replace(form, REDACTED)
    return text


def clean(text: Any, limit: int = MAX_TEXT) -> str:
    """A vendor string made safe to keep: credentials scrubbed, cut to ``limit`` characters (with a mark)."""
    said: str = text if isinstance(text, str) else "" if text is None else str(text)
    # Scrub a little past the cut, so that a key straddling it is not left half in.
    longest = len(_ordered[0]) if _ordered else 0
    return cut(scrub(said[: limit + longest]), limit)


def clean_optional(text: Any, limit: int = MAX_TEXT) -> str | None:
    return None if text is None else clean(text, limit)


def clean_json(value: Any, limit: int = MAX_DETAILS_BYTES) -> Any:
    """A vendor's JSON (error details, usage, progress) scrubbed in every string, key included; past
    ``limit`` bytes once encoded it is replaced by a note with its cleaned start."""
    cleaned = _scrub_tree(value)
    try:
        encoded = json.dumps(cleaned, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return {"truncated": True, "start": clean(repr(value), 512)}
    if len(encoded) <= limit:
        return cleaned
    return {"truncated": True, "start": clean(encoded, 512)}


def scrub_json(value: Any) -> Any:
    """A vendor's result scrubbed of credentials, uncut (a result is the data the client asked for)."""
    return _scrub_tree(value) if _ordered else value


def _scrub_tree(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {(scrub(k) if isinstance(k, str) else k): _scrub_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub_tree(v) for v in value]
    return value


# A vendor call's answer, made safe whole -------------------------------------------------------------------


def safe_poll(result: PollResult) -> PollResult:
    """A poll's answer with every string the vendor wrote cut short and scrubbed of our credentials, before
    any of it is stored, logged, traced or delivered (the worker calls it on every answer it gets).

    An answer that needs no change is given back as it is: most polls say "still running" with a short
    status word and a phase, and copying the frozen answer and its progress cost ~4 us a poll."""
    progress = result.progress
    if progress is not None:
        phase, message = clean_optional(progress.phase, 200), clean_optional(progress.message)
        if phase is not progress.phase or message is not progress.message:
            progress = replace(progress, phase=phase, message=message)
    vendor_status = clean_optional(result.vendor_status, 200)
    error = clean_optional(result.error)
    details = clean_json(result.error_details) if result.error_details else None
    usage = scrub_json(result.usage)
    payload = safe_result(result.result)
    if (
        progress is result.progress
        and vendor_status is result.vendor_status
        and error is result.error
        and details is result.error_details
        and usage is result.usage
        and payload is result.result
    ):
        return result
    return replace(
        result,
        vendor_status=vendor_status,
        progress=progress,
        error=error,
        error_details=details,
        usage=usage,
        result=payload,
    )


def safe_submit(accepted: Submitted) -> Submitted:
    """A submit's answer with the vendor's status word cut short and scrubbed, as a poll's is."""
    return replace(accepted, vendor_status=clean_optional(accepted.vendor_status, 200))


def safe_result(payload: Any) -> Any:
    """A result (JSON, or the JSON beside a :class:`FileResult`) scrubbed of our credentials, uncut."""
    if isinstance(payload, FileResult):
        return FileResult(payload.content, payload.media_type, scrub_json(payload.data))
    return scrub_json(payload)
