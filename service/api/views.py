"""Each resource as the API shows it (models ``Run``, ``Subscription``, ``Delivery``): one function per
resource, from the record the store keeps."""

from __future__ import annotations

import json
from typing import Any

from service import domain, lifecycle


def run(record: dict[str, Any]) -> dict[str, Any]:
    return lifecycle.public(record)


def subscription(sub: dict[str, str], secret: str | None = None) -> dict[str, Any]:
    """The subscription; with ``secret`` (created, rotated) the signing secret beside it."""
    view = {
        "id": sub["id"],
        "url": sub["url"],
        "event_types": json.loads(sub["event_types"]) if sub.get("event_types") else None,
        "description": sub.get("description") or None,
        "metadata": json.loads(sub.get("metadata") or "{}"),
        "disabled": sub.get("disabled") == "1",
        "disabled_reason": sub.get("disabled_reason") or None,
        "max_in_flight": int(sub["max_in_flight"]) if sub.get("max_in_flight") else None,
        "rate_limit_per_s": float(sub["rate_per_s"]) if sub.get("rate_per_s") else None,
        "consecutive_failures": int(sub.get("consecutive_failures") or 0),
        "created_at": domain.rfc3339(int(sub["created"])),
        "updated_at": domain.rfc3339(int(sub.get("updated") or sub["created"])),
    }
    return view if secret is None else {**view, "secret": secret}


def delivery(d: dict[str, str], attempts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The delivery; with ``attempts`` its attempt log beside it."""
    view = {
        "id": d["id"],
        "event_id": d["event"],
        "event_type": d["type"],
        "subscription_id": d["sub"],
        "run_id": d.get("run") or None,
        "status": d["status"],
        "attempts": int(d.get("attempts") or 0),
        "last_status_code": int(d["last_code"]) if d.get("last_code") else None,
        "next_attempt_at": domain.rfc3339(int(d["next_at"])) if d.get("next_at") else None,
        "created_at": domain.rfc3339(int(d["created"])),
        "updated_at": domain.rfc3339(int(d.get("updated") or d["created"])),
    }
    return view if attempts is None else {**view, "attempt_log": attempts}


def page(items: list[Any], next_cursor: str | None) -> dict[str, Any]:
    return {"data": items, "next_cursor": next_cursor}
