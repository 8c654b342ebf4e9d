"""The keys of one fan-out, declared by the caller in the order ``lua/_fanout.lua`` reads them.

A script never builds a key (``scripts.py``), so the subscriptions an event goes to are read first, with
a plain ZRANGE of the client's directory, and their keys declared; the script reads the directory again
and answers ``stale`` (writing nothing) when a subscription the events would go to was not declared,
so a subscription created in between still gets its deliveries, as it did when the script read the
directory itself."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from service.store import keys


def delivery_id(event_id: str, sub_id: str, n: int = 0) -> str:
    """A delivery's id, the same for the same event and subscription (``_fanout.lua`` mints it the same
    way: a fan-out that runs twice creates nothing twice); ``n`` > 0: the n-th other candidate."""
    seed = f"{event_id}:{sub_id}" if n == 0 else f"{event_id}:{sub_id}:{n}"
    return "dlv_" + hashlib.sha1(seed.encode()).hexdigest()[:26]


def delivery_id_in_shard(event_id: str, sub_id: str) -> str:
    """The delivery's id in its subscription's shard (issue 26's layout: a delivery's claim and result
    stay in one slot with its subscription): still deterministic, still ``dlv_`` and 26 hex digits."""
    return keys.in_shard(lambda n: delivery_id(event_id, sub_id, n), keys.shard_of(sub_id))


def block(client: str, run_id: str, event_ids: Sequence[str], sub_ids: Sequence[str]) -> list[str]:
    """The fan-out block: the client's feed, the active and due deliveries; per event its pending count
    (zero retention); per subscription its hash, delivery log and chain for ``run_id``; per event, per
    subscription, the delivery. No event's body: it lives in its run's shard, stored before the fan-out
    (by the transition that emits it, or by ``emit_test_event``)."""
    out = [keys.client_feed(client), keys.ACTIVE_DELIVERIES, keys.DUE_DELIVERIES]
    out += [keys.event_pending(event_id) for event_id in event_ids]
    for sub_id in sub_ids:
        out += [keys.subscription(sub_id), keys.sub_deliveries(sub_id), keys.chain(sub_id, run_id)]
    out += [keys.delivery(delivery_id(e, s)) for e in event_ids for s in sub_ids]
    return out


# How often a fan-out is tried again after ``stale`` (a subscription created between the read and the
# script) before the caller gives up with an error: only a client creating subscriptions faster than one
# round trip could use them all.
STALE_TRIES = 5


class StaleFanout(RuntimeError):
    """The client's subscriptions kept changing under a fan-out (``STALE_TRIES`` reads in a row)."""
