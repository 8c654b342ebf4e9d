"""The Redis store: the only module that knows key names (``keys``) and changes state (``scripts``).

redis-py types its hash and list commands as returning "Awaitable[T] | T" for its sync and async
clients alike; the ``type: ignore[misc]`` on some awaits below are for that alone.

Every state change is one Lua script, so a change and the events and deliveries it implies are
written together or not at all. See ``keys.py`` for the data layout.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from service.metrics import RUNS, client_label
from service.settings import Settings
from service.store import jsoncodec, keys
from service.store.connection import connect
from service.store.scripts import Scripts
from service.store.secretbox import SecretBox, SecretUnavailable

__all__ = [
    "ClaimedDelivery",
    "ClaimedRun",
    "Page",
    "SecretUnavailable",
    "Store",
    "Transition",
    "connect",
    "keys",
]

Doc = dict[str, Any]
_TERMINAL = frozenset({"succeeded", "failed", "canceled"})


def _s(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _hash(raw: Sequence[bytes] | dict[bytes, bytes]) -> dict[str, str]:
    if isinstance(raw, dict):
        return {_s(k): _s(v) for k, v in raw.items()}
    it = iter(raw)
    return {_s(k): _s(v) for k, v in zip(it, it, strict=True)}


# Fields a stored run leaves out while they hold their default: a run in flight is most of Redis's
# memory, and these are most of a run.
_RUN_DEFAULTS: dict[str, Any] = {
    "vendor_run_id": None,
    "vendor_status": None,
    "progress": None,
    "metadata": {},
    "zero_retention": False,
    "completed_at": None,
    "polls": 0,
    "error": None,
    "options": {},
    "subscription_ids": [],
    "_state": {},
    "_delay": None,
    "_transient": 0,
    "_progress_event_at": 0,
    "_vendor_cancel": False,
}


def dump_run(run: Doc) -> str:
    return jsoncodec.dumps({k: v for k, v in run.items() if k not in _RUN_DEFAULTS or v != _RUN_DEFAULTS[k]})


def load_run(raw: bytes | str) -> Doc:
    run = jsoncodec.loads(raw)
    for key, default in _RUN_DEFAULTS.items():
        if key not in run:
            run[key] = default if not isinstance(default, dict | list) else type(default)()
    return dict(run)


def encode_cursor(score: float, member: str) -> str:
    return base64.urlsafe_b64encode(f"{score!r}|{member}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """Raises ValueError on a cursor we did not make."""
    padded = cursor + "=" * (-len(cursor) % 4)
    score, _, member = base64.urlsafe_b64decode(padded.encode()).decode().partition("|")
    value = float(score)
    if not math.isfinite(value):
        raise ValueError("not a cursor")
    return value, member


@dataclass(frozen=True)
class Page:
    data: list[Any]
    next_cursor: str | None


@dataclass(frozen=True)
class ClaimedRun:
    run: Doc
    due_ms: float  # when the step was planned
    slot_ms: float  # when the vendor budget lets its first request go
    probe: str | None = None  # the vendor is paused after a 429 and this run's step is its one probe


@dataclass(frozen=True)
class ClaimedDelivery:
    delivery: dict[str, str]
    subscription: dict[str, str]  # empty when the subscription is gone
    body: bytes | None  # None when the event body is gone (zero retention, expired)


@dataclass
class Transition:
    """One state change of a run: the new document and what it implies."""

    run: Doc  # the new run, ``_v`` already incremented
    expect_v: int
    events: list[dict[str, Any]] = field(default_factory=list)
    due_ms: float | None = None  # next step due at; None with remove_due=False leaves it alone
    remove_due: bool = False
    result: bytes | None = None
    delete_document: bool = False
    ttl_ms: int | None = None


# The reason the API writes when a subscription's owner disables it; any other reason is hookbridge's own.
OWNER_DISABLED = "disabled by its owner"


@dataclass
class Observation:
    """A sample of the store for the worker's gauges (``Store.observe``)."""

    paused_until_ms: dict[str, float | None] = field(default_factory=dict)
    oldest_pending_s: dict[str, float] = field(default_factory=dict)
    disabled_subs: dict[tuple[str, str], int] = field(default_factory=dict)


class Store:
    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.scripts = Scripts(redis)
        self._retention_ms = int(settings.retention_s * 1000)
        self.secret_box = SecretBox(settings.secret_keys)

    async def ping(self) -> bool:
        return bool(await self.redis.ping())

    async def close(self) -> None:
        await self.redis.aclose()

    # Runs ---------------------------------------------------------------------------------------

    async def create_run(self, run: Doc, document: bytes | None, idem: tuple[str, str] | None) -> str | None:
        """Writes a new run. With ``idem=(key, fingerprint)`` returns the stored ``"fingerprint run_id"``
        instead when the key was used before (and writes nothing)."""
        run_id, client = run["id"], run["client"]
        ks = [keys.run(run_id), keys.document(run_id), keys.client_runs(client), keys.due_runs(run["vendor"])]
        args: list[Any] = [dump_run(run), document or b"", run["created_at"], run_id]
        if idem:
            ks.append(keys.idempotency(client, idem[0]))
            args += [f"{idem[1]} {run_id}", int(self.settings.idempotency_ttl_s * 1000)]
        reply = await self.scripts.create_run(keys=ks, args=args)
        return _s(reply[1]) if _s(reply[0]) == "exists" else None

    async def idempotency_record(self, client: str, key: str) -> str | None:
        value = await self.redis.get(keys.idempotency(client, key))
        return _s(value) if value is not None else None

    async def get_run(self, run_id: str) -> Doc | None:
        raw = await self.redis.get(keys.run(run_id))
        return load_run(raw) if raw else None

    async def get_runs(self, run_ids: Sequence[str]) -> list[Doc | None]:
        if not run_ids:
            return []
        raws = await self.redis.mget([keys.run(r) for r in run_ids])
        return [load_run(raw) if raw else None for raw in raws]

    async def get_document(self, run_id: str) -> bytes | None:
        raw = await self.redis.get(keys.document(run_id))
        return bytes(raw) if raw is not None else None

    async def get_result(self, run_id: str) -> bytes | None:
        raw = await self.redis.get(keys.result(run_id))
        return bytes(raw) if raw is not None else None

    async def run_events(self, run_id: str) -> list[tuple[str, dict[str, Any]]]:
        """The run's events that are still kept, oldest first, as (event id, body)."""
        ids = [_s(i) for i in await self.redis.lrange(keys.run_events(run_id), 0, -1)]  # type: ignore[misc]
        if not ids:
            return []
        bodies = await self.redis.mget([keys.event(i) for i in ids])
        return [(event_id, json.loads(body)) for event_id, body in zip(ids, bodies, strict=True) if body]

    async def list_runs(
        self, client: str, *, limit: int, cursor: str | None, status: str | None, vendor: str | None
    ) -> Page:
        def keep(doc: Doc) -> bool:
            return (status is None or doc["status"] == status) and (vendor is None or doc["vendor"] == vendor)

        return await self._page(keys.client_runs(client), limit, cursor, self.get_runs, keep)

    async def transition(self, change: Transition) -> tuple[str, Doc | None, int]:
        """Applies ``change`` if the run is still at version ``expect_v``.

        Returns ``("ok", None, deliveries_created)``, ``("conflict", current_run, 0)`` or
        ``("missing", None, 0)``.
        """
        reply = await self.scripts.transition(
            keys=[keys.run(change.run["id"])], args=self._transition_args(change)
        )
        return self._transition_outcome(change, reply)

    async def transitions(
        self, changes: Sequence[Transition]
    ) -> list[tuple[str, Doc | None, int] | Exception]:
        """:meth:`transition` for many runs in one pipeline (one round trip, each still atomic on its own).

        Returns each change's outcome, or the exception its script raised; a lost connection raises.
        """
        pipe = self.redis.pipeline(transaction=False)
        sha = self.scripts.transition.sha
        for change in changes:
            pipe.evalsha(sha, 1, keys.run(change.run["id"]), *self._transition_args(change))
        replies = await pipe.execute(raise_on_error=False)
        out: list[tuple[str, Doc | None, int] | Exception] = []
        for change, reply in zip(changes, replies, strict=True):
            if isinstance(reply, NoScriptError):  # Redis restarted: the script object loads it again
                out.append(await self.transition(change))
            elif isinstance(reply, Exception):
                out.append(reply)
            else:
                out.append(self._transition_outcome(change, reply))
        return out

    def _transition_args(self, change: Transition) -> list[Any]:
        run = change.run
        ops: dict[str, Any] = {
            "run_id": run["id"],
            "client": run["client"],
            "expect_v": change.expect_v,
            "status": run["status"],
            "now": run["updated_at"],
            "retention_ms": self._retention_ms,
            "zr": "1" if run.get("zero_retention") else "0",
            "due_key": keys.due_runs(run["vendor"]),
            "events": change.events,
            "sub_filter": run.get("subscription_ids") or [],
            "del_doc": change.delete_document,
        }
        if change.due_ms is not None:
            ops["due_score"] = int(change.due_ms)
        elif change.remove_due:
            ops["due_remove"] = True
        if change.ttl_ms is not None:
            ops["ttl_ms"] = change.ttl_ms
        # The run and the result travel as their own arguments, not escaped inside the ops JSON.
        args: list[Any] = [jsoncodec.dumps(ops), dump_run(run)]
        if change.result is not None:
            args.append(change.result)
        return args

    @staticmethod
    def _transition_outcome(change: Transition, reply: Any) -> tuple[str, Doc | None, int]:
        run = change.run
        outcome = _s(reply[0])
        if outcome == "conflict":
            return outcome, load_run(reply[1]), 0
        if outcome == "ok":
            if run["status"] in _TERMINAL and _s(reply[2]) not in _TERMINAL:
                # Every run's end is counted here, once, whoever ended it (worker, API cancel, ...).
                RUNS.labels(run["vendor"], run["status"], client_label(run.get("client"))).inc()
            return outcome, None, int(reply[1])
        return outcome, None, 0

    async def schedule_run(self, vendor: str, run_id: str, due_ms: float) -> None:
        """Moves a run's next step (no state change: a retry after a transient fault)."""
        await self.redis.zadd(keys.due_runs(vendor), {run_id: int(due_ms)}, xx=True)

    async def claim_runs(
        self,
        vendor: str,
        now_ms: int,
        limit: int,
        lease_ms: int,
        interval_ms: float,
        lookahead_ms: int,
        probe_lease_ms: int = 60_000,
    ) -> tuple[list[ClaimedRun], float | None]:
        """Claims due runs; none while the vendor is paused after a 429, then one as its probe."""
        reply = await self.scripts.claim_runs(
            keys=[keys.due_runs(vendor), keys.vendor_budget(vendor), keys.vendor_pause(vendor)],
            args=[now_ms, limit, lease_ms, interval_ms, lookahead_ms, probe_lease_ms],
        )
        flat, nxt, probe = reply
        token = probe.decode() if isinstance(probe, bytes) else (probe or None)
        claimed = [
            ClaimedRun(load_run(flat[i + 3]), float(flat[i + 1]), float(flat[i + 2]), token)
            for i in range(0, len(flat), 4)
        ]
        return claimed, float(nxt) if nxt else None

    async def release_runs(self, vendor: str, leases: Sequence[tuple[str, float]], now_ms: int) -> int:
        """Makes leased runs due now, each only while its lease (id, lease end ms) is still the one taken."""
        if not leases:
            return 0
        args: list[Any] = [now_ms]
        for run_id, lease_end in leases:
            args += [run_id, lease_end]
        due = keys.due_runs(vendor)
        return int(await self.scripts.release(keys=[due] + [due] * (2 * len(leases)), args=args))

    async def budget_take(self, vendor: str, now_ms: int, interval_ms: float) -> float:
        """Reserves the vendor's next request slot; returns when (ms) the request may go."""
        slot = await self.scripts.budget(keys=[keys.vendor_budget(vendor)], args=[now_ms, interval_ms])
        return float(slot)

    async def pause_limited(
        self,
        vendor: str,
        now_ms: int,
        retry_after_ms: float | None,
        floor_ms: float,
        cap_ms: float,
        probe: str | None,
    ) -> tuple[float, int]:
        """The vendor answered 429: pause it for every worker. Returns (until_ms, 429s in a row)."""
        untl, streak = await self.scripts.pause(
            keys=[keys.vendor_pause(vendor)],
            args=[
                "limited",
                now_ms,
                probe or "",
                -1 if retry_after_ms is None else int(retry_after_ms),
                int(floor_ms),
                int(cap_ms),
            ],
        )
        return float(untl), int(streak)

    async def pause_settle(self, vendor: str, now_ms: int, probe: str, *, answered: bool) -> bool:
        """The probe's outcome: an answer (not 429) ends the pause; no answer lets another run probe."""
        done = await self.scripts.pause(
            keys=[keys.vendor_pause(vendor)], args=["answered" if answered else "release", now_ms, probe]
        )
        return bool(done)

    async def due_counts(self, vendors: Sequence[str], now_ms: int) -> dict[str, int]:
        """How many runs per vendor and deliveries are due now and unclaimed (the ready-jobs gauge)."""
        pipe = self.redis.pipeline(transaction=False)
        for vendor in vendors:
            pipe.zcount(keys.due_runs(vendor), "-inf", now_ms)
        pipe.zcount(keys.DUE_DELIVERIES, "-inf", now_ms)
        counts = await pipe.execute()
        out = dict(zip(vendors, counts, strict=False))
        out["deliveries"] = counts[-1]
        return out

    async def observe(
        self,
        vendors: Sequence[str],
        clients: Sequence[str],
        now_ms: int,
        *,
        sample: int = 200,
        parked_sample: int = 20,
        batch: int = 250,
    ) -> Observation:
        """What the worker exports as gauges, at a bounded cost: each vendor's pause; per client the oldest
        pending delivery and the disabled subscriptions. The oldest pending delivery is a chain's head, so
        it is among the ``sample`` next due, the client's in-flight (at most CLIENT_MAX_IN_FLIGHT) or its
        ``parked_sample`` first parked ones, unless more deliveries fall due before it (the gauge then reads
        low, never high). Subscriptions: at most MAX_SUBSCRIPTIONS_PER_CLIENT per client. The reads go in
        pipelines of ``batch`` commands, so the event loop is never held for long."""
        obs = Observation()
        pipe = self.redis.pipeline(transaction=False)
        for vendor in vendors:
            pipe.hget(keys.vendor_pause(vendor), "until")
        pipe.zrange(keys.DUE_DELIVERIES, 0, sample - 1)
        for client in clients:
            pipe.zrange(keys.client_inflight(client), 0, self.settings.client_max_in_flight - 1)
            pipe.zrange(keys.client_parked(client), 0, parked_sample - 1)
            pipe.zrange(keys.client_subs(client), 0, self.settings.max_subscriptions_per_client - 1)
        replies = await pipe.execute()
        for vendor, untl in zip(vendors, replies, strict=False):
            obs.paused_until_ms[vendor] = None if untl is None else float(untl)
        rest = replies[len(vendors) :]
        dlv_ids = {_s(i) for i in rest[0]}
        sub_ids: list[tuple[str, str]] = []
        for n, client in enumerate(clients):
            inflight, parked, subs = rest[1 + 3 * n : 4 + 3 * n]
            dlv_ids.update(_s(i) for i in (*inflight, *parked))
            sub_ids.extend((client, _s(s)) for s in subs)
        reads: list[tuple[str, list[str]]] = [
            (keys.delivery(d), ["client", "created", "status"]) for d in dlv_ids
        ] + [(keys.subscription(sub_id), ["disabled", "disabled_reason"]) for _, sub_id in sub_ids]
        fields: list[list[Any]] = []
        for at in range(0, len(reads), batch):
            pipe = self.redis.pipeline(transaction=False)
            for key, names in reads[at : at + batch]:
                pipe.hmget(key, names)
            fields += await pipe.execute()
        for client_raw, created, status in fields[: len(dlv_ids)]:
            if client_raw is None or created is None or _s(status) != "pending" or not created.isdigit():
                continue
            client = _s(client_raw)
            age = max(0.0, (now_ms - int(created)) / 1000)
            obs.oldest_pending_s[client] = max(obs.oldest_pending_s.get(client, 0.0), age)
        for (client, _), (disabled, reason) in zip(sub_ids, fields[len(dlv_ids) :], strict=False):
            if disabled is not None and _s(disabled) == "1":
                kind = "auto" if reason and _s(reason) != OWNER_DISABLED else "owner"
                obs.disabled_subs[(client, kind)] = obs.disabled_subs.get((client, kind), 0) + 1
        return obs

    async def in_flight_count(self, vendors: Sequence[str]) -> int:
        pipe = self.redis.pipeline(transaction=False)
        for vendor in vendors:
            pipe.zcard(keys.due_runs(vendor))
        return sum(await pipe.execute())

    # Subscriptions ------------------------------------------------------------------------------

    async def create_subscription(self, sub: dict[str, str], *, max_count: int) -> bool:
        """Writes a new subscription; False (nothing written) when its client already has ``max_count``."""
        flat = [item for pair in sub.items() for item in pair]
        written = await self.scripts.create_subscription(
            keys=[keys.subscription(sub["id"]), keys.client_subs(sub["client"])],
            args=[int(sub["created"]), sub["id"], max_count, *flat],
        )
        return bool(written)

    async def rate_limit(
        self, name: str, client: str, rate_per_s: float, burst: int, *, take: bool = True
    ) -> float:
        """Takes one request from the client's limiter ``name`` (GCRA, shared by every API pod), or with
        ``take=False`` only looks. Returns 0 when it may go, else the seconds to wait before asking again."""
        wait_ms = await self.scripts.rate_limit(
            keys=[keys.client_rate(name, client)],
            args=[1000.0 / rate_per_s, burst, "take" if take else "peek"],
        )
        return int(wait_ms) / 1000

    async def get_subscription(self, sub_id: str) -> dict[str, str] | None:
        raw = await self.redis.hgetall(keys.subscription(sub_id))  # type: ignore[misc]
        return _hash(raw) if raw else None

    async def get_subscriptions(self, sub_ids: Sequence[str]) -> list[dict[str, str] | None]:
        pipe = self.redis.pipeline(transaction=False)
        for sub_id in sub_ids:
            pipe.hgetall(keys.subscription(sub_id))
        return [_hash(raw) if raw else None for raw in await pipe.execute()]

    async def list_subscriptions(self, client: str, *, limit: int, cursor: str | None) -> Page:
        return await self._page(keys.client_subs(client), limit, cursor, self.get_subscriptions, None)

    async def update_subscription(self, sub_id: str, fields: dict[str, str]) -> None:
        # WATCH-free: the fields written here are the user's own; health fields are the scripts'.
        await self.redis.hset(keys.subscription(sub_id), mapping=fields)  # type: ignore[misc]

    async def delete_subscription(self, sub_id: str, client: str) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(keys.subscription(sub_id))
        pipe.zrem(keys.client_subs(client), sub_id)
        await pipe.execute()

    # Subscription secrets at rest (secretbox.py) -------------------------------------------------

    def seal_secrets(self, sub_id: str, secrets: list[list[Any]]) -> str:
        """The ``secrets`` field to store: sealed under the primary ``SECRET_KEYS`` key when one is set."""
        return self.secret_box.seal(sub_id, secrets)

    def open_secrets(self, sub: dict[str, str]) -> list[list[Any]]:
        """``[[secret, expires_ms | None], ...]``, newest first; raises SecretUnavailable."""
        return self.secret_box.open(sub["id"], sub.get("secrets") or "[]")

    async def reseal_secrets(self) -> dict[str, int]:
        """Seals every subscription's secrets under the primary key (plain ones included): the migration
        after setting ``SECRET_KEYS`` or putting a new key first. Safe beside a running API: a value that
        changed meanwhile is left to its writer."""
        counts = {"resealed": 0, "current": 0, "unavailable": 0, "changed_meanwhile": 0}
        # Subscriptions are the hashes among the builder's keys (its deliveries and in-flight sets are zsets).
        async for raw in self.redis.scan_iter(match=keys.subscription("*"), count=500, _type="HASH"):
            key = _s(raw)
            sub = _hash(await self.redis.hgetall(key))  # type: ignore[misc]
            stored = sub.get("secrets")
            if not stored or "id" not in sub:
                continue
            if self.secret_box.current(stored):
                counts["current"] += 1
                continue
            try:
                sealed = self.secret_box.seal(sub["id"], self.secret_box.open(sub["id"], stored))
            except SecretUnavailable:
                counts["unavailable"] += 1
                continue
            done = await self.scripts.reseal_secret(keys=[key], args=[stored, sealed])
            counts["resealed" if done else "changed_meanwhile"] += 1
        return counts

    async def emit_test_event(self, client: str, sub_id: str, event: dict[str, Any], now_ms: int) -> int:
        ops = {
            "client": client,
            "now": now_ms,
            "retention_ms": self._retention_ms,
            "event": event,
            "sub_filter": [sub_id],
        }
        return int(await self.scripts.emit(keys=[keys.event(event["id"])], args=[json.dumps(ops)]))

    # Deliveries ---------------------------------------------------------------------------------

    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int
    ) -> tuple[list[ClaimedDelivery], float | None]:
        reply = await self.scripts.claim_deliveries(
            keys=[keys.DUE_DELIVERIES],
            args=[
                now_ms,
                limit,
                lease_ms,
                self.settings.subscription_max_in_flight,
                self.settings.client_max_in_flight,
            ],
        )
        rows, nxt = reply
        claimed = [
            ClaimedDelivery(_hash(dlv), _hash(sub) if sub else {}, bytes(body) if body else None)
            for dlv, sub, body in rows
        ]
        return claimed, float(nxt) if nxt else None

    async def release_deliveries(self, leases: Sequence[tuple[str, str, str, float]], now_ms: int) -> int:
        """Makes leased deliveries (id, subscription id, client, lease end ms) due now and frees their
        subscription's and client's in-flight slots, each only while its lease is still the one taken."""
        if not leases:
            return 0
        args: list[Any] = [now_ms]
        inflight: list[str] = []
        for dlv_id, sub, client, lease_end in leases:
            args += [dlv_id, lease_end]
            inflight.append(keys.sub_inflight(sub) if sub else keys.DUE_DELIVERIES)
            inflight.append(keys.client_inflight(client) if client else keys.DUE_DELIVERIES)
        return int(await self.scripts.release(keys=[keys.DUE_DELIVERIES, *inflight], args=args))

    async def record_attempt(
        self,
        delivery_id: str,
        outcome: str,
        *,
        now_ms: int,
        attempt: dict[str, Any] | None,
        next_at_ms: int | None = None,
        status_code: int | None = None,
    ) -> str:
        """Records an attempt and its outcome; returns the next delivery of the chain made due, or ""."""
        ops: dict[str, Any] = {
            "id": delivery_id,
            "outcome": outcome,
            "now": now_ms,
            "retention_ms": self._retention_ms,
            "disable_after_ms": int(self.settings.subscription_disable_after_s * 1000),
            "keep_attempts": 100,
            "status_code": "" if status_code is None else str(status_code),
        }
        if attempt is not None:
            ops["attempt"] = json.dumps(attempt, separators=(",", ":"))
        if next_at_ms is not None:
            ops["next_at"] = next_at_ms
        reply = await self.scripts.delivery_result(keys=[keys.delivery(delivery_id)], args=[json.dumps(ops)])
        return _s(reply[1]) if len(reply) > 1 else ""

    async def get_delivery(self, delivery_id: str) -> dict[str, str] | None:
        raw = await self.redis.hgetall(keys.delivery(delivery_id))  # type: ignore[misc]
        return _hash(raw) if raw else None

    async def get_deliveries(self, ids: Sequence[str]) -> list[dict[str, str] | None]:
        pipe = self.redis.pipeline(transaction=False)
        for delivery_id in ids:
            pipe.hgetall(keys.delivery(delivery_id))
        return [_hash(raw) if raw else None for raw in await pipe.execute()]

    async def delivery_attempts(self, delivery_id: str) -> list[dict[str, Any]]:
        return [json.loads(a) for a in await self.redis.lrange(keys.delivery_attempts(delivery_id), 0, -1)]  # type: ignore[misc]

    async def list_deliveries(
        self, sub_id: str, *, limit: int, cursor: str | None, status: str | None
    ) -> Page:
        def keep(d: dict[str, str]) -> bool:
            return status is None or d.get("status") == status

        return await self._page(keys.sub_deliveries(sub_id), limit, cursor, self.get_deliveries, keep)

    async def failed_deliveries_since(self, sub_id: str, since_ms: int) -> list[str]:
        ids = [_s(i) for i in await self.redis.zrangebyscore(keys.sub_deliveries(sub_id), since_ms, "+inf")]
        rows = await self.get_deliveries(ids)
        return [d["id"] for d in rows if d and d.get("status") == "failed"]

    async def retry_delivery(self, delivery_id: str, now_ms: int) -> bool:
        return bool(await self.scripts.retry_delivery(keys=[keys.delivery(delivery_id)], args=[now_ms]))

    # Workers ------------------------------------------------------------------------------------

    async def heartbeat(self, worker_id: str, payload: str, ttl_s: float) -> None:
        await self.redis.set(keys.worker(worker_id), payload, px=int(ttl_s * 1000))

    # Repair -------------------------------------------------------------------------------------

    async def repair(self, now_ms: int) -> dict[str, int]:
        """The sweeper: every unfinished run and every pending delivery that should be due has a place in
        its due set. The scripts keep that true; this catches what they cannot (a due set lost or edited
        by hand, a Redis restored from an older snapshot). It walks the sets of unfinished work, so a pass
        costs what is in flight, not the history kept for retention. Idempotent: ``ZADD NX`` never moves
        work that is already scheduled or leased."""
        counts = {"runs": 0, "deliveries": 0}
        for kind, active, key_of in (
            ("run", keys.ACTIVE_RUNS, keys.run),
            ("delivery", keys.ACTIVE_DELIVERIES, keys.delivery),
        ):
            batch: list[str] = []
            async for raw in self.redis.sscan_iter(active, count=500):
                batch.append(_s(raw))
                if len(batch) >= 500:
                    counts["runs" if kind == "run" else "deliveries"] += await self._repair(
                        kind, key_of, batch, now_ms
                    )
                    batch = []
            if batch:
                counts["runs" if kind == "run" else "deliveries"] += await self._repair(
                    kind, key_of, batch, now_ms
                )
        return counts

    async def _repair(self, kind: str, key_of: Any, ids: list[str], now_ms: int) -> int:
        pipe = self.redis.pipeline(transaction=False)
        for item in ids:
            await self.scripts.repair(keys=[key_of(item)], args=[kind, now_ms, item], client=pipe)
        return sum(int(r) for r in await pipe.execute())

    # Retention ----------------------------------------------------------------------------------

    async def purge_indexes(self, now_ms: int) -> int:
        """Drops listing entries older than the retention window whose records have expired.

        Only the listings of records that expire are walked (a client's runs, a subscription's
        deliveries), found by the key builders' own patterns, so a subscription index can never match.
        An entry stays while its record lives: a run still in flight, a delivery still pending."""
        cutoff = now_ms - self._retention_ms
        removed = 0
        for pattern, record in (
            (keys.client_runs("*"), keys.run),
            (keys.sub_deliveries("*"), keys.delivery),
        ):
            async for index in self.redis.scan_iter(match=pattern, count=500):
                removed += await self._purge_index(_s(index), record, cutoff)
        return removed

    async def _purge_index(self, index: str, record: Any, cutoff: int, chunk: int = 500) -> int:
        removed = 0
        start = 0
        while True:
            rows = await self.redis.zrangebyscore(index, "-inf", cutoff, start=start, num=chunk)
            if not rows:
                return removed
            ids = [_s(r) for r in rows]
            pipe = self.redis.pipeline(transaction=False)
            for item in ids:
                pipe.exists(record(item))
            gone = [item for item, alive in zip(ids, await pipe.execute(), strict=True) if not alive]
            if gone:
                # A record that expired never comes back (ids are never reused): no race to guard.
                removed += await self.redis.zrem(index, *gone)
            if len(rows) < chunk:
                return removed
            start += len(rows) - len(gone)

    # Paging -------------------------------------------------------------------------------------

    async def _page(self, index: str, limit: int, cursor: str | None, fetch: Any, keep: Any) -> Page:
        """Newest first. Scans at most 20 chunks so that a rare filter cannot make one request unbounded;
        the cursor then points past what was scanned."""
        max_score: float | str = "+inf"
        after: str | None = None
        if cursor:
            max_score, after = decode_cursor(cursor)
        out: list[Any] = []
        last: tuple[float, str] | None = None
        chunk = max(limit, 50)
        for _ in range(20):
            rows = await self.redis.zrevrangebyscore(
                index, max_score, "-inf", start=0, num=chunk + 1, withscores=True
            )
            members = [(_s(m), float(s)) for m, s in rows]
            if after is not None:
                # Skip up to and including the cursor's member (several may share its score).
                skip = next((i + 1 for i, (m, _) in enumerate(members) if m == after), 0)
                members = members[skip:]
            if not members:
                return Page(out, None)
            docs = await fetch([m for m, _ in members])
            for (member, score), doc in zip(members, docs, strict=True):
                last = (score, member)
                if doc is not None and (keep is None or keep(doc)):
                    out.append(doc)
                    if len(out) == limit:
                        return Page(out, encode_cursor(score, member))
            if len(rows) <= chunk:
                return Page(out, None)
            assert last is not None
            max_score, after = last
        return Page(out, encode_cursor(*last) if last else None)
