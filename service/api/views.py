"""Each resource as the API shows it (models ``Run``, ``Subscription``, ``Delivery``): one function per
resource, from the typed record the store keeps (service/core/records.py owns the field names)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse as _StarletteJSON

from service.core.records import (
    Attempt,
    Delivery,
    Run,
    Subscription,
    public_delivery,
    public_run,
    public_subscription,
)
from service.store import jsoncodec


def run(record: Run) -> dict[str, Any]:
    return public_run(record)


def subscription(sub: Subscription, secret: str | None = None) -> dict[str, Any]:
    """The subscription; with ``secret`` (created, rotated) the signing secret beside it."""
    view = public_subscription(sub)
    return view if secret is None else {**view, "secret": secret}


def delivery(d: Delivery, attempts: list[Attempt] | None = None) -> dict[str, Any]:
    """The delivery; with ``attempts`` its attempt log beside it."""
    view = public_delivery(d)
    return view if attempts is None else {**view, "attempt_log": [a.public() for a in attempts]}


def page(items: list[Any], next_cursor: str | None) -> dict[str, Any]:
    return {"data": items, "next_cursor": next_cursor}


class JSONResponse(_StarletteJSON):
    """Starlette's, encoded by orjson (``jsoncodec``: about four times the standard library; the same
    compact UTF-8), which every answer of the API goes through."""

    def render(self, content: Any) -> bytes:
        return jsoncodec.dumps(content).encode()
