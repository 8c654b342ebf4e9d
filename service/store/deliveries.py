"""The delivery aggregate: a delivery's hash and attempts, the subscription's delivery log and the run's
index of deliveries, the due set the delivery pump claims from, and the in-flight and parked sets that
hold a subscription (and a client) to its limit. Every change is one script: ``claim_deliveries``,
``delivery_result``, ``retry_delivery``, ``release``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from service.config.settings import Settings
from service.core.domain import AttemptOutcome, DeliveryStatus
from service.core.records import DELIVERY_HASH, DELIVERY_HASH_INTERNAL, Attempt, Delivery, Subscription
from service.store import fanout, keys
from service.store.base import Part, each_call
from service.store.codec import ClaimedDelivery, claimed_deliveries, delivery_or_none, text, with_body
from service.store.due import DueShards, interleaved
from service.store.outcomes import Applied, Busy, Missing, RetryOutcome
from service.store.pages import RECOVER_SCAN, Listing, oldest_first, page
from service.store.scripts import Scripts

# What the scripts are given of a delivery's hash, read first (they name its other keys).
_CLAIM_FIELDS = [DELIVERY_HASH[f] for f in ("subscription_id", "event_id", "client")]
_RESULT_FIELDS = [DELIVERY_HASH[f] for f in ("subscription_id", "run_id", "event_id", "client")]
_RETRY_FIELDS = [DELIVERY_HASH[f] for f in ("subscription_id", "client", "run_id")]


def _result_names(d: Delivery) -> list[str]:
    """What ``_RESULT_FIELDS`` reads, from the record itself."""
    return [d.subscription_id, d.run_id or "", d.event_id, d.client]


# retry_delivery.lua's replies.
_RETRY: dict[str, RetryOutcome] = {"ok": Applied(), "in_flight": Busy(), "missing": Missing()}


@dataclass
class _Rooms:
    """How one claim shares its slots: ``limits``, per shard, the deliveries its call may claim (``limit``
    in all); ``given``, per (client, shard), the client's share of this worker's room for it there;
    ``full``, the clients with no room left here (their candidates are parked)."""

    limits: dict[int, int] = field(default_factory=dict)
    given: dict[tuple[str, int], int] = field(default_factory=dict)
    full: set[str] = field(default_factory=set)


def _rooms(
    picked: Sequence[tuple[int, str]],
    named: Sequence[Sequence[str]],
    limit: int,
    cap: int,
    held: Mapping[str, int],
) -> _Rooms:
    """Shares out a claim's ``limit`` and each client's room in this worker (``cap`` less what it
    ``held``s) over the shards, in the order the candidates were ``picked`` (the shards in turn): one
    round trip then claims in every shard at once, never more than ``limit``, nor more of a client's
    than its room."""
    out = _Rooms()
    used: dict[str, int] = {}
    takes = 0
    for (shard, _), (sid, evt, client) in zip(picked, named, strict=True):
        if not (sid and evt):
            continue
        room = cap - held.get(client, 0)
        if room <= 0:
            out.full.add(client)
        elif used.get(client, 0) < room and takes < limit:
            used[client] = used.get(client, 0) + 1
            out.given[(client, shard)] = out.given.get((client, shard), 0) + 1
            out.limits[shard] = out.limits.get(shard, 0) + 1
            takes += 1
    return out


class Deliveries(Part):
    def __init__(self, redis: Redis, scripts: Scripts, settings: Settings) -> None:
        super().__init__(redis, scripts, settings)
        # The 16 due sets as this process knows them (store/due.py, as the runs' claim).
        self._due = DueShards(refresh_ms=settings.worker_idle_s * 1000)
        # Per client, the shards where this process parked its deliveries for want of room
        # (claim_deliveries: ``held``); one comes back as each of the client's attempts here ends.
        self.room_parked: dict[str, set[int]] = {}

    async def claim_deliveries(
        self,
        now_ms: int,
        limit: int,
        lease_ms: int,
        *,
        client_max: int | None = None,
        held: Mapping[str, int] | None = None,
    ) -> tuple[list[ClaimedDelivery], float | None]:
        """Claims up to ``limit`` due deliveries over the 16 shards' due sets, a client at most
        ``client_max`` in flight in a shard (``CLIENT_MAX_IN_FLIGHT`` by default), and at most
        ``client_max`` with ``held`` (per client, the deliveries this process has in flight already):
        the client's surplus beyond that is parked, and comes back one for each of the client's attempts
        here that ends (:meth:`unpark`).

        In steps, each in one slot: the due ids of the shards this process believes due (store/due.py),
        past ``limit`` (so that parking one client's surplus does not take a claim per batch), one round
        trip; what each one names (its subscription, event and client), one round trip; then
        ``claim_deliveries.lua`` once per shard, all in one round trip; the bodies, read after."""
        cap = self.settings.client_max_in_flight if client_max is None else client_max
        found = await self._due_ids(now_ms, limit * 4)
        picked = interleaved(found, limit * 4)
        if not picked:
            return [], self._due.earliest()
        named = await self._named([dlv_id for _, dlv_id in picked], _CLAIM_FIELDS)
        rooms = _rooms(picked, named, limit, cap, held or {})
        calls: dict[int, tuple[list[str], list[Any]]] = {}
        per_sub = self.settings.subscription_max_in_flight
        for (shard, dlv_id), (sid, evt, client) in zip(picked, named, strict=True):
            ks, args = calls.setdefault(
                shard,
                (
                    [keys.due_deliveries(shard), keys.active_deliveries(shard)],
                    [now_ms, rooms.limits.get(shard, 0), lease_ms, per_sub, cap],
                ),
            )
            dkey = keys.delivery(dlv_id)
            if sid and evt:
                ks += [
                    dkey,
                    keys.subscription(sid),
                    keys.sub_inflight(sid),
                    keys.sub_parked(sid),
                    keys.sub_budget(sid),
                    keys.client_inflight(client, shard),
                    keys.client_parked(client, shard),
                ]
            else:  # gone, or names no event: the script only ends it (the delivery key stands in)
                ks += [dkey] * 7
            if client in rooms.full:
                self.room_parked.setdefault(client, set()).add(shard)
                args += [dlv_id, sid, evt, client, "park"]
            else:
                args += [dlv_id, sid, evt, client, rooms.given.get((client, shard), 0)]
        replies = await each_call(self.redis, self.scripts.claim_deliveries, list(calls.values()))
        claimed: list[tuple[Delivery, Subscription | None]] = []
        for shard, reply in zip(calls, replies, strict=True):
            got, nxt = claimed_deliveries(reply)
            claimed += got
            self._due.next_due[shard] = nxt
        if not claimed:
            return [], self._due.earliest()
        # The events' bodies, read after the claim (they live with the run that emitted them, in the
        # run's shard): one round trip for the batch.
        read = await self.values(keys.event(dlv.event_id) for dlv, _ in claimed)
        done = [with_body(dlv, sub, body) for (dlv, sub), body in zip(claimed, read, strict=True)]
        return done, self._due.earliest()

    async def _due_ids(self, now_ms: int, limit: int) -> dict[int, list[str]]:
        """The due ids (at most ``limit`` a shard) of the shards this process believes due, each with its
        head (one round trip); every other shard's head once per ``WORKER_IDLE_S``, and the ids of those
        whose head is due (a second round trip, only then): an idle worker reads one head a shard."""
        due: list[int] = []
        looked: list[int] = []
        for shard in self._due.to_read(now_ms):
            known = self._due.next_due[shard]
            (due if known is not None and known <= now_ms else looked).append(shard)
        if looked:
            heads = await self.heads([keys.due_deliveries(shard) for shard in looked])
            for shard, head in zip(looked, heads, strict=True):
                self._due.next_due[shard] = head
                if head is not None and head <= now_ms:
                    due.append(shard)
        found: dict[int, list[str]] = {}
        if due:
            pipe = self.redis.pipeline(transaction=False)
            for shard in due:
                pipe.zrangebyscore(keys.due_deliveries(shard), "-inf", now_ms, start=0, num=limit)
                pipe.zrange(keys.due_deliveries(shard), 0, 0, withscores=True)
            read = await pipe.execute()
            for n, shard in enumerate(due):
                ids, head = read[2 * n], read[2 * n + 1]
                if ids:
                    found[shard] = [text(i) for i in ids]
                self._due.next_due[shard] = float(head[0][1]) if head else None
        return found

    def forget_due(self) -> None:
        """Drops what this process knows of the due sets: the next claim reads every shard."""
        self._due = DueShards(refresh_ms=self._due.refresh_ms)

    def made_due(self, shards: Iterable[int], now_ms: float) -> None:
        """Deliveries of ``shards`` were made due by this process (a relay's): its next claim reads those
        shards, not only at its next look at every shard (``WORKER_IDLE_S`` later)."""
        for shard in shards:
            self._due_now(shard, now_ms)

    def _due_now(self, shard: int, now_ms: float) -> None:
        """Something of ``shard`` was made due by this process (a chain's next, a parked delivery back):
        its next claim reads that shard."""
        known = self._due.next_due[shard]
        self._due.next_due[shard] = now_ms if known is None else min(known, now_ms)

    async def unpark(self, client: str, now_ms: int, *, ended_in: int | None = None) -> bool:
        """One of ``client``'s attempts here ended: one of the deliveries this process parked for want of
        room for that client comes back to its due set (a shard's oldest, the lowest shard first). Not
        from ``ended_in``, the shard of the attempt that ended: its result brought one back there already
        (delivery_result.lua). False when there was none to bring back here."""
        shards = self.room_parked.get(client)
        if not shards:
            self.room_parked.pop(client, None)
            return False
        others = [s for s in shards if s != ended_in]
        if not others:
            return False
        shard = min(others)
        left = int(
            await self.scripts.unpark(
                keys=[keys.client_parked(client, shard), keys.due_deliveries(shard)], args=[now_ms]
            )
        )
        if not left:
            shards.discard(shard)
            if not shards:
                self.room_parked.pop(client, None)
        self._due_now(shard, now_ms)
        return True

    async def _named(self, ids: Sequence[str], fields: Sequence[str]) -> list[list[str]]:
        """``fields`` of each delivery hash, as text ("" for a field or a hash that is gone)."""
        pipe = self.redis.pipeline(transaction=False)
        for dlv_id in ids:
            pipe.hmget(keys.delivery(dlv_id), list(fields))
        return [[text(v) for v in row] for row in await pipe.execute()]

    async def release_deliveries(self, leases: Sequence[tuple[str, str, str, float]], now_ms: int) -> int:
        """Makes leased deliveries (id, subscription id, client, lease end ms) due now and frees their
        subscription's and client's in-flight slots, each only while its lease is still the one taken:
        one call per shard."""
        calls: dict[int, tuple[list[str], list[Any]]] = {}
        for dlv_id, sub, client, lease_end in leases:
            shard = keys.shard_of(dlv_id)
            due = keys.due_deliveries(shard)
            ks, args = calls.setdefault(shard, ([due], [now_ms]))
            args += [dlv_id, lease_end]
            ks.append(keys.sub_inflight(sub) if sub else due)
            ks.append(keys.client_inflight(client, shard) if client else due)
        replies = await each_call(self.redis, self.scripts.release, list(calls.values()))
        return sum(int(n) for n in replies)

    async def record_attempt(
        self,
        delivery: str | Delivery,
        outcome: AttemptOutcome,
        *,
        now_ms: int,
        attempt: Attempt | None,
        next_at_ms: int | None = None,
        status_code: int | None = None,
    ) -> str:
        """Records an attempt and its outcome; returns the next delivery of the chain made due, or "".

        ``delivery``: its id, or the record as claimed, whose subscription, run, event and client name the
        script's keys without a read first (the script checks them against the stored record)."""
        delivery_id = delivery if isinstance(delivery, str) else delivery.id
        known = None if isinstance(delivery, str) else _result_names(delivery)
        ops: dict[str, Any] = {
            "id": delivery_id,
            "outcome": outcome,
            "now": now_ms,
            "retention_ms": self.retention_ms,
            "disable_after_ms": int(self.settings.subscription_disable_after_s * 1000),
            "keep_attempts": 100,
            "status_code": "" if status_code is None else str(status_code),
            "default_max_in_flight": self.settings.subscription_max_in_flight,
        }
        if attempt is not None:
            ops["attempt"] = attempt.to_json()
            if (short := attempt.short()) is not None:
                ops["short"] = short
        if next_at_ms is not None:
            ops["next_at"] = next_at_ms
        for _ in range(fanout.STALE_TRIES):
            [(sid, run_id, evt, client)] = (
                [known] if known else await self._named([delivery_id], _RESULT_FIELDS)
            )
            known = None
            if not sid:
                return ""  # gone
            ops.update(sid=sid, run_id=run_id, evt=evt, client=client)
            shard = keys.shard_of(delivery_id)
            ks = [
                keys.delivery(delivery_id),
                keys.delivery_attempts(delivery_id),
                keys.subscription(sid),
                keys.sub_inflight(sid),
                keys.sub_parked(sid),
                keys.client_inflight(client, shard),
                keys.client_parked(client, shard),
                keys.due_deliveries(shard),
                keys.active_deliveries(shard),
                keys.chain(sid, run_id),
            ]
            reply = await self.scripts.delivery_result(keys=ks, args=[json.dumps(ops)])
            if text(reply[0]) != "stale":
                if text(reply[0]) == "ok":
                    self._due_now(shard, now_ms)  # a chain's next or a parked one may be due now
                if len(reply) > 2 and int(reply[2]):
                    # Zero retention: a delivery of the event ended for good; the last one's end drops the
                    # body (the result), in the event's shard. Were this process to die first, the body
                    # would stay until its expiry (RETENTION_S).
                    await self.scripts.pending_done(
                        keys=[keys.event_pending(evt), keys.event(evt)], args=[self.retention_ms]
                    )
                return text(reply[1]) if len(reply) > 1 else ""
        raise fanout.StaleFanout(f"delivery {delivery_id} kept changing")

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        return (await self.get_deliveries([delivery_id]))[0]

    async def get_deliveries(self, ids: Sequence[str]) -> list[Delivery | None]:
        return [delivery_or_none(raw) for raw in await self.hashes(map(keys.delivery, ids))]

    async def delivery_attempts(self, delivery_id: str) -> list[Attempt]:
        """The delivery's attempt log, oldest first: the first attempt in its short form when the hash keeps
        it (delivery_result.lua), then the list's."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(keys.delivery(delivery_id), DELIVERY_HASH_INTERNAL["first_attempt"])
        pipe.lrange(keys.delivery_attempts(delivery_id), 0, -1)
        first, raws = await pipe.execute()
        return ([Attempt.from_short(first)] if first else []) + [Attempt.from_json(a) for a in raws]

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

    async def retry_delivery(self, delivery_id: str, now_ms: int) -> RetryOutcome:
        """Makes the delivery due now on a fresh retry series: :class:`Applied`, :class:`Missing`, or
        :class:`Busy` (an attempt is being sent: nothing changed)."""
        for _ in range(fanout.STALE_TRIES):
            [(sid, client, run_id)] = await self._named([delivery_id], _RETRY_FIELDS)
            if not sid:
                return Missing()
            shard = keys.shard_of(delivery_id)
            ks = [
                keys.delivery(delivery_id),
                keys.delivery_attempts(delivery_id),
                keys.sub_inflight(sid),
                keys.client_inflight(client, shard),
                keys.sub_parked(sid),
                keys.client_parked(client, shard),
                keys.chain(sid, run_id),
                keys.due_deliveries(shard),
                keys.active_deliveries(shard),
            ]
            reply = text(await self.scripts.retry_delivery(keys=ks, args=[now_ms, sid, client, run_id]))
            if reply != "stale":
                return _RETRY[reply]
        raise fanout.StaleFanout(f"delivery {delivery_id} kept changing")
