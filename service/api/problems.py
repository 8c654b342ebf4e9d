"""Every problem the API answers, one class each with its status and ``code``, mapped to RFC 9457
``application/problem+json`` (with the extra member ``code``, CONTRACT §4) in one place: :func:`response`.
The OpenAPI document lists the codes of each status from these classes (:func:`codes_by_status`)::

    Problem
    ├── InvalidJSON, InvalidRequest              400
    ├── Unauthorized                             401
    ├── NotFound, ResultNotReady                 404
    ├── MethodNotAllowed                         405
    ├── Conflict, IdempotencyKeyReused, RunNotCancelable, RunNotSucceeded,
    │   SubscriptionDisabled, DeliveryInFlight, QuotaExceeded               409
    ├── ResultGone, IteratorExpired              410
    ├── DocumentTooLarge                         413
    ├── UnsupportedMediaType                     415
    ├── ValidationFailed, UnknownVendor, VendorNotConfigured, CallbackURLNotAllowed,
    │   OptionsTooLarge, InvalidIterator         422
    ├── RateLimited, TooManyStreams              429 (with Retry-After)
    ├── HeadersTooLarge                          431
    ├── Unavailable                              503 (with Retry-After)
    └── InternalError                            500 (never from input)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from service.api.views import JSONResponse

MEDIA_TYPE = "application/problem+json"


class ProblemResponse(JSONResponse):
    media_type = MEDIA_TYPE


class Problem(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, *, retry_after: int | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.extra = extra

    def __init_subclass__(cls, *, status: int = 0, code: str = "", title: str = "", **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.status, cls.code, cls.title = status or cls.status, code or cls.code, title or cls.title


class InternalError(Problem): ...


class InvalidJSON(Problem, status=400, code="invalid_json", title="Invalid JSON"): ...


class InvalidRequest(Problem, status=400, code="invalid_request", title="Invalid request"): ...


class Unauthorized(Problem, status=401, code="unauthorized", title="Unauthorized"): ...


class NotFound(Problem, status=404, code="not_found", title="Not found"): ...


class ResultNotReady(Problem, status=404, code="result_not_ready", title="Result not ready"):
    """The run has not ended yet: ask again later."""


class MethodNotAllowed(Problem, status=405, code="method_not_allowed", title="Method not allowed"): ...


class Conflict(Problem, status=409, code="conflict", title="Conflict"): ...


class IdempotencyKeyReused(Problem, status=409, code="idempotency_key_reused", title="Conflict"): ...


class RunNotCancelable(Problem, status=409, code="run_not_cancelable", title="Conflict"): ...


class RunNotSucceeded(Problem, status=409, code="run_not_succeeded", title="No result"):
    """The run failed or was canceled: it never has a result, so asking again does not help."""


class SubscriptionDisabled(Problem, status=409, code="subscription_disabled", title="Conflict"): ...


class DeliveryInFlight(Problem, status=409, code="delivery_in_flight", title="Conflict"):
    """An attempt of the delivery is being sent at this moment: ask again once it has ended."""


class QuotaExceeded(Problem, status=409, code="quota_exceeded", title="Quota exceeded"): ...


class ResultGone(Problem, status=410, code="result_gone", title="Gone"): ...


class IteratorExpired(Problem, status=410, code="iterator_expired", title="Gone"):
    """The feed iterator is older than the retention window: events after it may be gone."""


class DocumentTooLarge(Problem, status=413, code="document_too_large", title="Too large"): ...


class UnsupportedMediaType(
    Problem, status=415, code="unsupported_media_type", title="Unsupported media type"
):
    pass


class ValidationFailed(Problem, status=422, code="validation_error", title="Invalid request"):
    """``errors`` names every bad field (``pointer``, a JSON pointer into the body) and why."""

    def __init__(self, detail: str, errors: list[dict[str, str]]) -> None:
        super().__init__(detail, errors=errors)


class UnknownVendor(Problem, status=422, code="unknown_vendor", title="Unknown vendor"): ...


class VendorNotConfigured(Problem, status=422, code="vendor_not_configured", title="Vendor not configured"):
    """The vendor is installed but a setting it needs is unset; ``missing`` names the variables."""


class CallbackURLNotAllowed(
    Problem, status=422, code="callback_url_not_allowed", title="Invalid request"
): ...


class InvalidIterator(Problem, status=422, code="invalid_iterator", title="Invalid request"): ...


class OptionsTooLarge(Problem, status=422, code="options_too_large", title="Invalid request"): ...


class RateLimited(Problem, status=429, code="rate_limited", title="Too many requests"): ...


class TooManyStreams(Problem, status=429, code="too_many_streams", title="Too many requests"): ...


class HeadersTooLarge(
    Problem, status=431, code="headers_too_large", title="Request header fields too large"
): ...


class Unavailable(Problem, status=503, code="unavailable", title="Service unavailable"): ...


def _all(cls: type[Problem] = Problem) -> list[type[Problem]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _all(sub))]


def codes_by_status() -> dict[int, list[str]]:
    """Every problem ``code`` by HTTP status, from the classes above."""
    out: dict[int, list[str]] = {}
    for cls in _all():
        if cls.code not in out.setdefault(cls.status, []):
            out[cls.status].append(cls.code)
    return dict(sorted(out.items()))


def response(exc: Problem, instance: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    headers = dict(headers or {})
    if exc.status in (429, 503):
        headers["Retry-After"] = str(exc.retry_after or 1)
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="hookbridge"'
    body = {
        "type": f"https://hookbridge.dev/errors/{exc.code}",
        "title": exc.title,
        "status": exc.status,
        "detail": exc.detail,
        "code": exc.code,
        "instance": instance,
        **exc.extra,
    }
    # The request's id (app.RequestContext puts it in every answer's headers): a user quotes it to an
    # operator, who finds the request's log lines by it.
    rid = headers.get("X-Request-Id")
    if rid:
        body["request_id"] = rid
    return ProblemResponse(body, status_code=exc.status, headers=headers)
