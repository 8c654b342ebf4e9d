"""Between Redis's replies and the records (``service/core/records.py``): bytes to text, hashes to records,
and the claim scripts' replies to :class:`ClaimedRun` and :class:`ClaimedDelivery`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.core.records import Delivery, Run, Subscription
from service.observability import logs
from service.store import bodies

log = logs.get("hookbridge.store")


def text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def hash_of(raw: Sequence[bytes] | dict[bytes, bytes]) -> dict[str, str]:
    """A hash as HGETALL answers it (a dict from redis-py, a flat list from a script), as text."""
    if isinstance(raw, dict):
        return {text(k): text(v) for k, v in raw.items()}
    it = iter(raw)
    return {text(k): text(v) for k, v in zip(it, it, strict=True)}


def run_or_none(raw: bytes | str | None, run_id: str) -> Run | None:
    """The run stored under ``hb:run:{run_id}`` (its record leaves the id to the key), if any."""
    return Run.from_json(raw, run_id) if raw else None


def subscription_or_none(raw: Sequence[bytes] | dict[bytes, bytes] | None) -> Subscription | None:
    return Subscription.from_hash(hash_of(raw)) if raw else None


def delivery_or_none(raw: Sequence[bytes] | dict[bytes, bytes] | None) -> Delivery | None:
    return Delivery.from_hash(hash_of(raw)) if raw else None


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    run: Run
    due_ms: float  # when the step was planned
    slot_ms: float  # when the vendor budget lets its first request go
    probe: str | None = None  # the vendor is paused after a 429 and this run's step is its one probe


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    delivery: Delivery
    subscription: Subscription | None  # None when the subscription is gone
    body: bytes | None  # None when the event body is gone (zero retention, expired) or unreadable


def claimed_runs(reply: Sequence[Any]) -> tuple[list[ClaimedRun], float | None]:
    """``claim_runs.lua``'s reply: ``{flat [id, due, slot, run json]..., next due, probe token}``.

    A record that does not read as a run (damaged in Redis, or written by a version that no longer
    reads) is left out and logged: its lease hands it back, as a step that fails, and the rest of the
    batch goes on."""
    flat, nxt, probe = reply
    token = text(probe) or None
    claimed = []
    for i in range(0, len(flat), 4):
        try:
            run = Run.from_json(flat[i + 3], text(flat[i]))
        except ValueError as exc:
            log.error(
                "run record unreadable; its lease will hand it back", run_id=text(flat[i]), error=str(exc)
            )
            continue
        claimed.append(ClaimedRun(run, float(flat[i + 1]), float(flat[i + 2]), token))
    return claimed, float(nxt) if nxt else None


def claimed_deliveries(
    reply: Sequence[Any],
) -> tuple[list[tuple[Delivery, Subscription | None]], float | None]:
    """``claim_deliveries.lua``'s reply: ``{rows [delivery hash, subscription hash]..., next due}``."""
    rows, nxt = reply
    claimed = [(Delivery.from_hash(hash_of(dlv)), subscription_or_none(sub)) for dlv, sub in rows]
    return claimed, float(nxt) if nxt else None


def with_body(delivery: Delivery, subscription: Subscription | None, body: Any) -> ClaimedDelivery:
    """A claimed delivery with its event's stored body as read after the claim (None where gone)."""
    run_id = delivery.run_id or ""  # the body of a run's event is packed against its run's id
    return ClaimedDelivery(delivery, subscription, bodies.unpacked_or_none(body, run_id) if body else None)
