"""The Redis store: the only module that knows key names (``keys``) and changes state (``scripts``).

Every state change is one Lua script, so a change and the events and deliveries it implies are
written together or not at all. See ``keys.py`` for the data layout, ``service/records.py`` for the
records and ``codec.py`` for how a reply becomes one; the sweeper, the purge and the gauges' sample are in
``maintenance.py``, listings in ``pages.py``.

redis-py types its hash and list commands as returning "Awaitable[T] | T" for its sync and async
clients alike; the ``type: ignore[misc]`` on some awaits below are for that alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from service.domain import TERMINAL, AttemptOutcome, DeliveryStatus
from service.records import Attempt, Delivery, Event, Run, Subscription, Transition
from service.settings import Settings
from service.store import bodies, jsoncodec, keys, maintenance
from service.store.codec import (
    ClaimedDelivery,
    ClaimedRun,
    claimed_deliveries,
    claimed_runs,
    delivery_or_none,
    run_or_none,
    subscription_or_none,
    text,
)
from service.store.connection import connect
from service.store.maintenance import OWNER_DISABLED, Observation
from service.store.outcomes import Applied, Conflict, Missing, Outcome
from service.store.pages import RECOVER_SCAN, Listing, oldest_first, page
from service.store.scripts import Scripts
from service.store.secretbox import SecretBox, SecretUnavailable

__all__ = [
    "OWNER_DISABLED",
    "Applied",
    "ClaimedDelivery",
    "ClaimedRun",
    "Conflict",
    "Listing",
    "Missing",
    "Observation",
    "Outcome",
    "OverRate",
    "SecretUnavailable",
    "Store",
    "connect",
    "keys",
]


class OverRate(Exception):
    """The client is over its rate; ``wait_s`` until it may go again."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"over the rate for {wait_s:g} s")
        self.wait_s = wait_s


class Store:
    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.scripts = Scripts(redis)
        self._retention_ms = int(settings.retention_s * 1000)
        # A metadata index outlives its newest run: the longest a run may take, then the retention.
        longest_run_s = max((v.max_run_s for v in settings.vendors.values()), default=0.0)
        self._metadata_ttl_ms = self._retention_ms + int(longest_run_s * 1000)
        self.secret_box = SecretBox(settings.secret_keys)

    async def ping(self) -> bool:
        return bool(await self.redis.ping())

    async def close(self) -> None:
        await self.redis.aclose()

    # Runs ---------------------------------------------------------------------------------------

    async def create_run(
        self,
        run: Run,
        document: bytes | None,
        idem: tuple[str, str] | None,
        *,
        rate: tuple[float, int] | None = None,
    ) -> str | None:
        """Writes a new run. With ``idem=(key, fingerprint)`` returns the stored ``"fingerprint run_id"``
        instead when the key was used before (and writes nothing). With ``rate=(per_s, burst)`` the
        submit takes one request from the client's ``submit`` limiter in the same step, and raises
        :class:`OverRate` (nothing written) when the client is over it; a replay takes nothing."""
        ks = [
            keys.run(run.id),
            keys.document(run.id),
            keys.client_runs(run.client),
            keys.due_runs(run.vendor),
            keys.client_rate("submit", run.client),
        ]
        interval, burst = (1000.0 / rate[0], rate[1]) if rate else ("", 0)
        args: list[Any] = [run.to_json(), document or b"", run.created_at, run.id, interval, burst]
        if idem:
            ks.append(keys.idempotency(run.client, idem[0]))
            args += [f"{idem[1]} {run.id}", int(self.settings.idempotency_ttl_s * 1000)]
        else:
            args += ["", 0]
        # One index per metadata pair (at most MAX_METADATA_PAIRS): the metadata filter reads one.
        args += [len(ks) + 1, self._metadata_ttl_ms]
        ks += [keys.run_metadata(run.client, k, v) for k, v in run.metadata.items()]
        reply = await self.scripts.create_run(keys=ks, args=args)
        outcome = text(reply[0])
        if outcome == "rate_limited":
            raise OverRate(int(text(reply[1])) / 1000)
        return text(reply[1]) if outcome == "exists" else None

    async def idempotency_record(self, client: str, key: str) -> str | None:
        value = await self.redis.get(keys.idempotency(client, key))
        return text(value) if value is not None else None

    async def get_run(self, run_id: str) -> Run | None:
        return run_or_none(await self.redis.get(keys.run(run_id)))

    async def get_runs(self, run_ids: Sequence[str]) -> list[Run | None]:
        if not run_ids:
            return []
        return [run_or_none(raw) for raw in await self.redis.mget([keys.run(r) for r in run_ids])]

    async def get_document(self, run_id: str) -> bytes | None:
        raw = await self.redis.get(keys.document(run_id))
        return bytes(raw) if raw is not None else None

    async def keep_document(self, run_id: str, content: bytes, ttl_s: float) -> bytes:
        """Keeps a fetched document under the run's document key, as a bytes submit is kept, unless one is
        kept already; returns the kept bytes (the first fetch's, on a race). ``ttl_s`` bounds a key that
        a run ended meanwhile would otherwise leave behind."""
        key = keys.document(run_id)
        if await self.redis.set(key, content, nx=True, px=max(1, int(ttl_s * 1000))):
            return content
        kept = await self.redis.get(key)
        return bytes(kept) if kept is not None else content

    async def get_result(self, run_id: str) -> bytes | None:
        raw = await self.redis.get(keys.result(run_id))
        return bytes(raw) if raw is not None else None

    async def run_events(self, run: Run) -> list[tuple[str, dict[str, Any]]]:
        """The run's events that are still kept, oldest first, as (event id, body): those its record names
        (``Run.event_ids``) and its progress events (a list; every event, for a run written before the
        record named them)."""
        listed = [text(i) for i in await self.redis.lrange(keys.run_events(run.id), 0, -1)]  # type: ignore[misc]
        ids = list(dict.fromkeys([*run.event_ids, *listed]))
        if not ids:
            return []
        stored = await self.redis.mget([keys.event(i) for i in ids])
        kept = [
            (event_id, json.loads(body))
            for event_id, raw in zip(ids, stored, strict=True)
            if raw and (body := bodies.unpacked_or_none(raw))
        ]
        # By time; the sort is stable, so events of one millisecond keep the order they were named in.
        return sorted(kept, key=lambda item: str(item[1].get("timestamp", "")))

    async def list_runs(
        self,
        client: str,
        *,
        limit: int,
        cursor: str | None,
        status: str | None,
        vendor: str | None,
        created_after_ms: int | None = None,
        created_before_ms: int | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> Listing[Run]:
        """The client's runs, newest first, filtered. The time range [after, before) is read from the
        index's scores; with ``metadata`` pairs (all must match) the index read is the smallest of their
        own indexes (written at create), and the other filters check each run read, within
        :func:`pages.page`'s bound per request."""

        def keep(run: Run) -> bool:
            return (
                (status is None or run.status == status)
                and (vendor is None or run.vendor == vendor)
                and all(run.metadata.get(k) == v for k, v in metadata)
            )

        index = keys.client_runs(client)
        if metadata:
            candidates = [keys.run_metadata(client, k, v) for k, v in dict.fromkeys(metadata)]
            pipe = self.redis.pipeline(transaction=False)
            for name in candidates:
                pipe.zcard(name)
            sizes = await pipe.execute()
            index = min(zip(sizes, candidates, strict=True))[1]
        return await page(
            self.redis,
            index,
            limit,
            cursor,
            self.get_runs,
            keep,
            low=created_after_ms,
            high=created_before_ms,
        )

    async def transition(self, change: Transition) -> Outcome:
        """Applies ``change`` if the run is still at version ``expect_v``: :class:`Applied` (with the
        deliveries created, and whether it ended the run: the caller counts that end), :class:`Conflict`
        (with the stored run) or :class:`Missing`."""
        reply = await self.scripts.transition(
            keys=[keys.run(change.run.id)], args=self._transition_args(change)
        )
        return self._transition_outcome(change, reply)

    async def transitions(self, changes: Sequence[Transition]) -> list[Outcome | Exception]:
        """:meth:`transition` for many runs in one call of ``transitions.lua`` (one round trip and one
        reply, each change still applied on its own, as it would be alone).

        Returns each change's outcome, or the error its step raised; a lost connection raises.
        """
        argv: list[Any] = []
        for change in changes:
            args = self._transition_args(change)
            argv.append(len(args))
            argv.extend(args)
        replies = await self.scripts.transitions(keys=[keys.run(c.run.id) for c in changes], args=argv)
        out: list[Outcome | Exception] = []
        for change, reply in zip(changes, replies, strict=True):
            if text(reply[0]) == "error":
                out.append(ResponseError(text(reply[1])))
            else:
                out.append(self._transition_outcome(change, reply))
        return out

    def _transition_args(self, change: Transition) -> list[Any]:
        run = change.run
        ops: dict[str, Any] = {
            "run_id": run.id,
            "client": run.client,
            "expect_v": change.expect_v,
            "status": run.status,
            "now": run.updated_at,
            "retention_ms": self._retention_ms,
            "zr": "1" if run.zero_retention else "0",
            "due_key": keys.due_runs(run.vendor),
            "events": [_stored_event(e) for e in change.events],
            "sub_filter": run.subscription_ids,
            "del_doc": change.delete_document,
        }
        if change.due_ms is not None:
            ops["due_score"] = int(change.due_ms)
        elif change.remove_due:
            ops["due_remove"] = True
        if change.ttl_ms is not None:
            ops["ttl_ms"] = change.ttl_ms
        # The run and the result travel as their own arguments, not escaped inside the ops JSON.
        args: list[Any] = [jsoncodec.dumps(ops), run.to_json()]
        if change.result is not None:
            args.append(change.result)
        return args

    @staticmethod
    def _transition_outcome(change: Transition, reply: Any) -> Outcome:
        # transition.lua's reply: {'ok', deliveries, previous_status} | {'conflict', run} | {'missing'}
        outcome = text(reply[0])
        if outcome == "conflict":
            return Conflict(Run.from_json(reply[1]))
        if outcome == "ok":
            ended = change.run.status in TERMINAL and text(reply[2]) not in TERMINAL
            return Applied(int(reply[1]), ended)
        return Missing()

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
        return claimed_runs(reply)

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

    async def observe(self, vendors: Sequence[str], clients: Sequence[str], now_ms: int) -> Observation:
        """The worker's gauges, sampled at a bounded cost (``maintenance.observe``)."""
        return await maintenance.observe(self.redis, self.settings, vendors, clients, now_ms)

    async def in_flight_count(self, vendors: Sequence[str]) -> int:
        pipe = self.redis.pipeline(transaction=False)
        for vendor in vendors:
            pipe.zcard(keys.due_runs(vendor))
        return sum(await pipe.execute())

    # Subscriptions ------------------------------------------------------------------------------

    async def create_subscription(self, sub: Subscription, *, max_count: int) -> bool:
        """Writes a new subscription; False (nothing written) when its client already has ``max_count``."""
        flat = [item for pair in sub.to_hash().items() for item in pair]
        written = await self.scripts.create_subscription(
            keys=[keys.subscription(sub.id), keys.client_subs(sub.client)],
            args=[sub.created_at, sub.id, max_count, *flat],
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

    async def get_subscription(self, sub_id: str) -> Subscription | None:
        return (await self.get_subscriptions([sub_id]))[0]

    async def get_subscriptions(self, sub_ids: Sequence[str]) -> list[Subscription | None]:
        return [subscription_or_none(raw) for raw in await self._hashes(map(keys.subscription, sub_ids))]

    async def list_subscriptions(
        self, client: str, *, limit: int, cursor: str | None
    ) -> Listing[Subscription]:
        return await page(self.redis, keys.client_subs(client), limit, cursor, self.get_subscriptions, None)

    async def update_subscription(self, sub: Subscription, changed: Iterable[str]) -> None:
        """Writes the ``changed`` fields of ``sub``. WATCH-free: those are the user's own (and the secrets);
        the health fields are the scripts'."""
        await self.redis.hset(keys.subscription(sub.id), mapping=sub.to_hash(changed))  # type: ignore[misc]

    async def delete_subscription(self, sub_id: str, client: str) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(keys.subscription(sub_id))
        pipe.zrem(keys.client_subs(client), sub_id)
        await pipe.execute()

    # Subscription secrets at rest (secretbox.py) -------------------------------------------------

    def seal_secrets(self, sub_id: str, secrets: list[list[Any]]) -> str:
        """The ``secrets`` field to store: sealed under the primary ``SECRET_KEYS`` key when one is set."""
        return self.secret_box.seal(sub_id, secrets)

    def open_secrets(self, sub: Subscription) -> list[list[Any]]:
        """``[[secret, expires_ms | None], ...]``, newest first; raises SecretUnavailable."""
        return self.secret_box.open(sub.id, sub.secrets)

    async def reseal_secrets(self) -> dict[str, int]:
        """Seals every subscription's secrets under the primary key (``maintenance.reseal_secrets``)."""
        return await maintenance.reseal_secrets(self.redis, self.scripts, self.secret_box)

    async def emit_test_event(
        self, client: str, sub_id: str, event: Event, now_ms: int, *, example: bool = False
    ) -> int:
        """Emits ``event`` to the one subscription ``sub_id``; returns the deliveries created (0 when the
        subscription is disabled or the event was emitted before). An ``example`` goes whatever event
        types the subscription asked for, and not into the client's feed."""
        ops = {
            "example": example,
            "client": client,
            "now": now_ms,
            "retention_ms": self._retention_ms,
            "event": _stored_event(event),
            "sub_filter": [sub_id],
        }
        return int(await self.scripts.emit(keys=[keys.event(event.id)], args=[json.dumps(ops)]))

    # Deliveries ---------------------------------------------------------------------------------

    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int, *, client_max: int | None = None
    ) -> tuple[list[ClaimedDelivery], float | None]:
        """``client_max``: a client's deliveries in flight at most (``CLIENT_MAX_IN_FLIGHT`` by default)."""
        reply = await self.scripts.claim_deliveries(
            keys=[keys.DUE_DELIVERIES],
            args=[
                now_ms,
                limit,
                lease_ms,
                self.settings.subscription_max_in_flight,
                self.settings.client_max_in_flight if client_max is None else client_max,
            ],
        )
        return claimed_deliveries(reply)

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
        outcome: AttemptOutcome,
        *,
        now_ms: int,
        attempt: Attempt | None,
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
            "default_max_in_flight": self.settings.subscription_max_in_flight,
        }
        if attempt is not None:
            ops["attempt"] = attempt.to_json()
        if next_at_ms is not None:
            ops["next_at"] = next_at_ms
        reply = await self.scripts.delivery_result(keys=[keys.delivery(delivery_id)], args=[json.dumps(ops)])
        return text(reply[1]) if len(reply) > 1 else ""

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        return (await self.get_deliveries([delivery_id]))[0]

    async def get_deliveries(self, ids: Sequence[str]) -> list[Delivery | None]:
        return [delivery_or_none(raw) for raw in await self._hashes(map(keys.delivery, ids))]

    async def _hashes(self, names: Iterable[str]) -> list[Any]:
        """Every field of each hash, in one round trip (an empty reply for a hash that is gone)."""
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(name)
        return list(await pipe.execute())

    async def delivery_attempts(self, delivery_id: str) -> list[Attempt]:
        raws = await self.redis.lrange(keys.delivery_attempts(delivery_id), 0, -1)  # type: ignore[misc]
        return [Attempt.from_json(a) for a in raws]

    async def list_deliveries(
        self,
        sub_id: str,
        *,
        limit: int,
        cursor: str | None,
        status: str | None,
        event_type: str | None = None,
        run_id: str | None = None,
    ) -> Listing[Delivery]:
        """The subscription's delivery log, newest first. With ``run_id`` the run's own index is read (a
        run has few deliveries), else the subscription's; the other filters check each delivery read,
        within :func:`pages.page`'s bound per request."""

        def keep(d: Delivery) -> bool:
            return (
                (status is None or d.status == status)
                and (event_type is None or d.event_type == event_type)
                and (run_id is None or d.run_id == run_id)
                and d.subscription_id == sub_id
            )

        index = keys.run_deliveries(run_id) if run_id else keys.sub_deliveries(sub_id)
        return await page(self.redis, index, limit, cursor, self.get_deliveries, keep)

    async def run_deliveries(self, run_id: str, *, limit: int, cursor: str | None) -> Listing[Delivery]:
        """The run's deliveries to every subscription, newest first (the index the fan-out writes)."""
        return await page(self.redis, keys.run_deliveries(run_id), limit, cursor, self.get_deliveries, None)

    async def failed_deliveries_since(
        self,
        sub_id: str,
        since_ms: int,
        *,
        until_ms: int | None = None,
        cursor: str | None = None,
        scan: int = RECOVER_SCAN,
    ) -> tuple[list[str], str | None]:
        """The failed deliveries among the next ``scan`` of the subscription's log in [since, until), oldest
        first, and the cursor to pass for the rest (None: done). Raises ValueError on a cursor we did not
        make."""
        index = keys.sub_deliveries(sub_id)
        ids, next_cursor = await oldest_first(self.redis, index, since_ms, until_ms, cursor, scan)
        found = await self.get_deliveries(ids)
        return [d.id for d in found if d and d.status == DeliveryStatus.FAILED], next_cursor

    async def retry_delivery(self, delivery_id: str, now_ms: int) -> str:
        """Makes the delivery due now on a fresh retry series: ``"ok"``, ``"missing"``, or ``"in_flight"``
        (an attempt is being sent: nothing changed)."""
        return text(await self.scripts.retry_delivery(keys=[keys.delivery(delivery_id)], args=[now_ms]))

    # Workers and upkeep -------------------------------------------------------------------------

    async def heartbeat(self, worker_id: str, payload: str, ttl_s: float) -> None:
        await self.redis.set(keys.worker(worker_id), payload, px=int(ttl_s * 1000))

    async def repair(self, now_ms: int) -> dict[str, int]:
        """The sweeper's pass (``maintenance.repair``)."""
        return await maintenance.repair(self.redis, self.scripts, now_ms)

    async def purge_indexes(self, now_ms: int) -> int:
        """Drops listing entries past retention whose records expired (``maintenance.purge_indexes``)."""
        return await maintenance.purge_indexes(self.redis, now_ms - self._retention_ms)


def _stored_event(event: Event) -> dict[str, Any]:
    """The event as the scripts take it: its bodies in their stored form (``bodies.packed``), and no null
    fields (a Lua null is truthy)."""
    out = event.model_dump(exclude_none=True)
    out["body"] = bodies.packed(event.body)
    if event.feed is not None:
        out["feed"] = bodies.packed(event.feed)
    return out
