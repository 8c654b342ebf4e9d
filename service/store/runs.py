"""The run aggregate: a run's record, its document, its result and its events; the client's listing of
runs; the due sets the run pump claims from. Every change of a run is one script (``create_run``,
``transition``, ``claim_runs``, ``release``), so a run and the events and deliveries it implies are
written together or not at all."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.config.settings import Settings
from service.core import domain
from service.core.domain import EVENT_PROGRESS, SUCCEEDED, TERMINAL
from service.core.records import Run, Transition, result_in_event
from service.observability import logs
from service.store import bodies, fanout, feedform, jsoncodec, keys
from service.store.base import Part, batched, each_call, failed, scripts_in_turn, stored_event
from service.store.codec import ClaimedRun, claimed_runs, run_or_none, text
from service.store.due import DueShards, interleaved, read_per_shard
from service.store.limits import OverRate
from service.store.outcomes import Applied, Conflict, Missing, Outcome
from service.store.pages import Listing, page
from service.store.scripts import Scripts

log = logs.get("hookbridge.store")

# How long a run's events may wait in its outbox before the sweeper relays them: the relay right after the
# transition takes milliseconds; the sweeper's is for a process that died between the two. Two relays of
# one outbox at once are safe (the first empties it), so this only spares the sweeper needless work.
RELAY_GRACE_MS = 5_000
# How long the relay's mark of how far a run's outbox was fanned out is kept after its last fan-out
# (keys.relayed): a relay whose last step failed is finished by the next relay of that run (its next
# transition's, or the sweeper's within RELAY_GRACE_MS and a pass or two), which must find the mark to
# add nothing twice to the client's feed (never longer than RETENTION_S, the feed's own window). Past it,
# a relay finishing that run's outbox would append those
# events to the feed a second time (never a delivery: their ids are the event's and the subscription's).
RELAY_MARK_MS = 600_000


@dataclass(frozen=True)
class _Entry:
    """One transition's entry in a run's outbox, as a relay read it: its first item as stored (``head``,
    the relay's ops, which the last step matches against the outbox's head), those ops, and how many
    items the entry is (the ops, then the events' bodies)."""

    head: Any
    ops: dict[str, Any]
    items: int
    events: tuple[fanout.Event, ...] = ()


def _outbox_entries(items: Sequence[Any]) -> list[_Entry]:
    out: list[_Entry] = []
    at = 0
    while at < len(items):
        ops = json.loads(items[at])
        out.append(_entry(items[at : at + 1 + int(ops["n"])], ops))
        at += out[-1].items
    return out


def _entry(parts: Sequence[Any], ops: dict[str, Any]) -> _Entry:
    """One outbox entry: ``parts``, its items (the ops as stored, then the bodies, which the events name by
    position, 1-based), and ``ops`` decoded."""
    events = tuple(
        fanout.Event(
            id=ev["id"],
            type=ev["type"],
            now=int(ops["now"]),
            body=_raw(parts[ev["body"] - 1]),
            vendor=ev.get("vendor"),
            feed=_raw(parts[ev["feed"] - 1]) if "feed" in ev else None,
            zr=ops.get("zr") == "1",
        )
        for ev in ops["events"]
    )
    return _Entry(parts[0], ops, 1 + int(ops["n"]), events)


@dataclass(frozen=True)
class _Plan:
    """One relay's fan-out: its events, the bodies it stores before the fan-out (``fanout.bodies_to_store``),
    the deliveries' calls (one per subscription shard), and the client's feed call, made from what those
    did."""

    events: list[fanout.Event]
    store: list[fanout.Event]
    deliveries: list[tuple[list[str], list[Any]]]
    feed: Callable[[fanout.Fanned], tuple[list[str], list[Any]]]


@dataclass(frozen=True)
class _Directory:
    """What a relay reads of its run's client before it fans out: the client's subscriptions, the event
    types its directory keeps for them (``keys.client_sub_types``), and the run's relay mark."""

    subs: list[str]
    types: dict[str, tuple[str, ...]]
    mark: int


def _at_or_below(version: Any, mark: int) -> bool:
    """Whether an outbox entry of the run's ``version`` was fanned out before (the relay's mark)."""
    return version is not None and int(version) <= mark


def _raw(item: Any) -> bytes:
    return item if isinstance(item, bytes) else str(item).encode()


def metadata_ttl_ms(settings: Settings) -> int:
    """A metadata index outlives its newest run: the longest a run may take, then the retention."""
    longest_run_s = max((v.max_run_s for v in settings.vendors.values()), default=0.0)
    return int(settings.retention_s * 1000) + int(longest_run_s * 1000)


class Runs(Part):
    def __init__(self, redis: Redis, scripts: Scripts, settings: Settings) -> None:
        super().__init__(redis, scripts, settings)
        # Per vendor, what this worker knows of its due sets (service/store/due.py): each shard's next due
        # run, and the ids the last claim there saw still due, its next candidates (each is claimed only if
        # it is still due then, so a stale one costs nothing but its place in the batch).
        self._due: dict[str, DueShards] = {}
        # On one Redis server a change's events that no subscription may want go to the client's feed in
        # the change's own step (transition.lua's feed part); a cluster's slots keep the feed apart from
        # the run, so there they always take the relay.
        self._feed_in_transition = not isinstance(redis, RedisCluster)

    @staticmethod
    def new_run_id(client: str, idempotency_key: str | None) -> str:
        """A new run's id: with an ``Idempotency-Key``, in the shard of its record, so that the record and
        the run are written in one step (:meth:`create_run` refuses one that is not)."""
        if idempotency_key is None:
            return domain.new_id("run")
        return domain.new_id_beside("run", keys.idempotency_anchor(client, idempotency_key))

    async def create_run(
        self,
        run: Run,
        document: bytes | None,
        idem: tuple[str, str] | None,
        *,
        rate: tuple[float, int] | None = None,
    ) -> str | None:
        """Writes a new run. With ``idem=(key, fingerprint)`` returns the stored ``"fingerprint run_id"``
        instead when the key was used before (and writes nothing of the run). With ``rate=(per_s, burst)``
        the submit takes one request from the client's ``submit`` limiter first, and raises
        :class:`OverRate` (nothing written) when the client is over it.

        Two steps, each in one slot: the client's (``accept_run.lua``: the rate and the run's listing
        entries), then the run's (``create_run.lua``: the idempotency record, the run, its document and
        its first due step). On one Redis server both are one script (``submit_run.lua``), one round
        trip. On a cluster they are two scripts: without a rate (all that can refuse the first) sent at
        once, with one the second after the first's answer. A replay that lost a race to the first
        submit took a request of the rate and left a listing entry that names no run (skipped, then
        purged)."""
        if idem is not None and keys.shard_of(run.id) != keys.shard_of(
            keys.idempotency_anchor(run.client, idem[0])
        ):
            raise ValueError("a run with an Idempotency-Key needs an id from Runs.new_run_id")
        interval, burst = (1000.0 / rate[0], rate[1]) if rate else ("", 0)
        # One index per metadata pair (at most MAX_METADATA_PAIRS): the metadata filter reads one.
        listed: tuple[list[str], list[Any]] = (
            [
                keys.client_runs(run.client),
                keys.client_rate("submit", run.client),
                *(keys.run_metadata(run.client, k, v) for k, v in run.metadata.items()),
            ],
            [run.created_at, run.id, interval, burst, metadata_ttl_ms(self.settings)],
        )
        shard = keys.shard_of(run.id)
        ks = [
            keys.run(run.id),
            keys.document(run.id),
            keys.due_runs(run.vendor, shard),
            keys.active_runs(shard),
        ]
        args: list[Any] = [run.to_json(), document or b"", run.created_at, run.id]
        if idem:
            ks.append(keys.idempotency(run.client, idem[0]))
            args += [f"{idem[1]} {run.id}", int(self.settings.idempotency_ttl_s * 1000)]
        if not isinstance(self.redis, RedisCluster):
            reply = await self.scripts.submit_run(
                keys=[*listed[0], *ks], args=[len(listed[0]), len(listed[1]), *listed[1], *args]
            )
        elif rate:
            reply = await self.scripts.accept_run(keys=listed[0], args=listed[1])
            if text(reply[0]) == "ok":
                reply = await self.scripts.create_run(keys=ks, args=args)
        else:
            _, reply = await scripts_in_turn(
                self.redis,
                [(self.scripts.accept_run, *listed), (self.scripts.create_run, ks, args)],
            )
        if text(reply[0]) == "rate_limited":
            raise OverRate(int(text(reply[1])) / 1000)
        return text(reply[1]) if text(reply[0]) == "exists" else None

    async def idempotency_record(self, client: str, key: str) -> str | None:
        value = await self.redis.get(keys.idempotency(client, key))
        return text(value) if value is not None else None

    async def get_run(self, run_id: str) -> Run | None:
        return run_or_none(await self.redis.get(keys.run(run_id)), run_id)

    async def get_runs(self, run_ids: Sequence[str]) -> list[Run | None]:
        if not run_ids:
            return []
        raws = await self.values(keys.run(r) for r in run_ids)
        return [run_or_none(raw, run_id) for raw, run_id in zip(raws, run_ids, strict=True)]

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

    async def get_result(self, run: Run) -> bytes | None:
        """The run's result as ``GET /v1/runs/{id}/result`` serves it: its own key, or, for a result inline
        in the run's ``run.succeeded`` (which keeps it alone: ``lifecycle.finished``), from that event's
        body; None when neither is kept (past retention)."""
        raw = await self.redis.get(keys.result(run.id))
        if raw is not None:
            return bytes(raw)
        if run.status != SUCCEEDED or run.result_type is not None or not run.event_ids:
            return None
        stored = await self.redis.get(keys.event(run.event_ids[-1]))  # the run's end: its last event
        body = bodies.unpacked_or_none(stored, run.id) if stored is not None else None
        if body is None:
            return None
        try:
            return result_in_event(body)
        except ValueError:
            return None

    async def run_events(self, run: Run) -> list[tuple[str, dict[str, Any]]]:
        """The run's events that are still kept, oldest first, as (event id, body): those its record names
        (``Run.event_ids``) and its progress events (a list; every event, for a run written before the
        record named them)."""
        listed = [text(i) for i in await self.redis.lrange(keys.run_events(run.id), 0, -1)]  # type: ignore[misc]
        ids = list(dict.fromkeys([*run.event_ids, *listed]))
        if not ids:
            return []
        stored = await self.values(keys.event(i) for i in ids)
        kept = [
            (event_id, json.loads(body))
            for event_id, raw in zip(ids, stored, strict=True)
            if raw and (body := bodies.unpacked_or_none(raw, run.id))
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
        deliveries its events created, and whether it ended the run: the caller counts that end),
        :class:`Conflict` (with the stored run) or :class:`Missing`. A change with events puts them in the
        run's outbox in the same step; they are relayed at once (:meth:`relay`). On one Redis server,
        events that no subscription may want go to the client's feed in that step instead, when the
        outbox is empty (``transition.lua``'s feed part: :func:`_feed_part`), and there is no relay."""
        ks, args, entry = self._transition_call(change)
        reply = await self.scripts.transition(keys=ks, args=args)
        outcome = _transition_outcome(change, reply)
        if isinstance(outcome, Applied) and entry is not None and not _fed(reply):
            [(count, due_in)] = await self._relay_after([(change, entry, int(reply[1]))])
            return replace(outcome, deliveries=count, due_in=due_in)
        return outcome

    async def transitions(self, changes: Sequence[Transition]) -> list[Outcome | Exception]:
        """:meth:`transition` for many runs in one call of ``transitions`` (``_batch.lua`` around
        ``transition.lua``) per shard they are in on a cluster, one in all on a Redis server (one
        round trip for them all, each change still applied on its own, as it would be alone), then the
        relays of those that emitted events into their outboxes (not those whose events went to the feed
        in their own step), a round trip per step of the relay for them all.

        Returns each change's outcome, or the error its step raised; a lost connection raises.
        """
        entries: list[_Entry | None] = []
        refused: dict[int, Exception] = {}  # a change the store cannot apply: its own error, not the batch's
        at: list[int] = []
        calls: list[tuple[list[str], list[Any]]] = []
        for i, change in enumerate(changes):
            try:
                change_keys, args, entry = self._transition_call(change)
            except ValueError as exc:
                refused[i] = exc
                entries.append(None)
                continue
            at.append(i)
            calls.append((change_keys, args))
            entries.append(entry)
        replies: list[Any] = [None] * len(changes)
        # One call per shard on a cluster (a run's keys are all in its shard's slot), one on a server.
        for i, reply in zip(at, await batched(self.redis, self.scripts.transitions, calls), strict=True):
            replies[i] = reply
        out: list[Outcome | Exception] = [
            refused[i]
            if i in refused
            else ResponseError(cast(str, failed(reply)))
            if failed(reply) is not None
            else _transition_outcome(change, reply)
            for i, (change, reply) in enumerate(zip(changes, replies, strict=True))
        ]
        emitted = [
            i
            for i, outcome in enumerate(out)
            if entries[i] is not None and isinstance(outcome, Applied) and not _fed(replies[i])
        ]
        if emitted:
            counts = await self._relay_after(
                [(changes[i], cast(_Entry, entries[i]), int(replies[i][1])) for i in emitted]
            )
            for i, (count, due_in) in zip(emitted, counts, strict=True):
                out[i] = replace(cast(Applied, out[i]), deliveries=count, due_in=due_in)
        return out

    async def relay(
        self,
        run_id: str,
        client: str,
        sub_filter: Sequence[str],
        items: Sequence[Any] | None = None,
    ) -> int:
        """Fans out every event in the run's outbox, oldest first, and empties it; returns the deliveries
        created. In steps, each in one slot, each safe to repeat: the outbox read (``items``: read
        already), the fan-out (:mod:`service.store.fanout`: the deliveries in each subscription's shard,
        then the client's feed), then the run's side (``relay_done.lua``: its progress list, its index of
        deliveries, the entries trimmed only while still at the outbox's head)."""
        if items is None:
            items = await self.redis.lrange(keys.run_outbox(run_id), 0, -1)  # type: ignore[misc]
        read = _outbox_entries(items)
        if not read:  # nothing to fan out: the outbox leaves the index (unless it was written meanwhile)
            await self.scripts.relay_done(*self._done_call(run_id, [], fanout.Fanned(0, [])))
            return 0
        fanned = await self._fan_out(run_id, client, sub_filter, read)
        await self.scripts.relay_done(*self._done_call(run_id, read, fanned))
        return fanned.created

    async def _fan_out(
        self, run_id: str, client: str, sub_filter: Sequence[str], read: list[_Entry]
    ) -> fanout.Fanned:
        """The fan-out of the entries ``read``, until the client's feed step finds the subscriptions
        fanned out to the ones it needs."""
        created = 0  # over every pass: a pass after 'stale' creates only what the ones before did not
        for _ in range(fanout.STALE_TRIES):
            [found] = await self._directories([(client, run_id)])
            plan = self._plan(run_id, client, sub_filter, read, found)
            await self._store_bodies([plan])
            made = await each_call(self.redis, self.scripts.fanout_deliveries, plan.deliveries)
            fanned = fanout.merged(plan.events, made)
            created += fanned.created
            reply = await self.scripts.relay_feed(*plan.feed(fanned))
            if text(reply[0]) == "ok":
                return replace(fanned, created=created)
        raise fanout.StaleFanout(f"the subscriptions of {client} kept changing")

    def _plan(
        self,
        run_id: str,
        client: str,
        sub_filter: Sequence[str],
        read: list[_Entry],
        directory: _Directory,
    ) -> _Plan:
        """A relay's fan-out of the entries ``read``: to the client's subscriptions (those of
        ``sub_filter``, when the run names any) that may want one of the events (``fanout.to_fan_out``);
        an entry at or below the relay's mark was fanned out before (its deliveries are only reported)."""
        wanted = set(sub_filter)
        targets = [s for s in directory.subs if not wanted or s in wanted]
        entries = [
            (
                entry.ops.get("v"),
                [e._replace(before=True) for e in entry.events]
                if _at_or_below(entry.ops.get("v"), directory.mark)
                else list(entry.events),
            )
            for entry in read
        ]
        events = [e for _, evs in entries for e in evs]
        called = fanout.to_fan_out(targets, events, directory.types)
        return _Plan(
            events=events,
            store=fanout.bodies_to_store(events, called),
            deliveries=fanout.deliveries_calls(client, run_id, events, called),
            feed=lambda fanned: fanout.feed_call(
                "relay",
                client,
                run_id,
                entries,
                fanned,
                subs=targets,
                sub_filter=sub_filter,
                # Never past the retention: by then the feed has let the events go, and the run its outbox.
                mark_ms=max(1, min(RELAY_MARK_MS, self.retention_ms)),
                retention_ms=self.retention_ms,
            ),
        )

    async def _store_bodies(self, plans: Sequence[_Plan]) -> None:
        """The bodies the plans' fan-outs may deliver that the transition left in the outbox alone
        (``fanout.stored_by_relay``), each under its event's key, in its run's slot, before any delivery of
        it exists (one round trip, when there are any: a run.progress that a subscription asked for). The
        same bytes every time, so a relay done again stores nothing new."""
        stored = [event for plan in plans for event in plan.store]
        if not stored:
            return
        pipe = self.redis.pipeline(transaction=False)
        for event in stored:
            pipe.set(keys.event(event.id), event.body, px=self.retention_ms)
        await pipe.execute()

    async def _directories(self, pairs: Sequence[tuple[str, str]]) -> list[_Directory]:
        """Per (client, run): the client's subscription ids, the event types its directory keeps for them,
        and the run's relay mark (one round trip; each client's directory read once, and its runs' marks,
        which are in the client's slot, in one MGET, however many of its runs the batch relays)."""
        runs_of: dict[str, list[str]] = {}
        for client, run_id in pairs:
            runs_of.setdefault(client, []).append(run_id)
        pipe = self.redis.pipeline(transaction=False)
        for client, run_ids in runs_of.items():
            pipe.zrange(keys.client_subs(client), 0, -1)
            pipe.hgetall(keys.client_sub_types(client))
            # One slot (the client's): a cluster's pipeline refuses its mget method, not the command.
            pipe.execute_command("MGET", *(keys.relayed(client, run_id) for run_id in run_ids))
        read = iter(await pipe.execute())
        found: dict[str, tuple[list[str], dict[str, tuple[str, ...]]]] = {}
        marks: dict[tuple[str, str], int] = {}
        for client, run_ids in runs_of.items():
            subs, types, got = next(read), next(read), next(read)
            found[client] = ([text(s) for s in subs], fanout.kept_types(types))
            for run_id, mark in zip(run_ids, got, strict=True):
                marks[client, run_id] = int(mark or 0)
        return [_Directory(*found[client], marks[client, run_id]) for client, run_id in pairs]

    def _done_call(
        self, run_id: str, read: list[_Entry], fanned: fanout.Fanned
    ) -> tuple[list[str], list[Any]]:
        """relay_done.lua's KEYS and ARGV from what the fan-out did for the entries ``read``."""
        ks = [
            keys.run_outbox(run_id),
            keys.outbox(keys.shard_of(run_id)),
            keys.run_events(run_id),
            keys.run_deliveries(run_id),
        ]
        found = iter(fanned.deliveries)
        done: list[dict[str, Any]] = []
        for entry in read:
            out: dict[str, Any] = {
                "items": entry.items,
                "progress": [],
                "dlv": [],
                "dropped": [],
                "pending": [],
            }
            for event in entry.events:
                dlv = next(found)
                if fanout.dropped(event, dlv):
                    ks.append(keys.event(event.id))
                    out["dropped"].append(len(ks))
                elif event.type == EVENT_PROGRESS:
                    out["progress"].append(event.id)
                out["dlv"] += [[d, str(entry.ops["now"])] for d in dlv]
                if event.zr and dlv:
                    ks += [keys.event_pending(event.id), keys.event(event.id)]
                    out["pending"].append([len(ks) - 1, len(dlv)])
            if "ttl_ms" in entry.ops:
                out["ttl_ms"] = str(entry.ops["ttl_ms"])
            done.append(out)
        query = {"run_id": run_id, "retention_ms": str(self.retention_ms), "entries": done}
        return ks, [jsoncodec.dumps(query), *(entry.head for entry in read)]

    async def _relay_after(
        self, changes: Sequence[tuple[Transition, _Entry, int]]
    ) -> list[tuple[int, frozenset[int]]]:
        """The relays right after each change put its outbox entry (given) in its run's outbox, whose
        length the transition returned: that entry alone when the outbox was empty, else the outbox is
        read. Every step of the relays in one round trip for them all (so one WAIT per step, with
        ``REDIS_WAIT_REPLICAS``), then again, alone, any fan-out whose subscriptions changed meanwhile. A
        relay that fails leaves its events in the outbox and the change stands: the sweeper relays them
        (:meth:`relay_stranded`). Returns each change's deliveries created (0 when left to the sweeper)
        and the shards its events' deliveries are in."""
        runs = [change.run for change, _, _ in changes]
        try:
            read = await self._outboxes(changes)
            found = await self._directories([(run.client, run.id) for run in runs])
            plans = [
                self._plan(run.id, run.client, run.subscription_ids, entries, directory)
                for run, entries, directory in zip(runs, read, found, strict=True)
            ]
            await self._store_bodies(plans)
            calls = [call for plan in plans for call in plan.deliveries]
            replies = iter(await each_call(self.redis, self.scripts.fanout_deliveries, calls))
            fanned_all = [
                fanout.merged(plan.events, [next(replies) for _ in plan.deliveries]) for plan in plans
            ]
            fed = await batched(
                self.redis,
                self.scripts.relay_feeds,  # a call per client on a cluster (its feed, directory, marks)
                [plan.feed(f) for plan, f in zip(plans, fanned_all, strict=True)],
            )
            _raise_failed(fed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the changes stand: the sweeper relays their events
            log.warning("relay left to the sweeper", runs=len(changes), error=type(exc).__name__)
            return [(0, frozenset())] * len(changes)
        fanned: list[fanout.Fanned | None] = []
        for run, entries, done_once, reply in zip(runs, read, fanned_all, fed, strict=True):
            if text(reply[0]) == "ok":
                fanned.append(done_once)
                continue
            try:  # a subscription created meanwhile: this one again, alone (counting the first pass's)
                again = await self._fan_out(run.id, run.client, run.subscription_ids, entries)
                fanned.append(replace(again, created=again.created + done_once.created))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # this change stands: the sweeper relays its events
                log.warning("relay left to the sweeper", run_id=run.id, error=type(exc).__name__)
                fanned.append(None)
        done = [(i, f) for i, f in enumerate(fanned) if f is not None]
        try:
            _raise_failed(
                await batched(
                    self.redis,
                    self.scripts.relays_done,  # a call per shard of the runs on a cluster
                    [self._done_call(runs[i].id, read[i], f) for i, f in done],
                )
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # fanned out; the sweeper empties their outboxes (nothing twice)
            log.warning("relay left to the sweeper", runs=len(done), error=type(exc).__name__)
        return [(f.created, f.shards()) if f is not None else (0, frozenset()) for f in fanned]

    async def _outboxes(self, changes: Sequence[tuple[Transition, _Entry, int]]) -> list[list[_Entry]]:
        """Each change's run's outbox as it stood after the transition: the change's own entry when that
        is all it holds (most changes: nothing read), else read (one round trip for those)."""
        out: list[list[_Entry]] = [[entry] for _, entry, _ in changes]
        behind = [i for i, (_, entry, length) in enumerate(changes) if length != entry.items]
        if behind:
            pipe = self.redis.pipeline(transaction=False)
            for i in behind:
                pipe.lrange(keys.run_outbox(changes[i][0].run.id), 0, -1)
            for i, items in zip(behind, await pipe.execute(), strict=True):
                out[i] = _outbox_entries(items)
        return out

    async def relay_stranded(
        self, now_ms: int, *, older_than_ms: int = RELAY_GRACE_MS, limit: int = 500
    ) -> int:
        """The sweeper's part of the relay: the runs whose outbox has held events for ``older_than_ms``
        (a worker or an API process died between a transition and its relay, or the relay failed), at
        most ``limit`` of them, the oldest first over every shard's index (read in one round trip),
        relayed; returns how many runs were. A run gone from the store (past retention) has nothing left
        to tell: its outbox is dropped. A relay that fails for its own run's sake (its client's
        subscriptions kept changing, an entry the script refuses, anything unexpected) is logged and tried
        again next pass; it does not hold up the others' relays behind it. A lost connection ends the
        pass."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(keys.SHARDS):
            pipe.zrangebyscore(
                keys.outbox(shard), "-inf", now_ms - older_than_ms, start=0, num=limit, withscores=True
            )
        # The oldest first over every shard, as one index would give them.
        stranded = sorted((score, text(i)) for found in await pipe.execute() for i, score in found)
        ids = [run_id for _, run_id in stranded[:limit]]
        done = 0
        for run_id, run in zip(ids, await self.get_runs(ids), strict=True):
            if run is None:
                pipe = self.redis.pipeline(transaction=False)
                pipe.delete(keys.run_outbox(run_id))
                pipe.zrem(keys.outbox(keys.shard_of(run_id)), run_id)
                await pipe.execute()
                continue
            try:
                await self.relay(run.id, run.client, run.subscription_ids)
            except (RedisConnectionError, RedisTimeoutError):
                raise  # Redis itself: the pass ends, the next one starts over
            except Exception as exc:  # this run's own: logged, tried next pass, the others go on
                log.warning("relay failed; the next sweep tries again", run_id=run.id, error=str(exc)[:200])
                continue
            done += 1
        return done

    async def stranded_count(self, now_ms: int, *, older_than_ms: int = RELAY_GRACE_MS) -> int:
        """How many runs' outboxes the sweeper would relay now (the gauge hookbridge_outbox_stranded)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(keys.SHARDS):
            pipe.zcount(keys.outbox(shard), "-inf", now_ms - older_than_ms)
        return sum(int(n) for n in await pipe.execute())

    def _transition_call(self, change: Transition) -> tuple[list[str], list[Any], _Entry | None]:
        """transition.lua's KEYS and ARGV for ``change``, and the outbox entry it appends, as a relay reads
        it (None: the change emits no event).

        A change that only rewrites the run and moves its next step (most polls) declares those two keys
        alone: the script touches the others only for what the change does (events, a result, the
        document, the run's end), and a key it does not touch need not be declared."""
        run = change.run
        shard = keys.shard_of(run.id)
        if any(keys.shard_of(e.id) != shard for e in change.events):
            raise ValueError("an event's id is minted beside its run's (domain.new_id_beside)")
        ks = [keys.run(run.id), keys.due_runs(run.vendor, shard)]
        # ARGV: the ops (below), the run and the result as their own arguments (not escaped inside the ops
        # JSON), then the outbox entry: the relay's ops and the events' bodies (binary), which the relay's
        # ops name by their position in the entry.
        args: list[Any] = ["", run.to_json()]
        entry: _Entry | None = None
        ops: dict[str, Any] = {"run_id": run.id, "expect_v": change.expect_v, "status": run.status}
        # Numbers the script hands on to Redis go as text (scripts.py: a number is formatted again there).
        if change.due_ms is not None:
            ops["due_score"] = str(int(change.due_ms))
        elif change.remove_due:
            ops["due_remove"] = True
        if (
            change.events
            or change.result is not None
            or change.delete_document
            or change.remove_due
            or (change.ttl_ms is not None)
        ):
            ks += [
                keys.active_runs(shard),
                keys.result(run.id),
                keys.document(run.id),
                keys.run_events(run.id),
                keys.run_outbox(run.id),
                keys.outbox(shard),
            ]
            if change.result is not None:
                args.append(change.result)
            ops |= {
                "now": str(run.updated_at),
                "retention_ms": str(self.retention_ms),
                "result": change.result is not None,
                "del_doc": change.delete_document,
            }
            if change.events:
                items, relay_ops = self._outbox_entry(change)
                ops["relay"], ops["relay_n"] = len(args) + 1, len(items)
                # A run.progress's body is the relay's to store (fanout.stored_by_relay): the outbox has it.
                kept = [
                    (e, stored)
                    for e, stored in zip(change.events, relay_ops["events"], strict=True)
                    if not fanout.stored_by_relay(e.type)
                ]
                ops["bodies"] = [len(args) + stored["body"] for _, stored in kept]
                ks += [keys.event(e.id) for e, _ in kept]
                args += items
                entry = _entry(items, relay_ops)  # as the relay would read it back, without the decode
                if self._feed_in_transition and not run.zero_retention:
                    ops["feed"] = _feed_part(run, entry, ops["relay"], ks, args)
            if change.ttl_ms is not None:
                ops["ttl_ms"] = str(change.ttl_ms)
        args[0] = jsoncodec.dumps(ops)
        return ks, args, entry

    def _outbox_entry(self, change: Transition) -> tuple[list[Any], dict[str, Any]]:
        """The outbox entry of ``change``'s events (relay.lua reads it): the relay's ops, then the events'
        packed bodies, which the ops name by their position in the entry (1-based: the ops are 1)."""
        run = change.run
        entry: list[Any] = [""]
        relay_ops: dict[str, Any] = {
            "v": run.version,  # the relay's mark (keys.relayed) says which entries were fanned out
            "now": run.updated_at,
            "retention_ms": self.retention_ms,
            "zr": "1" if run.zero_retention else "0",
            "sub_filter": run.subscription_ids,
            "events": [stored_event(e, entry, run.id) for e in change.events],
        }
        relay_ops["n"] = len(entry) - 1
        if change.ttl_ms is not None:
            relay_ops["ttl_ms"] = change.ttl_ms
        entry[0] = jsoncodec.dumps(relay_ops)
        return entry, relay_ops

    async def schedule_run(self, vendor: str, run_id: str, due_ms: float) -> None:
        """Moves a run's next step (no state change: a retry after a transient fault)."""
        await self.redis.zadd(keys.due_runs(vendor, keys.shard_of(run_id)), {run_id: int(due_ms)}, xx=True)

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
        """Claims due runs, over the vendor's 16 due sets (one per shard); none while the vendor is paused
        after a 429, then one as its probe.

        In steps, each on the keys of one slot: the due ids of the shards this worker believes due
        (:mod:`service.store.due`; every shard once per ``WORKER_IDLE_S``) are read, at most ``limit`` in
        all, in one round trip (with none due, each shard's head, and that is all); the vendor's pause and
        budget give their slots for them (``budget_batch.lua``: none while paused, one for the probe after,
        at most those within ``lookahead_ms``); ``claim_runs.lua`` leases those still due, in each
        shard (one call in all on a server), one slot each, and the slots left over at the end are given
        back; a probe is set last (``pause.lua``), or its run handed back when another claim's probe got
        there first."""
        known = self._due.get(vendor)
        if known is None:
            known = self._due[vendor] = DueShards(refresh_ms=self.settings.worker_idle_s * 1000)
        found = await self._due_ids(vendor, known, now_ms, limit)
        picked = interleaved(found, limit)
        if not picked:
            return [], known.earliest()
        budget = keys.vendor_budget(vendor)
        state, first, count, untl = await self.scripts.budget_batch(
            keys=[budget, keys.vendor_pause(vendor)],
            args=["take", now_ms, max(interval_ms, 0), len(picked), lookahead_ms],
        )
        start, count, probing = float(first), int(count), text(state) == "probe"
        if text(state) == "held":  # not before the pause ends; unknown while its probe is out
            for shard, ids in found.items():  # nothing claimed: the ids stay the next claim's
                known.unclaimed(shard, ids)
            return [], None if untl is None else float(untl)
        if count == 0:  # the budget's next slot is past the lookahead: runs are due, ask again
            for shard, ids in found.items():
                known.unclaimed(shard, ids)
            return [], float(now_ms)
        picked = picked[: 1 if probing else count]
        taken = {run_id for _, run_id in picked}
        for shard, ids in found.items():  # read but not taken: the next claim's, not read again
            if left := [i for i in ids if i not in taken]:
                known.unclaimed(shard, left)
        claimed, used = await self._claim_in_shards(
            vendor, known, picked, now_ms, lease_ms, start, interval_ms if interval_ms > 0 else 0, limit
        )
        unused = count - used
        if interval_ms > 0 and unused > 0:
            await self.scripts.budget_batch(
                keys=[budget], args=["give_back", interval_ms, start + count * interval_ms, unused]
            )
        if probing and claimed:
            one = claimed[0]
            token = f"{one.run.id}@{now_ms}"
            took = int(
                await self.scripts.pause(
                    keys=[keys.vendor_pause(vendor)],
                    args=["probe", now_ms, token, one.slot_ms + probe_lease_ms],
                )
            )
            if took == 0:  # another claim's probe, or a new 429: the run goes back, due as it was
                due = keys.due_runs(vendor, keys.shard_of(one.run.id))
                await self.scripts.release(
                    keys=[due, due, due], args=[one.due_ms, one.run.id, one.slot_ms + lease_ms]
                )
                return [], None
            if took == 1:
                claimed = [replace(one, probe=token)]
        return claimed, known.earliest()

    def _looks_along(self, known: DueShards, now_ms: int) -> list[tuple[str, DueShards]]:
        """The vendors (other than ``known``'s) whose every-shard look joins one made now."""
        return [(v, due) for v, due in self._due.items() if due is not known and due.join_look(now_ms)]

    def forget_due(self) -> None:
        """Drops what this worker knows of the due sets: the next claim reads every shard (burst mode,
        which works everything due now, not what this worker believed due)."""
        self._due.clear()

    async def _due_ids(self, vendor: str, known: DueShards, now_ms: int, limit: int) -> dict[int, list[str]]:
        """The due ids of the shards ``known`` says to read (``read_per_shard`` in each): those its last
        claim there left due, else read (and read again when those lists are short of ``limit`` and cut at
        their share: ``DueShards.take_ahead``). A shard believed due is read at once (its ids and its head,
        one round trip for them all); one that is only looked at again (the refresh of every shard) has its
        head read first, and its ids only when that is due: an idle worker reads one head a shard."""
        due: list[int] = []
        looked: list[int] = []
        shards = known.to_read(now_ms)
        found, again = known.take_ahead(shards, limit)
        for shard in shards:
            if shard in found:
                continue
            if shard in again or ((nxt := known.next_due[shard]) is not None and nxt <= now_ms):
                due.append(shard)
            else:
                looked.append(shard)
        if looked:
            names = [keys.due_runs(vendor, shard) for shard in looked]
            # A look at every shard takes along the other vendors' looks that are half due: one call.
            along = [] if len(shards) < keys.SHARDS else self._looks_along(known, now_ms)
            for other, _ in along:
                names += [keys.due_runs(other, shard) for shard in range(keys.SHARDS)]
            heads = await self.heads(names)
            for shard, head in zip(looked, heads[: len(looked)], strict=True):
                known.next_due[shard] = head
                if head is not None and head <= now_ms:
                    due.append(shard)
            for n, (_, shards_known) in enumerate(along):
                at = len(looked) + n * keys.SHARDS
                shards_known.read(heads[at : at + keys.SHARDS])
        if due:
            # The ids alone (with their scores redis-py would make a pair and a float of each, which cost
            # a poll more than the round trip does), and the head, for when none is due any more.
            pipe = self.redis.pipeline(transaction=False)
            per = read_per_shard(limit, len(due))
            for shard in due:
                pipe.zrangebyscore(keys.due_runs(vendor, shard), "-inf", now_ms, start=0, num=per)
                pipe.zrange(keys.due_runs(vendor, shard), 0, 0, withscores=True)
            read = await pipe.execute()
            for n, shard in enumerate(due):
                ids, head = read[2 * n], read[2 * n + 1]
                if ids:
                    found[shard] = [text(i) for i in ids]
                known.next_due[shard] = float(head[0][1]) if head else None
        return found

    async def _claim_in_shards(
        self,
        vendor: str,
        known: DueShards,
        picked: list[tuple[int, str]],
        now_ms: int,
        lease_ms: int,
        start: float,
        step: float,
        limit: int,
    ) -> tuple[list[ClaimedRun], int]:
        """``claim_runs.lua`` for each shard of the runs ``picked`` (``claims``: one call in all on a Redis
        server, one per shard on a cluster), one budget slot each from ``start``,
        ``step`` apart, in the order picked; returns the runs claimed and how many slots lie up to the
        last one used (those after it are the caller's to give back)."""
        by_shard: dict[int, list[str]] = {}
        for shard, run_id in picked:
            by_shard.setdefault(shard, []).append(run_id)
        # Each shard's claim returns the ids it sees due for the next claim: the batch's share of them.
        ahead = -(-limit // len(by_shard))
        calls, firsts, at = [], [], 0
        for shard, ids in by_shard.items():
            firsts.append(at)
            args = [now_ms, lease_ms, start + at * step, step, len(ids), ahead, *ids]
            calls.append(([keys.due_runs(vendor, shard), *map(keys.run, ids)], args))
            at += len(ids)
        claimed: list[ClaimedRun] = []
        used = 0
        # One call per shard on a cluster (a due set and its runs are in the shard's slot), one on a server.
        replies = await batched(self.redis, self.scripts.claims, calls)
        _raise_failed(replies)
        for shard, first_at, reply in zip(by_shard, firsts, replies, strict=True):
            got, nxt = claimed_runs([reply[0], reply[1], False])
            claimed += got
            known.next_due[shard] = nxt
            known.left(shard, [text(i) for i in reply[2]], ahead)
            if len(reply[0]):
                used = max(used, first_at + len(reply[0]) // 4)
        return claimed, used

    async def release_runs(self, vendor: str, leases: Sequence[tuple[str, float]], now_ms: int) -> int:
        """Makes leased runs due now, each only while its lease (id, lease end ms) is still the one taken:
        one call per shard they are in."""
        by_shard: dict[int, list[Any]] = {}
        for run_id, lease_end in leases:
            by_shard.setdefault(keys.shard_of(run_id), []).extend([run_id, lease_end])
        calls = []
        for shard, pairs in by_shard.items():
            due = keys.due_runs(vendor, shard)
            calls.append(([due] * (1 + len(pairs)), [now_ms, *pairs]))
        return sum(int(n) for n in await each_call(self.redis, self.scripts.release, calls))

    async def in_flight_count(self, vendors: Sequence[str]) -> int:
        pipe = self.redis.pipeline(transaction=False)
        for vendor in vendors:
            for shard in range(keys.SHARDS):
                pipe.zcard(keys.due_runs(vendor, shard))
        return sum(await pipe.execute())


def _raise_failed(replies: Sequence[Any]) -> None:
    """A batch of the relay's steps, or of a claim's leases, fails as a pipeline of them did: by the first
    call that raised."""
    for reply in replies:
        if (message := failed(reply)) is not None:
            raise ResponseError(message)


def _feed_part(run: Run, entry: _Entry, relay_at: int, ks: list[str], args: list[Any]) -> dict[str, Any]:
    """transition.lua's feed part for the events of ``entry`` (its items at ``relay_at`` in ARGV), as
    relay_feed.lua would append them with no delivery made: the client's keys added to ``ks``, the ids'
    stored forms to ``args`` (:func:`fanout.feed_call`'s rows, with each event's type as well, which the
    script matches against the directory). The feed keeps a body that no other key keeps: a run.progress's
    (``fanout.stored_by_relay``), whose packed body is already an item of the entry."""
    k = len(ks) + 1
    ks += [keys.client_subs(run.client), keys.client_sub_types(run.client), keys.client_feed(run.client)]
    args.append(feedform.stored_run_id(run.id))
    run_at = len(args)
    rows = []
    for event, stored in zip(entry.events, entry.ops["events"], strict=True):
        args.append(feedform.stored_event_id(event.id))
        row: dict[str, Any] = {
            "id": len(args),
            "etype": event.type,
            "type": feedform.type_code(event.type),
            "n": len(event.body),
        }
        if event.vendor:
            row["vendor"] = feedform.vendor_code(event.vendor)
        if fanout.stored_by_relay(event.type):
            row["body"] = relay_at + stored["body"] - 1
        rows.append(row)
    return {"k": k, "sub_filter": list(run.subscription_ids), "run": run_at, "events": rows}


def _fed(reply: Any) -> bool:
    """Whether transition.lua put the change's events in the client's feed itself (nothing to relay)."""
    return isinstance(reply, list) and len(reply) > 3 and int(reply[3]) == 1


def _transition_outcome(change: Transition, reply: Any) -> Outcome:
    # transition.lua's reply: {'ok', entries in the outbox, previous_status, fed} | {'conflict', run} |
    # {'missing'}; the deliveries are the relay's to count.
    outcome = text(reply[0])
    if outcome == "conflict":
        return Conflict(Run.from_json(reply[1], change.run.id))
    if outcome == "ok":
        ended = change.run.status in TERMINAL and text(reply[2]) not in TERMINAL
        return Applied(0, ended)
    return Missing()
