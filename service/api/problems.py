"""RFC 9457 problem details, with the extra member ``code`` (CONTRACT §4), in one place."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from service.domain import HookbridgeError

MEDIA_TYPE = "application/problem+json"


class ProblemResponse(JSONResponse):
    media_type = MEDIA_TYPE


def problem(
    status: int, code: str, title: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    body = {
        "type": f"https://hookbridge.dev/errors/{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return ProblemResponse(body, status_code=status, headers=headers)


def from_error(request: Request, exc: HookbridgeError) -> Response:
    headers = {}
    if exc.status in (429, 503):
        headers["Retry-After"] = str(exc.extra.pop("retry_after", 1))
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="hookbridge"'
    return problem(
        exc.status, exc.code, exc.title, exc.detail, headers=headers, instance=request.url.path, **exc.extra
    )
