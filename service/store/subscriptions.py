"""The subscription aggregate: a subscription's hash (the user's fields and the health counters the
delivery scripts keep), the client's directory of them, their secrets at rest (``secretbox.py``), and
the one event a user can emit to a subscription by hand (``subscription.test``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis

from service.config.settings import Settings
from service.core import domain
from service.core.records import Event, Subscription
from service.store import bodies, fanout, keys
from service.store.base import Part
from service.store.codec import hash_of, subscription_or_none, text
from service.store.pages import Listing, page
from service.store.scripts import Scripts
from service.store.secretbox import SecretBox, SecretUnavailable

# The reason the API writes when a subscription's owner disables it; any other reason is hookbridge's own.
OWNER_DISABLED = "disabled by its owner"


class Subscriptions(Part):
    def __init__(self, redis: Redis, scripts: Scripts, settings: Settings) -> None:
        super().__init__(redis, scripts, settings)
        self.secret_box = SecretBox(settings.secret_keys)

    async def new_subscription_id(self, client: str) -> str:
        """A new subscription's id, minted into the shard after its client's last one
        (``keys.spread_shard``): a client's handful of subscriptions, and their deliveries, land on as many
        shards (and primaries), not on one. Two created at once may share a shard: only the spread
        suffers."""
        count = int(await self.redis.zcard(keys.client_subs(client)))
        return domain.new_id_in_shard("sub", keys.spread_shard(client, count))

    async def create_subscription(self, sub: Subscription, *, max_count: int) -> bool:
        """Writes a new subscription; False (nothing left written) when its client already has
        ``max_count``. Two steps, one slot each: the hash in the subscription's shard, then its entry in
        the client's directory, under the quota (``create_subscription.lua``), which is what makes it
        live (the fan-out reads the directory); refused, the hash goes again. A process that dies between
        the two leaves a hash that nothing lists and whose id nobody was given."""
        await self.redis.hset(keys.subscription(sub.id), mapping=sub.to_hash())  # type: ignore[misc]
        written = await self.scripts.create_subscription(
            keys=[keys.client_subs(sub.client), keys.client_sub_types(sub.client)],
            args=[sub.created_at, sub.id, max_count, fanout.types_json(sub.event_types)],
        )
        if not written:
            await self.redis.delete(keys.subscription(sub.id))
        return bool(written)

    async def get_subscription(self, sub_id: str) -> Subscription | None:
        return (await self.get_subscriptions([sub_id]))[0]

    async def get_subscriptions(self, sub_ids: Sequence[str]) -> list[Subscription | None]:
        return [subscription_or_none(raw) for raw in await self.hashes(map(keys.subscription, sub_ids))]

    async def list_subscriptions(
        self, client: str, *, limit: int, cursor: str | None
    ) -> Listing[Subscription]:
        return await page(self.redis, keys.client_subs(client), limit, cursor, self.get_subscriptions, None)

    async def update_subscription(self, sub: Subscription, changed: Iterable[str]) -> None:
        """Writes the ``changed`` fields of ``sub``. WATCH-free: those are the user's own (and the secrets);
        the health fields are the scripts'. New event types join those the client's directory keeps for
        it first (``widen_sub_types.lua``), so the relay never skips an event the hash asks for."""
        changed = list(changed)
        if "event_types" in changed:
            await self.scripts.widen_sub_types(
                keys=[keys.client_sub_types(sub.client)], args=[sub.id, fanout.types_json(sub.event_types)]
            )
        await self.redis.hset(keys.subscription(sub.id), mapping=sub.to_hash(changed))  # type: ignore[misc]

    async def delete_subscription(self, sub_id: str, client: str) -> None:
        """Out of the client's directory first (no fan-out reaches it from then on), then the hash: a
        failure between the two leaves the hash, and the caller's retry finds it and ends the job."""
        await self.redis.zrem(keys.client_subs(client), sub_id)
        await self.redis.hdel(keys.client_sub_types(client), sub_id)  # type: ignore[misc]
        await self.redis.delete(keys.subscription(sub_id))

    # Secrets at rest (secretbox.py) -------------------------------------------------------------

    def seal_secrets(self, sub_id: str, secrets: list[list[Any]]) -> str:
        """The ``secrets`` field to store: sealed under the primary ``SECRET_KEYS`` key when one is set."""
        return self.secret_box.seal(sub_id, secrets)

    def open_secrets(self, sub: Subscription) -> list[list[Any]]:
        """``[[secret, expires_ms | None], ...]``, newest first; raises SecretUnavailable."""
        return self.secret_box.open(sub.id, sub.secrets)

    def secrets_current(self, sealed: str) -> bool:
        """Whether ``sealed`` is sealed under the primary key already (nothing to reseal)."""
        return self.secret_box.current(sealed)

    async def reseal_secrets(self) -> dict[str, int]:
        """Seals every subscription's secrets under the primary key (:func:`reseal_secrets`)."""
        return await reseal_secrets(self.redis, self.scripts, self.secret_box)

    async def emit_test_event(
        self, client: str, sub_id: str, event: Event, now_ms: int, *, example: bool = False
    ) -> int:
        """Emits ``event`` to the one subscription ``sub_id``; returns the deliveries created (0 when the
        subscription is disabled or the event was emitted before). An ``example`` goes whatever event
        types the subscription asked for, and not into the client's feed. The body first, in the event's
        own shard (a delivery is never claimed before the body it sends exists), then the delivery in the
        subscription's, then the feed entry in the client's slot."""
        body = bodies.packed(event.body)
        body_key = keys.event(event.id)
        fresh = await self.redis.set(body_key, body, px=self.retention_ms, nx=True)
        one = fanout.Event(id=event.id, type=event.type, now=now_ms, body=body)
        [call] = fanout.deliveries_calls(client, "", [one], [sub_id], any_type=example)
        fanned = fanout.merged([one], [await self.scripts.fanout_deliveries(*call)])
        if not fanned.created:
            if fresh:
                await self.redis.delete(body_key)  # the subscription is disabled: nothing sends it
            return 0
        if not example:
            ks, args = fanout.feed_call(
                "test", client, "", [(None, [one])], fanned, retention_ms=self.retention_ms
            )
            await self.scripts.relay_feed(keys=ks, args=args)
        return fanned.created


async def reseal_secrets(redis: Redis, scripts: Scripts, box: SecretBox) -> dict[str, int]:
    """Seals every subscription's secrets under the primary key (plain ones included): the migration
    after setting ``SECRET_KEYS`` or putting a new key first. Safe beside a running API: a value that
    changed meanwhile is left to its writer."""
    counts = {"resealed": 0, "current": 0, "unavailable": 0, "changed_meanwhile": 0}
    # Subscriptions are the hashes among the builder's keys (its deliveries and in-flight sets are zsets),
    # in every shard.
    async for raw in redis.scan_iter(match=f"{keys.ANY_SHARD}sub:*", count=500, _type="HASH"):
        key = text(raw)
        sub = hash_of(await redis.hgetall(key))  # type: ignore[misc]
        stored = sub.get("secrets")
        if not stored or "id" not in sub:
            continue
        if box.current(stored):
            counts["current"] += 1
            continue
        try:
            sealed = box.seal(sub["id"], box.open(sub["id"], stored))
        except SecretUnavailable:
            counts["unavailable"] += 1
            continue
        done = await scripts.reseal_secret(keys=[key], args=[stored, sealed])
        counts["resealed" if done else "changed_meanwhile"] += 1
    return counts
