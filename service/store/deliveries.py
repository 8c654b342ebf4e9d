"""The delivery aggregate: a delivery's hash and attempts, the subscription's delivery log and the run's
index of deliveries, the due set the delivery pump claims from, and the in-flight and parked sets that
hold a subscription (and a client) to its limit. Every change is one script: ``claim_deliveries``,
``delivery_result``, ``retry_delivery``, ``release``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from service.core.domain import AttemptOutcome, DeliveryStatus
from service.core.records import DELIVERY_HASH, Attempt, Delivery
from service.store import fanout, keys
from service.store.base import Part
from service.store.codec import ClaimedDelivery, claimed_deliveries, delivery_or_none, text, with_body
from service.store.outcomes import Applied, Busy, Missing, RetryOutcome
from service.store.pages import RECOVER_SCAN, Listing, oldest_first, page

# What the scripts are given of a delivery's hash, read first (they name its other keys).
_CLAIM_FIELDS = [DELIVERY_HASH[f] for f in ("subscription_id", "event_id", "client")]
_RESULT_FIELDS = [DELIVERY_HASH[f] for f in ("subscription_id", "run_id", "event_id", "client")]
_RETRY_FIELDS = [DELIVERY_HASH[f] for f in ("subscription_id", "client", "run_id")]


def _result_names(d: Delivery) -> list[str]:
    """What ``_RESULT_FIELDS`` reads, from the record itself."""
    return [d.subscription_id, d.run_id or "", d.event_id, d.client]


# retry_delivery.lua's replies.
_RETRY: dict[str, RetryOutcome] = {"ok": Applied(), "in_flight": Busy(), "missing": Missing()}


class Deliveries(Part):
    async def claim_deliveries(
        self, now_ms: int, limit: int, lease_ms: int, *, client_max: int | None = None
    ) -> tuple[list[ClaimedDelivery], float | None]:
        """``client_max``: a client's deliveries in flight at most (``CLIENT_MAX_IN_FLIGHT`` by default).

        The due ids are read first, then what each one names (its subscription, event and client), so
        that ``claim_deliveries.lua`` is given every key it touches; with none due no script runs."""
        due = keys.DUE_DELIVERIES
        pipe = self.redis.pipeline(transaction=False)
        # Past `limit`, so that parking one client's surplus does not take a claim per batch.
        pipe.zrangebyscore(due, "-inf", now_ms, start=0, num=limit * 4)
        pipe.zrange(due, 0, 0, withscores=True)
        ids_raw, head = await pipe.execute()
        ids = [text(i) for i in ids_raw]
        if not ids:
            return [], float(head[0][1]) if head else None
        named = await self._named(ids, _CLAIM_FIELDS)
        ks: list[str] = [due, keys.ACTIVE_DELIVERIES]
        args: list[Any] = [
            now_ms,
            limit,
            lease_ms,
            self.settings.subscription_max_in_flight,
            self.settings.client_max_in_flight if client_max is None else client_max,
        ]
        for dlv_id, (sid, evt, client) in zip(ids, named, strict=True):
            dkey = keys.delivery(dlv_id)
            if sid and evt:
                ks += [
                    dkey,
                    keys.subscription(sid),
                    keys.sub_inflight(sid),
                    keys.sub_parked(sid),
                    keys.sub_budget(sid),
                    keys.client_inflight(client),
                    keys.client_parked(client),
                ]
            else:  # gone, or names no event: the script only ends it (the delivery key stands in)
                ks += [dkey] * 7
            args += [dlv_id, sid, evt, client]
        claimed, nxt = claimed_deliveries(await self.scripts.claim_deliveries(keys=ks, args=args))
        if not claimed:
            return [], nxt
        # The events' bodies, read after the claim (they live with the run that emitted them, which in
        # stage two of the shards is not the delivery's slot): one round trip for the batch.
        pipe = self.redis.pipeline(transaction=False)
        for dlv, _ in claimed:
            pipe.get(keys.event(dlv.event_id))
        read = await pipe.execute()
        return [with_body(dlv, sub, body) for (dlv, sub), body in zip(claimed, read, strict=True)], nxt

    async def _named(self, ids: Sequence[str], fields: Sequence[str]) -> list[list[str]]:
        """``fields`` of each delivery hash, as text ("" for a field or a hash that is gone)."""
        pipe = self.redis.pipeline(transaction=False)
        for dlv_id in ids:
            pipe.hmget(keys.delivery(dlv_id), list(fields))
        return [[text(v) for v in row] for row in await pipe.execute()]

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
            ks = [
                keys.delivery(delivery_id),
                keys.delivery_attempts(delivery_id),
                keys.subscription(sid),
                keys.sub_inflight(sid),
                keys.sub_parked(sid),
                keys.client_inflight(client),
                keys.client_parked(client),
                keys.DUE_DELIVERIES,
                keys.ACTIVE_DELIVERIES,
                keys.chain(sid, run_id),
                keys.event_pending(evt),
            ]
            reply = await self.scripts.delivery_result(keys=ks, args=[json.dumps(ops)])
            if text(reply[0]) != "stale":
                if len(reply) > 2 and int(reply[2]):
                    # Zero retention: the event's last delivery ended, its body (the result) goes. Were
                    # this process to die first, the body would stay until its expiry (RETENTION_S).
                    await self.redis.delete(keys.event(evt))
                return text(reply[1]) if len(reply) > 1 else ""
        raise fanout.StaleFanout(f"delivery {delivery_id} kept changing")

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        return (await self.get_deliveries([delivery_id]))[0]

    async def get_deliveries(self, ids: Sequence[str]) -> list[Delivery | None]:
        return [delivery_or_none(raw) for raw in await self.hashes(map(keys.delivery, ids))]

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

    async def retry_delivery(self, delivery_id: str, now_ms: int) -> RetryOutcome:
        """Makes the delivery due now on a fresh retry series: :class:`Applied`, :class:`Missing`, or
        :class:`Busy` (an attempt is being sent: nothing changed)."""
        for _ in range(fanout.STALE_TRIES):
            [(sid, client, run_id)] = await self._named([delivery_id], _RETRY_FIELDS)
            if not sid:
                return Missing()
            ks = [
                keys.delivery(delivery_id),
                keys.delivery_attempts(delivery_id),
                keys.sub_inflight(sid),
                keys.client_inflight(client),
                keys.sub_parked(sid),
                keys.client_parked(client),
                keys.chain(sid, run_id),
                keys.DUE_DELIVERIES,
                keys.ACTIVE_DELIVERIES,
            ]
            reply = text(await self.scripts.retry_delivery(keys=ks, args=[now_ms, sid, client, run_id]))
            if reply != "stale":
                return _RETRY[reply]
        raise fanout.StaleFanout(f"delivery {delivery_id} kept changing")
