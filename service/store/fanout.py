"""A fan-out: an event's deliveries, one per matching active subscription of its client, each in its
subscription's shard, then its place in the client's feed (docs/shards.md).

Two kinds of step, each in one slot, each safe to repeat: per shard holding some of the client's
subscriptions, ``fanout_deliveries.lua`` creates the deliveries there (a delivery's id is the event's and
the subscription's, minted into the subscription's shard, so a repeat creates nothing twice); then, in
the client's slot, ``relay_feed.lua`` appends the events to the feed, after reading the client's
directory again: a subscription created since the caller read it makes the answer ``stale``, and the
caller fans out again (:data:`STALE_TRIES`). There is never an event in the feed without its
deliveries. A script never builds a key (``scripts.py``): this module declares them, in the order the
scripts read them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from service.core import domain
from service.store import feedform, jsoncodec, keys


def delivery_id(event_id: str, sub_id: str, n: int = 0) -> str:
    """A candidate delivery id for the event and the subscription (the same every time); ``n`` > 0: the
    n-th other candidate."""
    seed = f"{event_id}:{sub_id}" if n == 0 else f"{event_id}:{sub_id}:{n}"
    return "dlv_" + hashlib.sha1(seed.encode()).hexdigest()[:26]


def delivery_id_in_shard(event_id: str, sub_id: str) -> str:
    """The delivery's id: the first candidate in its subscription's shard (a delivery's claim and result
    stay in one slot with its subscription), still deterministic, still ``dlv_`` and 26 hex digits."""
    return keys.in_shard(lambda n: delivery_id(event_id, sub_id, n), keys.shard_of(sub_id))


class Event(NamedTuple):
    """An event to fan out, as the scripts take it: ``before``, fanned out earlier (the relay's mark
    says so: its deliveries are only reported); ``zr``, its run keeps nothing (zero retention);
    ``body``/``feed``: its packed body, and zero retention's feed body (without the result). A tuple: a
    relay makes one for every event of every change it relays, and a tuple is made in a third of a frozen
    dataclass's time."""

    id: str
    type: str
    now: int
    body: bytes
    vendor: str | None = None
    feed: bytes | None = None
    before: bool = False
    zr: bool = False


def types_json(event_types: Sequence[str] | None) -> str:
    """A subscription's event types as its client's directory keeps them (``keys.client_sub_types``): a JSON
    list, the default set spelled out."""
    return json.dumps(list(event_types or domain.DEFAULT_EVENT_TYPES), separators=(",", ":"))


def kept_types(raw: Mapping[Any, Any]) -> dict[str, tuple[str, ...]]:
    """``keys.client_sub_types`` as read (HGETALL): per subscription, the types kept for it; an entry that
    is not a JSON list of strings is left out (its subscription wants every event)."""
    out: dict[str, tuple[str, ...]] = {}
    for sub_id, value in raw.items():
        try:
            types = json.loads(value)
        except ValueError:
            continue
        if isinstance(types, list) and all(isinstance(t, str) for t in types):
            out[sub_id.decode() if isinstance(sub_id, bytes) else str(sub_id)] = tuple(types)
    return out


def may_want(types: Sequence[str] | None, event_type: str) -> bool:
    """Whether a subscription whose directory keeps ``types`` (None: keeps none) may want an event of
    ``event_type``: ``_fanout.lua``'s ``matches`` over a list that is never narrower than its own."""
    if types is None or event_type == domain.EVENT_TEST:
        return True
    return any(t == event_type or (t == "run.*" and event_type.startswith("run.")) for t in types)


def to_fan_out(
    subs: Sequence[str], events: Sequence[Event], kept: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """The subscriptions a fan-out of ``events`` calls on: those that may want one of them
    (:func:`may_want`), or all of them when an event was fanned out before (its deliveries are only
    reported, and a subscription's types may have changed since). Those left out would get nothing from
    the fan-out's script, which reads their types again: skipping them saves a script call, and its
    delivery ids, for every run.progress that no subscription asked for."""
    if any(e.before for e in events):
        return list(subs)
    return [s for s in subs if any(may_want(kept.get(s), e.type) for e in events)]


def by_shard(subs: Sequence[str]) -> dict[int, list[str]]:
    """The subscriptions grouped by their shard, each group in the order given."""
    out: dict[int, list[str]] = {}
    for sub_id in subs:
        out.setdefault(keys.shard_of(sub_id), []).append(sub_id)
    return out


def deliveries_calls(
    client: str, run_id: str, events: Sequence[Event], subs: Sequence[str], *, any_type: bool = False
) -> list[tuple[list[str], list[Any]]]:
    """``fanout_deliveries.lua``'s KEYS and ARGV, one call per shard of ``subs``."""
    calls = []
    for shard, group in by_shard(subs).items():
        ks = [keys.active_deliveries(shard), keys.due_deliveries(shard)]
        for sub_id in group:
            ks += [keys.subscription(sub_id), keys.sub_deliveries(sub_id), keys.chain(sub_id, run_id)]
        dlv = [delivery_id_in_shard(e.id, s) for e in events for s in group]
        ks += [keys.delivery(d) for d in dlv]
        ops = {
            "run_id": run_id,
            "client": client,
            "subs": group,
            "events": [
                {"id": e.id, "type": e.type, "now": str(e.now), "before": e.before, "zr": e.zr}
                for e in events
            ],
            "dlv": dlv,
            "any_type": any_type,
        }
        calls.append((ks, [jsoncodec.dumps(ops)]))
    return calls


@dataclass
class Fanned:
    """What the deliveries' steps did: how many they created, and per event its deliveries' ids."""

    created: int
    deliveries: list[list[str]]

    def shards(self) -> frozenset[int]:
        """The shards of the deliveries (each in its subscription's): whose due sets they are in."""
        return frozenset(keys.shard_of(d) for ids in self.deliveries for d in ids)


def merged(events: Sequence[Event], replies: Sequence[Any]) -> Fanned:
    """The replies of :func:`deliveries_calls`' calls, as one."""
    out = Fanned(0, [[] for _ in events])
    for reply in replies:
        out.created += int(reply[0])
        raw = reply[1].decode() if isinstance(reply[1], bytes) else reply[1]
        for ids, found in zip(out.deliveries, json.loads(raw), strict=True):
            if found:  # {} (Lua's empty table) or a list of ids
                ids += found
    return out


def stored_by_relay(event_type: str) -> bool:
    """Whether an event's body is stored under its own key by the relay, not by the transition that
    emits it: a run.progress, whose body most often goes to the client's feed alone (no subscription
    asked for it: :func:`dropped`). The transition keeps it in the run's outbox only; the relay stores it
    before a fan-out that may deliver it (:func:`bodies_to_store`), so that a delivery never finds its body
    missing, and the relay's last step deletes it again if none did. Every other event's body is stored
    with the transition."""
    return event_type == domain.EVENT_PROGRESS


def bodies_to_store(events: Sequence[Event], called: Sequence[str]) -> list[Event]:
    """The events whose bodies a relay stores before its fan-out: those the transition left to it
    (:func:`stored_by_relay`), when the fan-out calls on a subscription at all (``called``:
    :func:`to_fan_out`'s answer). With no subscription called, every one of them is dropped."""
    return [e for e in events if stored_by_relay(e.type)] if called else []


def dropped(event: Event, dlv: Sequence[str]) -> bool:
    """An event whose body is the relay's to store (:func:`stored_by_relay`: a run.progress) that no
    subscription took: kept in the feed only (its stored body, if the relay stored one, is deleted by the
    relay's last step)."""
    return not dlv and stored_by_relay(event.type)


def feed_call(
    mode: str,
    client: str,
    run_id: str,
    entries: Sequence[tuple[int | None, Sequence[Event]]],
    fanned: Fanned,
    *,
    subs: Sequence[str] = (),
    sub_filter: Sequence[str] = (),
    mark_ms: int = 0,
    retention_ms: int,
) -> tuple[list[str], list[Any]]:
    """``relay_feed.lua``'s KEYS and ARGV: ``entries``, (the run's version after the transition that
    emitted them, the events). The feed keeps an event's body itself when its key does not keep it for
    as long: an event dropped (:func:`dropped`), and zero retention's (its feed body)."""
    feed = keys.client_feed(client)
    ks = [keys.client_subs(client), keys.relayed(client, run_id), feed] if mode == "relay" else [feed] * 3
    args: list[Any] = [""]
    out = []
    n = 0
    for version, events in entries:
        listed = []
        for event in events:
            body = event.body
            # n: its size in bytes (a feed page's bound); a body given as text is UTF-8
            size = len(body.encode()) if isinstance(body, str) else len(body)
            # As the feed's entry stores them (feedform): the id (bytes, its place in ARGV), the type's code,
            # the vendor's.
            args.append(feedform.stored_event_id(event.id))
            row: dict[str, Any] = {"id": len(args), "type": feedform.type_code(event.type), "n": size}
            if event.vendor:
                row["vendor"] = feedform.vendor_code(event.vendor)
            if dropped(event, fanned.deliveries[n]) or event.zr:
                args.append(event.feed if event.feed is not None else event.body)
                row["body"] = len(args)
            listed.append(row)
            n += 1
        out.append({"v": None if version is None else str(version), "events": listed})
    args.append(feedform.stored_run_id(run_id))  # only ever the feed entry's r
    ops = {
        "mode": mode,
        "run_id": len(args),  # its place in ARGV
        "subs": list(subs),
        "sub_filter": list(sub_filter),
        "mark_ms": str(mark_ms),
        "retention_ms": str(retention_ms),
        "entries": out,
    }
    args[0] = jsoncodec.dumps(ops)
    return ks, args


# How often a fan-out is tried again after ``stale`` (a subscription created between the read and the
# script) before the caller gives up with an error: only a client creating subscriptions faster than one
# round trip could use them all.
STALE_TRIES = 5


class StaleFanout(RuntimeError):
    """The client's subscriptions kept changing under a fan-out (``STALE_TRIES`` reads in a row)."""
