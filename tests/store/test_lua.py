"""The atomic core tested directly: every Lua script in service/store/lua/ against a real redis-server,
through the Store API, with explicit ``now_ms`` values (no sleeps, no worker), one test per outcome.

Records are built the way production builds them (``lifecycle.new_run``, the subscription fields the
API writes) and read back through ``keys``, so a key name spelled differently in Lua fails here.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import RedisCluster
from structlog.testing import capture_logs

from service.core import compact, domain
from service.core.lifecycle import Transition, new_run
from service.core.records import DELIVERY_HASH_INTERNAL, Attempt, Delivery, Event, Run, Subscription, replace
from service.store import Applied, Busy, Conflict, Missing, OverRate, Store, bodies, connect, keys
from service.store.layout import spell_out_runs
from service.store.scripts import _LUA, source, status_prelude
from service.vendors.registry import load_settings
from tests.conftest import base_env, command_calls

T0 = 1_800_000_000_000
RETENTION_MS = 3_600_000
LEASE = 10_000


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    settings = load_settings(
        base_env(
            redis_url,
            HOOKBRIDGE_RETENTION_S=str(RETENTION_MS // 1000),
            HOOKBRIDGE_SUBSCRIPTION_MAX_IN_FLIGHT="2",
            HOOKBRIDGE_CLIENT_MAX_IN_FLIGHT="3",
            HOOKBRIDGE_SUBSCRIPTION_DISABLE_AFTER_S="60",
        )
    )
    s = Store(connect(settings), settings)
    try:
        yield s
    finally:
        await s.close()


def _s(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _new(run_id: str = "run_a", client: str = "alice", **extra: Any) -> Run:
    return new_run(
        run_id=run_id,
        client=client,
        vendor="nutrient",
        operation="extract",
        document={"url": "https://example.com/a.pdf"},
        options={},
        metadata={},
        subscription_ids=extra.pop("subscription_ids", []),
        zero_retention=extra.pop("zero_retention", False),
        now_ms=T0,
    )


async def _run(store: Store, run_id: str = "run_a", client: str = "alice", **extra: Any) -> Run:
    """A run created as the API creates it. With ``idem``, ``run_id`` must come from
    ``store.runs.new_run_id`` (create_run refuses any other)."""
    document, idem = extra.pop("document", None), extra.pop("idem", None)
    run = _new(run_id, client, **extra)
    assert await store.runs.create_run(run, document, idem) is None
    return run


async def _sub(store: Store, sub_id: str, client: str = "alice", **fields: str) -> None:
    # The hash fields as the Lua scripts spell them, read through the records' own codec.
    stored = {"id": sub_id, "client": client, "url": "https://example.com/hook", "created": str(T0), **fields}
    assert await store.subscriptions.create_subscription(Subscription.from_hash(stored), max_count=100)


def _in(name: str, shard: int) -> str:
    """``name`` when it falls in ``shard``, else the first ``name_<k>`` that does: readable, deterministic."""
    return keys.in_shard(lambda k: f"{name}_{k}" if k else name, shard)


def _beside(name: str, run_id: str) -> str:
    """``name`` placed in ``run_id``'s shard (:func:`_in`): an event id minted beside its run, as production
    mints them (``domain.new_id_beside``), which a transition requires (the body is written with the run)."""
    return _in(name, keys.shard_of(run_id))


def _event(etype: str, n: int = 0, event_id: str | None = None, *, beside: str | None = None) -> Event:
    """An event ``evt_<type>_<n>`` (or ``event_id``); with ``beside`` (a run's id) its id moved into that
    run's shard (:func:`_beside`), without it the id as named."""
    body = json.dumps({"type": etype, "n": n})
    name = event_id or f"evt_{etype}_{n}"
    return Event(id=_beside(name, beside) if beside else name, type=etype, created=T0, body=body)


def _eid(etype: str, n: int = 0, run_id: str = "run_a") -> str:
    """The id of ``_event(etype, n, beside=run_id)``."""
    return _beside(f"evt_{etype}_{n}", run_id)


def _next(run: Run, status: str, now: int = T0 + 1) -> Run:
    return replace(run, version=run.version + 1, status=status, updated_at=now)


def _attempt(code: int | None = None) -> Attempt:
    return Attempt(
        at="2027-01-15T08:00:00.000Z", status_code=code, duration_ms=1.0, error=None, response_body=""
    )


async def _emit(store: Store, run: Run, *events: Event, status: str = "processing", now: int = T0 + 1) -> int:
    """Applies a transition of ``run`` to ``status`` that emits ``events``, at ``now`` (the run's updated
    time, which is also its deliveries' creation and first due time)."""
    # The stored version: runs are values, the store has the latest.
    current = await store.runs.get_run(run.id)
    assert current is not None
    # As lifecycle does: the record names the run's events but progress (Run.event_ids).
    recorded = [e.id for e in events if e.type != "run.progress"]
    new = replace(_next(current, status, now), event_ids=[*current.event_ids, *recorded])
    outcome = await store.runs.transition(Transition(new, current.version, events=list(events)))
    assert isinstance(outcome, Applied)
    return outcome.deliveries


async def _stored(store: Store, run_id: str) -> Run:
    run = await store.runs.get_run(run_id)
    assert run is not None
    return run


async def _deliveries_of(store: Store, sub_id: str) -> list[Delivery]:
    ids = [_s(i) for i in await store.redis.zrange(keys.sub_deliveries(sub_id), 0, -1)]
    return [d for d in await store.deliveries.get_deliveries(ids) if d is not None]


async def _scored(store: Store, shard_key: Callable[[int], str]) -> dict[str, float]:
    """A per-shard sorted set's members over the 16 shards, each found in its own shard's set."""
    out: dict[str, float] = {}
    for shard in range(keys.SHARDS):
        for m, score in await store.redis.zrange(shard_key(shard), 0, -1, withscores=True):
            assert keys.shard_of(_s(m)) == shard, (_s(m), shard)
            out[_s(m)] = score
    return out


async def _members(store: Store, shard_key: Callable[[int], str]) -> set[str]:
    """A per-shard set's members over the 16 shards, each found in its own shard's set."""
    out: set[str] = set()
    for shard in range(keys.SHARDS):
        for m in await store.redis.smembers(shard_key(shard)):
            assert keys.shard_of(_s(m)) == shard, (_s(m), shard)
            out.add(_s(m))
    return out


async def _due_deliveries(store: Store) -> dict[str, float]:
    """The due deliveries over the shards' due sets (a delivery's is its subscription's shard's)."""
    return await _scored(store, keys.due_deliveries)


async def _active_deliveries(store: Store) -> set[str]:
    return await _members(store, keys.active_deliveries)


async def _client_set(store: Store, kind: str, client: str, dlv_id: str) -> list[str]:
    """The client's in-flight (``kind`` "inflight") or parked ("parked") set in ``dlv_id``'s shard, where
    a claim of that delivery counts it, in score order (lease end; due time)."""
    key = (keys.client_inflight if kind == "inflight" else keys.client_parked)(client, keys.shard_of(dlv_id))
    return [_s(m) for m in await store.redis.zrange(key, 0, -1)]


async def _due_of(store: Store, vendor: str = "nutrient") -> dict[str, float]:
    """The vendor's due runs over its due sets (one per shard), each found in its own run's shard's."""
    return await _scored(store, lambda shard: keys.due_runs(vendor, shard))


async def _active_runs(store: Store) -> set[str]:
    return await _members(store, keys.active_runs)


def _due_key(run_id: str, vendor: str = "nutrient") -> str:
    """The due set ``run_id`` belongs in: its vendor's, in its shard."""
    return keys.due_runs(vendor, keys.shard_of(run_id))


# The status prelude ---------------------------------------------------------------------------------

_STATUS_WORDS = {
    *domain.RunStatus,
    *domain.DeliveryStatus,
    *domain.AttemptOutcome,
}


# The delivery hash's own field names (not "id", "status", ...: other hashes and JSON share those words).
_DELIVERY_FIELDS = {"event", "sub", "last_code", "next_at", "chained", "counted", "series", "attempts"}


def test_no_script_spells_a_status_an_outcome_or_a_delivery_field() -> None:
    quoted = re.compile(r"""(?<!\[)['"]([a-z_]+)['"]""")  # not ops['x']: a JSON argument's member
    for path in _LUA.iterdir():
        if path.name.endswith(".lua"):
            # Comments may name a word; the code compares and writes only the prelude's constants.
            code = "\n".join(line.split("--")[0] for line in path.read_text().splitlines())
            assert set(quoted.findall(code)) & (_STATUS_WORDS | _DELIVERY_FIELDS) == set(), path.name


async def test_the_status_prelude_gives_the_python_values_inside_redis(store: Store) -> None:
    script = store.redis.register_script(
        status_prelude()
        + "local t = {} for s in pairs(TERMINAL) do t[#t + 1] = s end table.sort(t)"
        + " return {RUN.QUEUED, DLV.PENDING, OUTCOME.GONE, FINAL_STATUS[OUTCOME.SKIPPED],"
        + " FINAL_STATUS[OUTCOME.RETRY] or 'none', table.concat(t, ',')}"
    )
    got = [_s(v) for v in await script()]
    assert got == ["queued", "pending", "gone", "failed", "none", "canceled,failed,succeeded"]
    fields = store.redis.register_script(
        status_prelude() + "return {DF.event_id, DF.next_attempt_at, DF.chained}"
    )
    assert [_s(v) for v in await fields()] == ["event", "next_at", "chained"]
    assert source("repair").index(status_prelude()) > 0


# create_run.lua -------------------------------------------------------------------------------------


async def test_create_run_writes_everything_and_an_idempotency_key_writes_nothing_twice(store: Store) -> None:
    run_id = store.runs.new_run_id("alice", "key-1")
    run = await _run(store, run_id, document=b"%PDF", idem=("key-1", "fp1"))
    r = store.redis
    shard = keys.shard_of(run_id)
    assert shard == keys.shard_of(keys.idempotency_anchor("alice", "key-1"))  # the record beside the run
    assert await store.runs.get_run(run_id) == run
    assert await r.get(keys.document(run_id)) == b"%PDF"
    assert await r.zscore(keys.client_runs("alice"), run_id) == T0
    assert await _due_of(store) == {run_id: T0}
    assert await _active_runs(store) == {run_id}
    assert await r.pttl(keys.idempotency("alice", "key-1")) > 0

    again = replace(run, id=store.runs.new_run_id("alice", "key-1"))
    assert again.id != run_id
    assert await store.runs.create_run(again, b"other", ("key-1", "fp2")) == f"fp1 {run_id}"
    assert await store.runs.get_run(again.id) is None and await r.get(keys.document(again.id)) is None
    assert await _due_of(store) == {run_id: T0} and await _active_runs(store) == {run_id}
    assert (
        await store.runs.create_run(again, None, ("key-1", "fp2")) == f"fp1 {run_id}"
    )  # the same answer each time
    # The replay's first step (accept_run.lua, the client's slot) listed it before the second found the
    # record: an entry that names no run, which the listing skips.
    listed = await store.runs.list_runs("alice", limit=10, cursor=None, status=None, vendor=None)
    assert [listed_run.id for listed_run in listed.data] == [run_id]


async def test_create_run_takes_the_submit_rate_in_its_first_step_and_a_refusal_writes_nothing(
    store: Store,
) -> None:
    # 1 per 100 s, no burst: Redis's own clock cannot move 100 s within this test.
    rate = (0.01, 1)
    first = await _run(store, "run_a")
    run_b = replace(first, id=store.runs.new_run_id("alice", "key-b"))
    assert await store.runs.create_run(run_b, None, ("key-b", "fp"), rate=rate) is None
    before = sorted(await store.redis.keys("*"))
    run_c = replace(first, id=store.runs.new_run_id("alice", "key-c"))
    with pytest.raises(OverRate) as refused:
        await store.runs.create_run(run_c, b"%PDF", ("key-c", "fp"), rate=rate)
    assert 99 < refused.value.wait_s <= 100
    assert sorted(await store.redis.keys("*")) == before  # no run, document, listing or idempotency key
    # A replay: the API answers it from its record before it creates anything (idempotency_record), so
    # create_run meets one only when two submits of one key race. Its rate is taken in the first step
    # (accept_run.lua, the client's slot), before the second (create_run.lua, the run's shard) finds the
    # record: no longer "answered from its record and takes nothing", as when one script did both. Over
    # the rate, the late submit is refused like any other (and writes nothing)...
    assert await store.runs.idempotency_record("alice", "key-b") == f"fp {run_b.id}"
    late = replace(first, id=store.runs.new_run_id("alice", "key-b"))
    with pytest.raises(OverRate):
        await store.runs.create_run(late, None, ("key-b", "fp"), rate=rate)
    assert sorted(await store.redis.keys("*")) == before
    # ... and within it, it is answered from the record, having taken a request of the rate.
    roomy = (0.01, 2)
    carol = replace(first, client="carol", id=store.runs.new_run_id("carol", "key-x"))
    assert await store.runs.create_run(carol, None, ("key-x", "fp"), rate=roomy) is None
    carol_late = replace(carol, id=store.runs.new_run_id("carol", "key-x"))
    assert await store.runs.create_run(carol_late, None, ("key-x", "fp"), rate=roomy) == f"fp {carol.id}"
    assert await store.runs.get_run(carol_late.id) is None
    with pytest.raises(OverRate):  # the burst of 2 is spent: the replay took the second request
        await store.runs.create_run(replace(carol, id="run_carol_3"), None, None, rate=roomy)
    # Without a rate nothing is taken or written for it.
    await store.runs.create_run(replace(first, id="run_e", client="bob"), None, None)
    assert not await store.redis.exists(keys.client_rate("submit", "bob"))


async def test_a_submit_is_one_script_on_one_redis_and_two_on_a_cluster(store: Store) -> None:
    """On one Redis server a submit's two steps are one script (submit_run.lua: one round trip, the
    client's rate and listing then the run); a cluster's slots split them, the run's step after the
    client's answer. Either way the rate and the run come out as the tests above read them."""
    two_slots = isinstance(store.redis, RedisCluster)
    rate = (100.0, 10)
    await store.runs.create_run(_new("run_warm"), None, None, rate=rate)  # the scripts loaded (NOSCRIPT)
    before = await command_calls(store.redis, "evalsha")
    assert await store.runs.create_run(_new("run_one"), b"%PDF", None, rate=rate) is None
    assert await command_calls(store.redis, "evalsha") - before == (2 if two_slots else 1)
    assert (await store.runs.get_run("run_one")) is not None
    assert await store.redis.get(keys.document("run_one")) == b"%PDF"
    assert await store.redis.zscore(keys.client_runs("alice"), "run_one") == T0
    assert await store.redis.exists(keys.client_rate("submit", "alice"))


async def test_create_run_refuses_an_idempotent_run_not_minted_beside_its_record(store: Store) -> None:
    """A run with an Idempotency-Key is written in one step with its record, so in the record's shard:
    an id not from ``Runs.new_run_id`` is refused before anything is written (the rate untouched)."""
    record_shard = keys.shard_of(keys.idempotency_anchor("alice", "key-1"))
    stray = _new(keys.in_shard(lambda k: f"run_stray_{k}", (record_shard + 1) % keys.SHARDS))
    rate = (0.01, 1)  # one request: the run minted below takes it, so the refusal took none
    with pytest.raises(ValueError, match="new_run_id"):
        await store.runs.create_run(stray, b"%PDF", ("key-1", "fp"), rate=rate)
    with pytest.raises(ValueError, match="new_run_id"):
        await store.runs.create_run(stray, b"%PDF", ("key-1", "fp"))
    assert await store.redis.keys("*") == []  # no run, document, listing, record or rate
    minted = replace(stray, id=store.runs.new_run_id("alice", "key-1"))
    assert await store.runs.create_run(minted, b"%PDF", ("key-1", "fp"), rate=rate) is None
    assert await store.runs.idempotency_record("alice", "key-1") == f"fp {minted.id}"
    # Without a key any id goes: the run is alone in its shard.
    assert await store.runs.create_run(replace(stray, client="bob"), None, None) is None
    assert await store.runs.get_run(stray.id) is not None


# transition.lua -------------------------------------------------------------------------------------


async def test_transition_ok_conflict_and_missing(store: Store) -> None:
    run = await _run(store)
    new = _next(run, "processing")
    assert await store.runs.transition(Transition(new, 0, due_ms=T0 + 500)) == Applied(0, ended=False)
    assert await store.redis.zscore(_due_key("run_a"), "run_a") == T0 + 500
    stale = _next(run, "failed")  # written from version 0, but the run is at 1 now
    outcome = await store.runs.transition(Transition(stale, 0))
    assert isinstance(outcome, Conflict) and outcome.current.status == "processing"
    assert (await store.runs.get_run("run_a")).status == "processing"  # type: ignore[union-attr]
    ghost = replace(new, id="run_ghost")
    assert await store.runs.transition(Transition(ghost, 1)) == Missing()
    assert await store.runs.get_run("run_ghost") is None


async def test_transition_refuses_an_event_not_minted_beside_its_run(store: Store) -> None:
    """A transition writes its events' bodies with the run, in one step in the run's shard: an event whose
    id lies in another shard is refused before anything is written."""
    await _sub(store, "sub_all", event_types=json.dumps(["run.*"]))
    run = await _run(store)
    elsewhere = (keys.shard_of(run.id) + 1) % keys.SHARDS
    stray = _event("run.submitted", event_id=keys.in_shard(lambda k: f"evt_stray_{k}", elsewhere))
    new = replace(_next(run, "processing"), event_ids=[stray.id])
    before = sorted(await store.redis.keys("*"))
    with pytest.raises(ValueError, match="new_id_beside"):
        await store.runs.transition(Transition(new, run.version, events=[stray], due_ms=T0 + 500))
    assert sorted(await store.redis.keys("*")) == before
    assert await store.runs.get_run(run.id) == run and await _due_of(store) == {run.id: T0}
    # The same event minted beside its run, as lifecycle mints them: applied, and delivered.
    beside = replace(stray, id=domain.new_id_beside("evt", run.id))
    change = Transition(replace(new, event_ids=[beside.id]), run.version, events=[beside], due_ms=T0 + 500)
    assert await store.runs.transition(change) == Applied(1, ended=False)
    assert await store.redis.exists(keys.event(beside.id))


async def test_a_terminal_run_never_changes_status(store: Store) -> None:
    run = await _run(store)
    done = _next(run, "succeeded")
    # The change that ends the run says so (the caller counts the end); a rewrite of the end does not.
    assert await store.runs.transition(Transition(done, 0, remove_due=True, ttl_ms=60_000)) == Applied(
        0, ended=True
    )
    back = _next(done, "processing")
    outcome = await store.runs.transition(Transition(back, 1))
    assert isinstance(outcome, Conflict) and outcome.current.status == "succeeded"
    # The same terminal status may be rewritten (a canceled run told to the vendor later).
    same = replace(_next(done, "succeeded"), vendor_deleted=True)
    assert await store.runs.transition(Transition(same, 1)) == Applied(0, ended=False)


_HEAD = (
    "#!lua\n" + status_prelude() + "local s, v = string.match(ARGV[1], RUN_HEAD)\nreturn {s or '', v or ''}"
)


@pytest.mark.parametrize(
    ("client", "options"),
    [
        ("alice", {}),
        ('a"b\\c', {}),  # a quote and a backslash, escaped in the record
        ('x","vendor":"y","op":"z', {}),  # the next fields' names inside the value
        ("tenant é ключ", {}),
        # A nested object spelling a whole head: the match stays on the record's own first fields.
        ("bob", {"a": "", "vendor": "", "op": "", "ca": 1, "ua": 1, "status": "succeeded", "version": 99}),
    ],
)
async def test_a_stored_runs_status_and_version_are_read_from_its_head(
    store: Store, client: str, options: dict[str, Any]
) -> None:
    """transition.lua reads a run's status and version with RUN_HEAD (scripts.run_head), not by decoding
    the record: for every record written now, whatever the client's name or the options hold."""
    for status, version in (("queued", 0), ("running", 7), ("succeeded", 12345)):
        run = replace(_new(client=client), options=options, status=status, version=version)
        got = await store.redis.eval(_HEAD, 0, run.to_json())
        assert [_s(x) for x in got] == [status, str(version)], run.to_json()


async def test_a_record_in_another_form_is_read_whole_by_a_transition(store: Store) -> None:
    """A record RUN_HEAD does not match (here the long names, as `hookbridge spell-out-runs` writes
    them for a rollback) is decoded whole: a transition still refuses a stale version and a terminal
    run's new status, and applies the right one."""
    run = await _run(store)
    await spell_out_runs(store.redis)
    stored = await store.redis.get(keys.run(run.id))
    assert await store.redis.eval(_HEAD, 0, stored) == [b"", b""]  # no match: the long form
    stale = await store.runs.transition(Transition(_next(run, "failed"), run.version + 1))
    assert isinstance(stale, Conflict) and stale.current.status == run.status
    done = _next(run, "succeeded")
    assert await store.runs.transition(Transition(done, run.version, remove_due=True)) == Applied(
        0, ended=True
    )
    await spell_out_runs(store.redis)
    back = await store.runs.transition(Transition(_next(done, "processing"), done.version))
    assert isinstance(back, Conflict) and back.current.status == "succeeded"


async def test_due_set_is_scored_then_removed_with_the_active_entry(store: Store) -> None:
    run = await _run(store)
    r = store.redis
    new = _next(run, "processing")
    await store.runs.transition(Transition(new, 0, due_ms=T0 + 2000))
    assert await _due_of(store) == {"run_a": T0 + 2000}
    assert await _active_runs(store) == {"run_a"}
    before = _next(new, "processing")
    await store.runs.transition(Transition(before, 1))  # neither score nor removal: left alone
    assert await _due_of(store) == {"run_a": T0 + 2000}
    end = _next(before, "failed")
    await store.runs.transition(Transition(end, 2, remove_due=True))
    assert await _due_of(store) == {}
    assert await _active_runs(store) == set()
    assert not await r.exists(_due_key("run_a"), keys.active_runs(keys.shard_of("run_a")))


async def test_every_shards_head_is_read_in_one_call_on_one_redis_and_a_zrange_each_on_a_cluster(
    store: Store,
) -> None:
    """A worker's look at every shard of a due set (``Part.heads``): each set's lowest score, None for an
    empty one, in the order asked; one ``due_heads.lua`` call on one Redis server, a ZRANGE a key on a
    cluster (a script cannot span the shards' slots)."""
    on_cluster = isinstance(store.redis, RedisCluster)
    names = [keys.due_runs("nutrient", shard) for shard in range(keys.SHARDS)]
    await store.redis.zadd(names[3], {"run_b": T0 + 500, "run_a": T0 + 250})
    await store.redis.zadd(names[15], {"run_c": 1733500000123.0})
    await store.runs.heads(names[:1])  # the script loaded (NOSCRIPT)
    evalsha, zrange = (
        await command_calls(store.redis, "evalsha_ro"),
        await command_calls(store.redis, "zrange"),
    )
    heads = await store.runs.heads(names)
    assert heads == [None] * 3 + [T0 + 250] + [None] * 11 + [1733500000123.0]
    # A read, called as one (no WAIT behind it in the durable mode: tests/integration/test_wait_replicas.py).
    assert await command_calls(store.redis, "evalsha_ro") - evalsha == (0 if on_cluster else 1)
    # Inside the script too, Redis counts each ZRANGE: one a key either way.
    assert await command_calls(store.redis, "zrange") - zrange == keys.SHARDS
    assert await store.runs.heads([]) == []
    if not on_cluster:  # the server's script cache emptied (a restart, a failover): loaded again and sent
        await store.redis.script_flush()
        assert await store.runs.heads(names) == heads


async def test_result_document_and_ttl_on_the_end_and_keepttl_afterwards(store: Store) -> None:
    run = await _run(store, document=b"%PDF")
    r = store.redis
    submitted = _next(run, "processing")
    await store.runs.transition(
        Transition(submitted, 0, events=[_event("run.submitted", beside=run.id)], delete_document=True)
    )
    assert await r.get(keys.document("run_a")) is None
    end = _next(submitted, "succeeded")
    await store.runs.transition(Transition(end, 1, result=b'{"x":1}', remove_due=True, ttl_ms=50_000))
    assert await r.get(keys.result("run_a")) == b'{"x":1}'
    for key in (keys.run("run_a"), keys.result("run_a")):
        assert 0 < await r.pttl(key) <= 50_000
    # A later rewrite (the vendor told of the end) keeps the expiry instead of dropping it.
    await r.pexpire(keys.run("run_a"), 40_000)
    await store.runs.transition(Transition(replace(_next(end, "succeeded"), vendor_deleted=True), 2))
    assert 0 < await r.pttl(keys.run("run_a")) <= 40_000


async def test_events_fan_out_to_matching_active_subscriptions_only(store: Store) -> None:
    await _sub(store, "sub_default")  # no list: the three terminal events
    await _sub(store, "sub_all", event_types=json.dumps(["run.*"]))
    await _sub(store, "sub_failed", event_types=json.dumps(["run.failed"]))
    await _sub(store, "sub_off", event_types=json.dumps(["run.*"]), disabled="1")
    await _sub(store, "sub_bob", client="bob", event_types=json.dumps(["run.*"]))
    run = await _run(store)
    assert await _emit(store, run, _event("run.submitted", beside=run.id)) == 1  # sub_all only
    # A millisecond later: the delivery log is by creation time, so the order below is the emission's
    # (two deliveries created in one millisecond would sort by id, which says nothing).
    succeeded = _event("run.succeeded", beside=run.id)
    assert await _emit(store, run, succeeded, status="succeeded", now=T0 + 2) == 2
    assert [d.event_type for d in await _deliveries_of(store, "sub_all")] == [
        "run.submitted",
        "run.succeeded",
    ]
    assert [d.event_type for d in await _deliveries_of(store, "sub_default")] == ["run.succeeded"]
    for nobody in ("sub_failed", "sub_off", "sub_bob"):
        assert await _deliveries_of(store, nobody) == []
    events = [event_id for event_id, _ in await store.runs.run_events(await _stored(store, "run_a"))]
    assert events == [_eid("run.submitted"), _eid("run.succeeded")]
    assert await store.redis.exists(keys.run_events("run_a")) == 0  # no list: the record names them
    d = (await _deliveries_of(store, "sub_default"))[0]
    assert d.status == "pending" and d.client == "alice" and d.run_id == "run_a"
    # Every delivery lies in its subscription's shard (its id is minted there), and is active there.
    for sub_id in ("sub_all", "sub_default"):
        for made in await _deliveries_of(store, sub_id):
            assert keys.shard_of(made.id) == keys.shard_of(sub_id), (made.id, sub_id)
    assert d.id in await _active_deliveries(store)
    assert await store.redis.sismember(keys.active_deliveries(keys.shard_of("sub_default")), d.id)


async def test_an_event_emitted_twice_creates_its_deliveries_once(store: Store) -> None:
    await _sub(store, "sub_all", event_types=json.dumps(["run.*"]))
    run = await _run(store)
    ev = _event("run.submitted", beside=run.id)
    assert await _emit(store, run, ev) == 1
    assert await _emit(store, run, ev) == 0
    assert len(await _deliveries_of(store, "sub_all")) == 1


@pytest.mark.parametrize(
    ("event_type", "wanted", "matches"),
    [
        ("run.succeeded", None, True),
        ("run.canceled", None, True),
        ("run.progress", None, False),
        ("run.submitted", None, False),
        ("run.progress", ["run.*"], True),
        ("run.submitted", ["run.submitted"], True),
        ("run.failed", ["run.succeeded"], False),
        ("run.failed", [], True),  # an empty list is stored as no list: the default types
    ],
)
async def test_the_lua_event_matcher(
    store: Store, event_type: str, wanted: list[str] | None, matches: bool
) -> None:
    """The matcher production uses (``matches`` in _fanout.lua), through a real transition."""
    stored = "" if not wanted else json.dumps(wanted)
    await _sub(store, "sub_1", event_types=stored)
    run = await _run(store)
    status = (
        event_type.removeprefix("run.")
        if event_type in ("run.succeeded", "run.failed", "run.canceled")
        else "processing"
    )
    assert await _emit(store, run, _event(event_type, beside=run.id), status=status) == int(matches)


async def test_the_test_event_reaches_the_named_subscription_whatever_it_asked_for(store: Store) -> None:
    await _sub(store, "sub_1", event_types=json.dumps(["run.failed"]))
    await _sub(store, "sub_2")
    ev = _event(domain.EVENT_TEST, event_id="evt_test")
    assert await store.subscriptions.emit_test_event("alice", "sub_1", ev, T0) == 1
    assert [d.event_type for d in await _deliveries_of(store, "sub_1")] == [domain.EVENT_TEST]
    assert await _deliveries_of(store, "sub_2") == []
    assert bodies.unpacked(await store.redis.get(keys.event("evt_test"))) == ev.body.encode()
    assert (
        await store.subscriptions.emit_test_event("alice", "sub_1", ev, T0) == 0
    )  # the same event id: nothing new


async def test_sub_filter_limits_a_runs_events_to_the_subscriptions_it_names(store: Store) -> None:
    await _sub(store, "sub_1")
    await _sub(store, "sub_2")
    run = await _run(store, subscription_ids=["sub_2"])
    assert await _emit(store, run, _event("run.failed", beside=run.id), status="failed") == 1
    assert await _deliveries_of(store, "sub_1") == []
    assert len(await _deliveries_of(store, "sub_2")) == 1


async def test_a_progress_event_nobody_wants_is_not_kept(store: Store) -> None:
    await _sub(store, "sub_default")
    run = await _run(store)
    assert await _emit(store, run, _event("run.progress", beside=run.id)) == 0
    assert await store.redis.get(keys.event(_eid("run.progress"))) is None
    assert await store.redis.llen(keys.run_events("run_a")) == 0
    assert await store.runs.run_events(await _stored(store, "run_a")) == []
    # Other unwanted events are still kept on the run (its history), with no delivery.
    assert await _emit(store, run, _event("run.submitted", beside=run.id)) == 0
    assert [i for i, _ in await store.runs.run_events(await _stored(store, "run_a"))] == [
        _eid("run.submitted")
    ]


async def test_a_runs_events_are_its_records_and_its_progress_list_in_time_order(store: Store) -> None:
    """The record names a run's events but progress (Run.event_ids); kept progress events go to a list
    of their own, and a run written before the record named them has every event in that list."""
    await _sub(store, "sub_all", event_types=json.dumps(["run.*"]))
    run = await _run(store)

    def stamped(etype: str, ms: int, n: int = 0) -> Event:
        body = json.dumps({"type": etype, "timestamp": domain.rfc3339(T0 + ms), "data": {}})
        return Event(id=_eid(etype, n), type=etype, created=T0 + ms, body=body)

    await _emit(store, run, stamped("run.submitted", 1))
    await _emit(store, run, stamped("run.progress", 2), stamped("run.progress", 3, n=1))
    await _emit(store, run, stamped("run.succeeded", 4), status="succeeded")
    stored = await _stored(store, "run_a")
    assert stored.event_ids == [_eid("run.submitted"), _eid("run.succeeded")]
    assert [_s(i) for i in await store.redis.lrange(keys.run_events("run_a"), 0, -1)] == [
        _eid("run.progress"),
        _eid("run.progress", 1),
    ]
    in_order = [_eid("run.submitted"), _eid("run.progress"), _eid("run.progress", 1), _eid("run.succeeded")]
    assert [i for i, _ in await store.runs.run_events(stored)] == in_order
    # Written before: the list holds every event and the record none; the same answer.
    await store.redis.delete(keys.run_events("run_a"))
    await store.redis.rpush(keys.run_events("run_a"), *in_order)
    assert [i for i, _ in await store.runs.run_events(replace(stored, event_ids=[]))] == in_order
    assert [i for i, _ in await store.runs.run_events(stored)] == in_order  # both: each once


async def test_zero_retention_counts_pending_deliveries_and_the_last_end_drops_the_body(store: Store) -> None:
    await _sub(store, "sub_1")
    await _sub(store, "sub_2")
    run = await _run(store, zero_retention=True)
    ev = _event("run.succeeded", beside=run.id)
    assert await _emit(store, run, ev, status="succeeded") == 2
    r = store.redis
    assert await r.get(keys.event_pending(ev.id)) == b"2"
    d1, d2 = (await _deliveries_of(store, "sub_1"))[0], (await _deliveries_of(store, "sub_2"))[0]
    await store.deliveries.record_attempt(d1.id, "succeeded", now_ms=T0 + 10, attempt=_attempt())
    assert await r.get(keys.event(ev.id)) is not None and await r.get(keys.event_pending(ev.id)) == b"1"
    await store.deliveries.record_attempt(d2.id, "failed", now_ms=T0 + 20, attempt=_attempt())
    assert await r.get(keys.event(ev.id)) is None and await r.get(keys.event_pending(ev.id)) is None
    # Without zero retention the body stays for retention.
    run_b = await _run(store, "run_b")
    kept = _event("run.failed", beside=run_b.id)
    await _emit(store, run_b, kept, status="failed")
    assert await r.get(keys.event_pending(kept.id)) is None and await r.get(keys.event(kept.id)) is not None


# claim_runs.lua (the pause and probe: tests/integration/test_vendor_pause_store.py) ------------------


async def _due_runs(store: Store, n: int, shard: int | None = None) -> list[str]:
    """``n`` runs due at T0, T0 + 1, ...: ``run_<i>``, over the shards those ids fall in, or with ``shard``
    each the first ``run_<i>[_<k>]`` in that shard (one due set, where the claim keeps the due order)."""
    ids = []
    for i in range(n):
        run_id = f"run_{i}" if shard is None else _in(f"run_{i}", shard)
        await _run(store, run_id)
        await store.redis.zadd(_due_key(run_id), {run_id: T0 + i})
        ids.append(run_id)
    return ids


async def test_claim_runs_leases_due_runs_and_drops_vanished_ones(store: Store) -> None:
    await _due_runs(store, 3)
    await store.redis.delete(keys.run("run_1"))
    await store.redis.zadd(_due_key("run_late"), {"run_late": T0 + 5000})
    claimed, nxt = await store.runs.claim_runs("nutrient", T0 + 10, 10, LEASE, 0.0, 0)
    # run_0 and run_2 lie in shards 1 and 13, run_late in 1: the claim takes its shards in turn, in order.
    assert [c.run.id for c in claimed] == ["run_0", "run_2"] and claimed[0].due_ms == T0
    due = await _due_of(store)
    assert due == {"run_0": T0 + 10 + LEASE, "run_2": T0 + 10 + LEASE, "run_late": T0 + 5000}
    assert nxt == T0 + 5000
    # Leased: nothing due until the lease runs out; then the run is claimed again.
    assert (await store.runs.claim_runs("nutrient", T0 + 20, 10, LEASE, 0.0, 0))[0] == []
    again, _ = await store.runs.claim_runs("nutrient", T0 + 10 + LEASE, 10, LEASE, 0.0, 0)
    assert [c.run.id for c in again] == ["run_0", "run_2"]  # run_late had no record: dropped
    assert await store.redis.zscore(_due_key("run_late"), "run_late") is None


async def test_a_claims_calls_are_one_round_trip_and_an_emptied_script_cache_runs_each_once(
    store: Store,
) -> None:
    """A claim's calls of claim_runs.lua (one a shard) go in one pipeline of EVALSHAs, without the
    ``SCRIPT EXISTS`` that redis-py's scripts in a pipeline ask first. After the server's script cache was
    emptied (a restart, a failover) the refused calls are loaded and sent again: each run leased once."""
    await _due_runs(store, 3)
    await store.redis.delete(keys.run("run_1"))
    await store.redis.script_flush()  # every primary on a cluster
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 10, 10, LEASE, 0.0, 0)
    assert [c.run.id for c in claimed] == ["run_0", "run_2"]
    assert await _due_of(store) == {"run_0": T0 + 10 + LEASE, "run_2": T0 + 10 + LEASE}
    exists = await command_calls(store.redis, "script|exists")
    again, _ = await store.runs.claim_runs("nutrient", T0 + 10 + LEASE, 10, LEASE, 0.0, 0)
    assert [c.run.id for c in again] == ["run_0", "run_2"]
    assert await command_calls(store.redis, "script|exists") == exists


async def test_a_record_that_does_not_read_is_left_to_its_lease_and_the_batch_goes_on(store: Store) -> None:
    await _due_runs(store, 3)
    await store.redis.set(keys.run("run_1"), b'{"id": "run_1", "version": "not a number"}')
    with capture_logs() as entries:
        claimed, _ = await store.runs.claim_runs("nutrient", T0 + 10, 10, LEASE, 0.0, 0)
    assert [c.run.id for c in claimed] == ["run_0", "run_2"]
    assert [(e["log_level"], e["run_id"]) for e in entries] == [("error", "run_1")]
    assert "not a run record" in entries[0]["error"]
    # Leased like the others: handed back when the lease runs out, never worked as something else.
    assert await store.redis.zscore(_due_key("run_1"), "run_1") == T0 + 10 + LEASE


async def test_claim_runs_takes_budget_slots_within_the_lookahead(store: Store) -> None:
    # In one shard, whose due set the claim takes in due order (across shards it takes them in turn).
    ids = await _due_runs(store, 5, shard=keys.shard_of("run_0"))
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 10, 10, LEASE, 1000.0, 2500)
    # Slots 1 s apart; the fourth (3 s ahead) is past the 2.5 s lookahead and stays due.
    assert [(c.run.id, c.slot_ms) for c in claimed] == [
        (ids[0], T0 + 10),
        (ids[1], T0 + 1010),
        (ids[2], T0 + 2010),
    ]
    assert await store.redis.zscore(_due_key(ids[2]), ids[2]) == T0 + 2010 + LEASE
    assert await store.redis.zscore(_due_key(ids[3]), ids[3]) == T0 + 3
    assert await store.redis.get(keys.vendor_budget("nutrient")) == str(T0 + 3010).encode()
    # The budget is shared: the next claim's first slot is after the last one taken.
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 20, 10, LEASE, 1000.0, 10_000)
    assert [c.slot_ms for c in claimed] == [T0 + 3010, T0 + 4010]
    assert await store.limits.budget_take("nutrient", T0 + 30, 1000.0) == T0 + 5010


async def test_claim_runs_holds_while_paused_then_claims_one_probe(store: Store) -> None:
    await _due_runs(store, 3)
    await store.limits.pause_limited("nutrient", T0, 1000, 1000, 60_000, None)
    claimed, nxt = await store.runs.claim_runs("nutrient", T0 + 500, 10, LEASE, 0.0, 0)
    assert claimed == [] and nxt == T0 + 1000
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 1000, 10, LEASE, 0.0, 0)
    assert len(claimed) == 1 and claimed[0].probe
    assert await store.limits.pause_settle("nutrient", T0 + 1100, claimed[0].probe, answered=True)
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 1200, 10, LEASE, 0.0, 0)
    assert len(claimed) == 2 and all(c.probe is None for c in claimed)


# claim_deliveries.lua -------------------------------------------------------------------------------


async def _pending(store: Store, sub_id: str, n: int, client: str = "alice", first: int = 0) -> list[str]:
    """``n`` runs of ``client``, each with one pending delivery (a chain head) to ``sub_id``."""
    ids = []
    for i in range(first, first + n):
        run = await _run(store, f"run_{sub_id}_{i}", client)
        await _emit(store, run, _event("run.failed", i, f"evt_{sub_id}_{i}", beside=run.id), status="failed")
    for d in await _deliveries_of(store, sub_id):
        ids.append(d.id)
    return ids


async def test_claim_deliveries_parks_a_subscriptions_surplus_until_one_of_its_deliveries_ends(
    store: Store,
) -> None:
    await _sub(store, "sub_1")  # the default limit is 2 here
    ids = await _pending(store, "sub_1", 3)
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 10, 10, LEASE)
    assert len(claimed) == 2
    held = (set(ids) - {c.delivery.id for c in claimed}).pop()
    # Parked, not dropped: out of the due set (no claim rescans it), kept at its own due time.
    assert held not in await _due_deliveries(store)
    parked = await store.redis.zrange(keys.sub_parked("sub_1"), 0, -1, withscores=True)
    assert [_s(m) for m, _ in parked] == [held] and parked[0][1] <= T0 + 10
    assert (await store.deliveries.claim_deliveries(T0 + 20, 10, LEASE))[0] == []
    assert claimed[0].subscription.id  # type: ignore[union-attr] == "sub_1" and claimed[0].body is not None
    # One ends: the parked one is due at once, and the very next claim takes it.
    await store.deliveries.record_attempt(
        claimed[0].delivery.id, "succeeded", now_ms=T0 + 50, attempt=_attempt()
    )
    assert (await _due_deliveries(store))[held] <= T0 + 50
    assert await store.redis.zcard(keys.sub_parked("sub_1")) == 0
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 51, 10, LEASE)
    assert [c.delivery.id for c in claimed] == [held]


async def test_a_subscriptions_raised_limit_brings_back_as_many_parked_as_it_has_room_for(
    store: Store,
) -> None:
    await _sub(store, "sub_1", max_in_flight="1")
    ids = await _pending(store, "sub_1", 6)
    # The client's limit well above the subscription's: a claim sends a client no more candidates than
    # it has room for, and this is about the subscription's limit alone.
    roomy = 20
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 10, 20, LEASE, client_max=roomy)
    assert len(claimed) == 1 and await store.redis.zcard(keys.sub_parked("sub_1")) == 5
    await store.redis.hset(keys.subscription("sub_1"), "max_in_flight", "3")  # PATCH max_in_flight
    await store.deliveries.record_attempt(
        claimed[0].delivery.id, "succeeded", now_ms=T0 + 20, attempt=_attempt()
    )
    # None is left in flight, so three come back at once (not one per end, which would hold it at one).
    assert await store.redis.zcard(keys.sub_parked("sub_1")) == 2
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 21, 20, LEASE, client_max=roomy)
    assert len(claimed) == 3 and {c.delivery.id for c in claimed} <= set(ids)


async def test_a_parked_delivery_whose_slot_holder_died_is_brought_back_by_the_sweeper(store: Store) -> None:
    """The worker attempting the subscription's deliveries dies: nothing ends, so nothing brings the
    parked one back; the sweeper puts it in the due set, and once the dead worker's leases have run out
    a claim takes it."""
    await _sub(store, "sub_1")  # 2 in flight
    ids = await _pending(store, "sub_1", 3)
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 10, 10, LEASE)
    held = (set(ids) - {c.delivery.id for c in claimed}).pop()
    await store.upkeep.repair(T0 + 100)
    assert (await _due_deliveries(store))[held] == T0 + 100
    # Still two in flight under live leases: a claim parks it again rather than sending a third.
    assert (await store.deliveries.claim_deliveries(T0 + 200, 10, LEASE))[0] == []
    assert held not in await _due_deliveries(store)
    # The dead worker's leases run out: its two deliveries are due again (at their lease's end, before
    # the parked one's return) and go first; the parked one waits for one of them to end.
    await store.upkeep.repair(T0 + LEASE + 20)
    again, _ = await store.deliveries.claim_deliveries(T0 + LEASE + 20, 10, LEASE)
    assert {c.delivery.id for c in again} == {c.delivery.id for c in claimed}
    await store.deliveries.record_attempt(
        again[0].delivery.id, "succeeded", now_ms=T0 + LEASE + 30, attempt=_attempt()
    )
    assert [
        c.delivery.id for c in (await store.deliveries.claim_deliveries(T0 + LEASE + 31, 10, LEASE))[0]
    ] == [held]


async def test_claim_deliveries_parks_a_clients_surplus_and_an_end_brings_one_back(store: Store) -> None:
    """CLIENT_MAX_IN_FLIGHT (3 here) holds per client in a shard, in Redis: a claim takes no more of a
    client's deliveries than that, and the same claim parks the rest (it looks at every candidate it
    read) in the client's parked set of that shard, out of the due set; an end there brings one back."""
    await _sub(store, "sub_a", max_in_flight="10")
    await _sub(store, "sub_b", client="bob")
    mine = await _pending(store, "sub_a", 5)
    theirs = await _pending(store, "sub_b", 1, client="bob")
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 10, 10, LEASE)
    got = [c.delivery.id for c in claimed]
    assert len([i for i in got if i in mine]) == 3 and theirs[0] in got  # alice's limit is 3 in flight
    rest = set(mine) - set(got)
    # Every one of sub_a's deliveries is in sub_a's shard: so are alice's in-flight and parked sets there.
    assert sorted(await _client_set(store, "inflight", "alice", mine[0])) == sorted(set(got) & set(mine))
    parked = await _client_set(store, "parked", "alice", mine[0])
    assert sorted(parked) == sorted(rest) and not set(parked) & set(await _due_deliveries(store))
    assert (await store.deliveries.claim_deliveries(T0 + 10, 10, LEASE))[0] == []
    assert len(await _client_set(store, "inflight", "alice", mine[0])) == 3
    await store.deliveries.record_attempt(
        next(i for i in got if i in mine), "succeeded", now_ms=T0 + 20, attempt=_attempt()
    )
    # The oldest parked one comes back (the set's first: by due time, then by id).
    assert await _client_set(store, "parked", "alice", mine[0]) == parked[1:]
    assert len(await _client_set(store, "inflight", "alice", mine[0])) == 2
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 30, 10, LEASE)
    assert [c.delivery.id for c in claimed] == [parked[0]]


async def test_a_client_without_room_in_this_worker_is_parked_and_unpark_brings_back_one_at_a_time(
    store: Store,
) -> None:
    """``held``: the worker holds CLIENT_MAX_IN_FLIGHT (3) of alice's deliveries already, wherever they
    are. Its claim takes bob's and parks alice's due ones in her parked set of their shard (not left due
    for every claim to read again, not taken past her limit), remembering that it did; as each of her
    attempts here ends, ``Deliveries.unpark`` brings back one, the oldest, at its own due time, and says
    False once none it parked is left. Nothing of alice's is in flight in Redis here: the park is the
    worker's own decision, from ``held`` alone."""
    await _sub(store, "sub_a", max_in_flight="10")
    await _sub(store, "sub_b", client="bob")
    for i in range(3):  # a millisecond apart, so that "the oldest" is one of them, not the least id
        run = await _run(store, f"run_a_{i}")
        failed = _event("run.failed", i, f"evt_a_{i}", beside=run.id)
        await _emit(store, run, failed, status="failed", now=T0 + 1 + i)
    made = await _deliveries_of(store, "sub_a")  # by creation time
    assert [d.created_at for d in made] == [T0 + 1, T0 + 2, T0 + 3]
    mine = [d.id for d in made]
    theirs = await _pending(store, "sub_b", 1, client="bob")
    assert not await store.deliveries.unpark("alice", T0 + 5)  # none parked by this process yet
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 10, 10, LEASE, held={"alice": 3})
    assert [c.delivery.id for c in claimed] == theirs
    shard = keys.shard_of("sub_a")
    parked = await store.redis.zrange(keys.client_parked("alice", shard), 0, -1, withscores=True)
    assert [(_s(m), score) for m, score in parked] == [(d.id, d.created_at) for d in made]
    assert not set(mine) & set(await _due_deliveries(store))
    assert await store.redis.zcard(keys.client_inflight("alice", shard)) == 0  # parked, not claimed
    assert all(d is not None and d.status == "pending" for d in await store.deliveries.get_deliveries(mine))
    # Bob was not held back by alice: he has his own room.
    assert await store.deliveries.unpark("bob", T0 + 20) is False
    # One of alice's attempts ends: one comes back, due at its own time, and a claim with room for one
    # takes it.
    assert await store.deliveries.unpark("alice", T0 + 20) is True
    assert {i: s for i, s in (await _due_deliveries(store)).items() if i in mine} == {mine[0]: T0 + 1}
    assert await _client_set(store, "parked", "alice", mine[0]) == mine[1:]
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 21, 10, LEASE, held={"alice": 2})
    assert [c.delivery.id for c in claimed] == [mine[0]]
    # Each end brings back exactly one more; with none left that this process parked, False.
    assert await store.deliveries.unpark("alice", T0 + 30) is True
    assert await _client_set(store, "parked", "alice", mine[0]) == [mine[2]]
    assert {i for i in await _due_deliveries(store) if i in mine} == {mine[0], mine[1]}
    assert await store.deliveries.unpark("alice", T0 + 31) is True
    assert await _client_set(store, "parked", "alice", mine[0]) == []
    assert (await _due_deliveries(store))[mine[2]] == T0 + 3
    assert await store.deliveries.unpark("alice", T0 + 32) is False
    assert await _client_set(store, "parked", "alice", mine[0]) == []


async def test_claim_deliveries_keeps_a_subscriptions_rate(store: Store) -> None:
    await _sub(store, "sub_1", rate_per_s="2", max_in_flight="10")
    await _pending(store, "sub_1", 2)
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 1, 10, LEASE)  # both due since T0 + 1
    assert len(claimed) == 1
    assert await store.redis.get(keys.sub_budget("sub_1")) == str(T0 + 501).encode()
    assert sorted((await _due_deliveries(store)).values())[0] == T0 + 501
    assert (await store.deliveries.claim_deliveries(T0 + 500, 10, LEASE))[0] == []
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 501, 10, LEASE)
    assert len(claimed) == 1


async def test_claim_deliveries_hands_out_a_missing_body_and_ends_a_delivery_without_event(
    store: Store,
) -> None:
    await _sub(store, "sub_1", max_in_flight="10")
    ids = await _pending(store, "sub_1", 2)
    first = await store.deliveries.get_delivery(ids[0])
    assert first is not None
    await store.redis.delete(keys.event(first.event_id))
    await store.redis.hdel(keys.delivery(ids[1]), "event")
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 10, 10, LEASE)
    assert [(c.delivery.id, c.body) for c in claimed] == [(ids[0], None)]  # the worker fails it
    broken = await store.deliveries.get_delivery(ids[1])
    assert broken is not None and broken.status == "failed"
    assert ids[1] not in await _due_deliveries(store)
    assert ids[1] not in await _active_deliveries(store)


# delivery_result.lua --------------------------------------------------------------------------------


async def _one(store: Store, sub: str = "sub_1", **fields: str) -> str:
    await _sub(store, sub, **fields)
    return (await _pending(store, sub, 1))[0]


async def test_delivery_succeeded_ends_it_and_keeps_the_attempt(store: Store) -> None:
    dlv = await _one(store)
    await store.redis.hset(
        keys.subscription("sub_1"), mapping={"consecutive_failures": "3", "failing_since": "5"}
    )
    assert (
        await store.deliveries.record_attempt(
            dlv, "succeeded", now_ms=T0 + 10, attempt=_attempt(200), status_code=200
        )
        == ""
    )
    d = await store.deliveries.get_delivery(dlv)
    assert d is not None and (d.status, d.attempts, d.last_status_code) == ("succeeded", 1, 200)
    assert await store.deliveries.delivery_attempts(dlv) == [_attempt(200)]
    assert dlv not in await _due_deliveries(store)
    assert dlv not in await _active_deliveries(store)
    assert 0 < await store.redis.pttl(keys.delivery(dlv)) <= RETENTION_MS
    sub = await store.subscriptions.get_subscription("sub_1")
    assert sub is not None and (sub.consecutive_failures, sub.failing_since) == (0, None)


async def test_delivery_retry_reschedules_it(store: Store) -> None:
    dlv = await _one(store)
    await store.deliveries.record_attempt(
        dlv, "retry", now_ms=T0 + 10, attempt=_attempt(500), next_at_ms=T0 + 5000
    )
    d = await store.deliveries.get_delivery(dlv)
    assert d is not None and (d.status, d.next_attempt_at) == ("pending", T0 + 5000)
    assert (await _due_deliveries(store))[dlv] == T0 + 5000
    assert await store.redis.pttl(keys.delivery(dlv)) == -1  # pending work does not expire


async def test_delivery_failed_counts_against_the_subscription_and_disables_it_after_the_window(
    store: Store,
) -> None:
    dlv = await _one(store)
    await store.deliveries.record_attempt(dlv, "failed", now_ms=T0 + 10, attempt=_attempt())
    sub = await store.subscriptions.get_subscription("sub_1")
    assert sub is not None and sub.consecutive_failures == 1 and not sub.disabled
    assert sub.failing_since == T0 + 1  # the first failing delivery's creation
    # Still failing 60 s (the window) after it began: disabled.
    run = await _run(store, "run_late")
    await _emit(store, run, _event("run.failed", 9, beside=run.id), status="failed")
    late = next(d.id for d in await _deliveries_of(store, "sub_1") if d.id != dlv)
    await store.deliveries.record_attempt(late, "failed", now_ms=T0 + 1 + 60_000, attempt=_attempt())
    sub = await store.subscriptions.get_subscription("sub_1")
    assert sub is not None and sub.disabled and "kept failing" in (sub.disabled_reason or "")


async def test_delivery_gone_disables_and_skipped_does_not_count(store: Store) -> None:
    dlv = await _one(store)
    await store.deliveries.record_attempt(dlv, "skipped", now_ms=T0 + 10, attempt=None)
    d, sub = await store.deliveries.get_delivery(dlv), await store.subscriptions.get_subscription("sub_1")
    assert d is not None and (d.status, d.attempts) == ("failed", 0)
    assert sub is not None and sub.consecutive_failures == 0 and not sub.disabled
    dlv2 = await _one(store, "sub_2")
    await store.deliveries.record_attempt(dlv2, "gone", now_ms=T0 + 20, attempt=_attempt(), status_code=410)
    sub = await store.subscriptions.get_subscription("sub_2")
    assert sub is not None and sub.disabled and "410" in (sub.disabled_reason or "")
    assert (
        await store.deliveries.record_attempt("dlv_missing", "succeeded", now_ms=T0, attempt=_attempt()) == ""
    )
    assert await store.deliveries.get_delivery("dlv_missing") is None


async def test_a_chain_makes_only_its_head_due_and_the_next_due_when_it_ends(store: Store) -> None:
    await _sub(store, "sub_all", event_types=json.dumps(["run.*"]))
    run = await _run(store)
    await _emit(store, run, _event("run.submitted", beside=run.id))
    await _emit(store, run, _event("run.progress", beside=run.id))
    await _emit(store, run, _event("run.succeeded", beside=run.id), status="succeeded")
    chain = [_s(i) for i in await store.redis.lrange(keys.chain("sub_all", "run_a"), 0, -1)]
    assert len(chain) == 3 and list(await _due_deliveries(store)) == [chain[0]]
    assert (
        await store.deliveries.record_attempt(chain[0], "failed", now_ms=T0 + 100, attempt=_attempt())
        == chain[1]
    )
    assert (await _due_deliveries(store)) == {chain[1]: T0 + 100}
    # A retry keeps its place at the head: the next one waits.
    await store.deliveries.record_attempt(
        chain[1], "retry", now_ms=T0 + 200, attempt=_attempt(), next_at_ms=T0 + 900
    )
    assert list(await _due_deliveries(store)) == [chain[1]]
    assert (
        await store.deliveries.record_attempt(chain[1], "succeeded", now_ms=T0 + 900, attempt=_attempt())
        == chain[2]
    )
    assert (
        await store.deliveries.record_attempt(chain[2], "succeeded", now_ms=T0 + 950, attempt=_attempt())
        == ""
    )
    assert not await store.redis.exists(keys.chain("sub_all", "run_a"))


async def test_a_hundred_attempts_are_kept_the_first_and_the_latest(store: Store) -> None:
    dlv = await _one(store)
    for i in range(105):
        await store.deliveries.record_attempt(
            dlv, "retry", now_ms=T0 + i, attempt=_attempt(i), next_at_ms=T0 + i + 1
        )
    attempts = await store.deliveries.delivery_attempts(dlv)
    assert (
        len(attempts) == 100 and attempts[:2] == [_attempt(0), _attempt(6)] and attempts[-1] == _attempt(104)
    )
    d = await store.deliveries.get_delivery(dlv)
    assert d is not None and d.attempts == 105


async def test_a_first_attempt_with_an_error_starts_the_list_and_the_last_hundred_are_kept(
    store: Store,
) -> None:
    dlv = await _one(store)
    refused = Attempt(at="2027-01-15T08:00:00.000Z", duration_ms=1.0, error="refused")
    await store.deliveries.record_attempt(dlv, "retry", now_ms=T0, attempt=refused, next_at_ms=T0 + 1)
    for i in range(1, 105):
        await store.deliveries.record_attempt(
            dlv, "retry", now_ms=T0 + i, attempt=_attempt(i), next_at_ms=T0 + i + 1
        )
    attempts = await store.deliveries.delivery_attempts(dlv)
    assert len(attempts) == 100 and attempts[0] == _attempt(5) and attempts[-1] == _attempt(104)
    assert await store.redis.hget(keys.delivery(dlv), DELIVERY_HASH_INTERNAL["first_attempt"]) is None


async def test_a_delivery_that_ends_at_its_first_attempt_keeps_it_in_its_hash_and_no_list(
    store: Store,
) -> None:
    # Most deliveries: the attempt list (~260 bytes on Redis 7.0) is never made.
    dlv = await _one(store)
    await store.deliveries.record_attempt(dlv, "succeeded", now_ms=T0, attempt=_attempt(204), status_code=204)
    assert not await store.redis.exists(keys.delivery_attempts(dlv))
    stored = await store.redis.hget(keys.delivery(dlv), DELIVERY_HASH_INTERNAL["first_attempt"])
    assert stored == b"1800000000000,204,1.0"
    assert await store.redis.object("encoding", keys.delivery(dlv)) == b"listpack"
    assert await store.deliveries.delivery_attempts(dlv) == [_attempt(204)]
    # Sent again by hand: the next attempts go to the list, after it.
    assert await store.deliveries.retry_delivery(dlv, T0 + 5) == Applied()
    await store.deliveries.record_attempt(
        dlv, "succeeded", now_ms=T0 + 6, attempt=_attempt(200), status_code=200
    )
    assert await store.deliveries.delivery_attempts(dlv) == [_attempt(204), _attempt(200)]
    assert 0 < await store.redis.pttl(keys.delivery_attempts(dlv)) <= RETENTION_MS


# retry_delivery.lua ---------------------------------------------------------------------------------


async def test_retry_delivery_sends_an_ended_delivery_again_on_a_new_series(store: Store) -> None:
    dlv = await _one(store)
    await store.deliveries.record_attempt(dlv, "failed", now_ms=T0 + 10, attempt=_attempt())
    assert await store.deliveries.retry_delivery(dlv, T0 + 20) == Applied()
    d = await store.deliveries.get_delivery(dlv)
    assert d is not None and (d.status, d.series, d.next_attempt_at) == ("pending", 1, T0 + 20)
    assert (await _due_deliveries(store))[dlv] == T0 + 20
    assert dlv in await _active_deliveries(store)
    # Kept while pending again: the hash, with the first attempt in it (no attempt list yet).
    assert await store.redis.pttl(keys.delivery(dlv)) == -1
    assert not await store.redis.exists(keys.delivery_attempts(dlv))
    assert await store.deliveries.delivery_attempts(dlv) == [_attempt()]
    assert await store.deliveries.retry_delivery("dlv_missing", T0) == Missing()


async def test_retry_delivery_replaces_a_scheduled_attempt_but_not_one_being_sent(store: Store) -> None:
    dlv = await _one(store)
    # In backoff after two failures: the resend goes now, and its failure restarts the schedule.
    await store.deliveries.record_attempt(
        dlv, "retry", now_ms=T0 + 1, attempt=_attempt(), next_at_ms=T0 + 10_000
    )
    await store.deliveries.record_attempt(
        dlv, "retry", now_ms=T0 + 2, attempt=_attempt(), next_at_ms=T0 + 10_000
    )
    assert await store.deliveries.retry_delivery(dlv, T0 + 5) == Applied()
    d = await store.deliveries.get_delivery(dlv)
    assert d is not None and (d.status, d.attempts, d.series, d.next_attempt_at) == ("pending", 2, 2, T0 + 5)
    assert (await _due_deliveries(store))[dlv] == T0 + 5
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 6, 10, LEASE)
    assert [c.delivery.id for c in claimed] == [dlv]
    # Claimed, its lease running: being sent, so a resend is refused and changes nothing.
    assert await store.deliveries.retry_delivery(dlv, T0 + 7) == Busy()
    assert (await _due_deliveries(store))[dlv] == T0 + 6 + LEASE
    # Once the lease has run out (a worker that died), it can be sent again.
    assert await store.deliveries.retry_delivery(dlv, T0 + 7 + LEASE) == Applied()


# repair.lua -----------------------------------------------------------------------------------------


async def test_repair_re_adds_lost_work_and_drops_finished_entries(store: Store) -> None:
    r = store.redis
    await _run(store, "run_lost")
    await _run(store, "run_done")
    done = await store.runs.get_run("run_done")
    assert done is not None
    # Ended but still listed as active; with a vendor trail, so that its record is stored compact (a
    # record this short alone would not pack shorter): repair.lua reads its head.
    polled = [[2040 + 30_000 * n, 1, "running" if n == 0 else 0, 5] for n in range(8)]
    ended = replace(_next(done, "succeeded"), vendor_run_id="job-1", vendor_status="done", trail=polled)
    await store.runs.transition(Transition(ended, 0))
    assert compact.MARK in await r.get(keys.run("run_done"))
    await r.sadd(keys.active_runs(keys.shard_of("run_gone")), "run_gone")
    await _sub(store, "sub_all", event_types=json.dumps(["run.*"]))
    run = await _run(store, "run_c")
    await _emit(store, run, _event("run.submitted", beside=run.id))
    await _emit(store, run, _event("run.progress", beside=run.id))
    head, second = [_s(i) for i in await r.lrange(keys.chain("sub_all", "run_c"), 0, -1)]
    for shard in range(keys.SHARDS):  # the due sets lost
        await r.delete(keys.due_runs("nutrient", shard))
    for shard in range(keys.SHARDS):  # and the deliveries' due sets
        await r.delete(keys.due_deliveries(shard))
    await r.sadd(keys.active_deliveries(keys.shard_of("dlv_gone")), "dlv_gone")

    counts = await store.upkeep.repair(T0 + 100)
    # run_lost and run_c (queued, never stepped) are due again; the head of the chain is, its second not.
    assert counts == {"runs": 2, "deliveries": 1}
    assert set(await _due_of(store)) == {"run_lost", "run_c"}
    assert await _due_deliveries(store) == {head: T0 + 100}
    assert await _active_runs(store) == {"run_lost", "run_c"}
    assert await _active_deliveries(store) == {head, second}
    assert await store.upkeep.repair(T0 + 200) == {"runs": 0, "deliveries": 0}  # NX: nothing moves twice


async def test_repair_runs_its_script_only_for_the_runs_with_no_place_in_a_due_set(store: Store) -> None:
    """A run in flight sits in its vendor's due set from its creation to its end: the sweeper asks the due
    sets (a ZMSCORE per vendor for a page of a shard's runs) and calls repair.lua only for the runs found in
    none. Before, every pass called it for every run in flight: at 100,000, 100,000 calls a pass."""
    for i in range(20):
        await _run(store, f"run_{i:02}")
    await _run(store, "run_warm")
    await store.redis.zrem(_due_key("run_warm"), "run_warm")
    assert await store.upkeep.repair(T0 + 50) == {"runs": 1, "deliveries": 0}  # the script is loaded
    await _run(store, "run_lost")
    await store.redis.zrem(_due_key("run_lost"), "run_lost")

    before = await command_calls(store.redis, "evalsha")
    asked = await command_calls(store.redis, "zmscore")
    assert await store.upkeep.repair(T0 + 100) == {"runs": 1, "deliveries": 0}
    assert await command_calls(store.redis, "evalsha") - before == 1  # run_lost's, not 22
    # Asked only of the due sets that hold runs (nutrient's; the other six vendors' are empty): one
    # ZMSCORE per shard with runs in place, where every served vendor's would be seven.
    placed = {keys.shard_of(r) for r in await _due_of(store) if r != "run_lost"}
    assert len(store.settings.vendors) == 7
    assert await command_calls(store.redis, "zmscore") - asked == len(placed)
    assert (await _due_of(store))["run_lost"] == T0 + 100

    # A run in place is not read: its record deleted by hand goes unseen by the pass. The claim drops it
    # from its due set (a run with no record), and the pass after that from the active runs.
    await store.redis.delete(keys.run("run_00"))
    assert await store.upkeep.repair(T0 + 200) == {"runs": 0, "deliveries": 0}
    assert "run_00" in await _active_runs(store)
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 300, 50, LEASE, 0.0, 0)
    assert len(claimed) == 21 and "run_00" not in await _due_of(store)
    assert await store.upkeep.repair(T0 + 400) == {"runs": 0, "deliveries": 0}
    assert "run_00" not in await _active_runs(store)
    assert len(await _active_runs(store)) == 21


async def test_repair_puts_each_run_in_its_own_vendors_due_set_without_reading_it_first(store: Store) -> None:
    """The sweeper declares every served vendor's due set and repair.lua picks the run's own; a run of a
    vendor this deployment does not serve is left where it is (no worker here would claim it)."""
    r = store.redis
    nutrient = await _run(store, "run_n")
    uptiq = replace(nutrient, id="run_u", vendor="uptiq")
    assert await store.runs.create_run(uptiq, None, None) is None
    unserved = replace(nutrient, id="run_x", vendor="acme")
    await r.set(keys.run("run_x"), unserved.to_json())
    await r.sadd(keys.active_runs(keys.shard_of("run_x")), "run_x")
    for shard in range(keys.SHARDS):
        await r.delete(keys.due_runs("nutrient", shard), keys.due_runs("uptiq", shard))

    assert await store.upkeep.repair(T0 + 100) == {"runs": 2, "deliveries": 0}
    assert list(await _due_of(store, "nutrient")) == ["run_n"]
    assert list(await _due_of(store, "uptiq")) == ["run_u"]
    assert await _due_of(store, "acme") == {}
    assert await _active_runs(store) == {"run_n", "run_u", "run_x"}


async def test_repair_rebuilds_a_lost_chain_behind_a_pending_head(store: Store) -> None:
    await _sub(store, "sub_all", event_types=json.dumps(["run.*"]))
    run = await _run(store)
    await _emit(store, run, _event("run.submitted", beside=run.id))
    head = _s(await store.redis.lindex(keys.chain("sub_all", "run_a"), 0))  # type: ignore[misc]
    await store.redis.delete(keys.chain("sub_all", "run_a"), keys.due_deliveries(keys.shard_of(head)))
    await store.upkeep.repair(T0 + 100)
    assert [_s(i) for i in await store.redis.lrange(keys.chain("sub_all", "run_a"), 0, -1)] == [head]
    assert await _due_deliveries(store) == {head: T0 + 100}


# release.lua ----------------------------------------------------------------------------------------


async def test_release_hands_back_only_leases_still_held(store: Store) -> None:
    await _due_runs(store, 2)
    claimed, _ = await store.runs.claim_runs("nutrient", T0 + 10, 10, LEASE, 0.0, 0)
    assert len(claimed) == 2
    lease_end = T0 + 10 + LEASE
    await store.runs.schedule_run("nutrient", "run_1", T0 + 700)  # its step finished: no longer our lease
    assert (
        await store.runs.release_runs("nutrient", [("run_0", lease_end), ("run_1", lease_end)], T0 + 50) == 1
    )
    assert await _due_of(store) == {"run_0": T0 + 50, "run_1": T0 + 700}


async def test_release_deliveries_frees_subscription_and_client_slots(store: Store) -> None:
    await _sub(store, "sub_1", max_in_flight="10")
    await _pending(store, "sub_1", 1)
    claimed, _ = await store.deliveries.claim_deliveries(T0 + 1, 10, LEASE)
    d = claimed[0].delivery
    # The client's in-flight set is the delivery's shard's (its subscription's).
    assert await _client_set(store, "inflight", "alice", d.id) == [d.id]
    assert await store.deliveries.release_deliveries([(d.id, "sub_1", "alice", T0 + 1 + LEASE)], T0 + 5) == 1
    assert (await _due_deliveries(store))[d.id] == T0 + 5
    assert await store.redis.zcard(keys.sub_inflight("sub_1")) == 0
    assert await _client_set(store, "inflight", "alice", d.id) == []
    assert await store.deliveries.release_deliveries([(d.id, "sub_1", "alice", T0 + 1 + LEASE)], T0 + 6) == 0


# rate_limit.lua, create_subscription.lua, reseal_secret.lua ------------------------------------------


async def test_rate_limit_allows_the_burst_then_answers_the_wait(store: Store) -> None:
    # 1 per 100 s with a burst of 3: Redis's own clock cannot move 100 s within this test.
    for _ in range(3):
        assert await store.limits.rate_limit("submit", "alice", 0.01, 3) == 0
    wait = await store.limits.rate_limit("submit", "alice", 0.01, 3)
    assert 99 < wait <= 100
    assert 99 < await store.limits.rate_limit("submit", "alice", 0.01, 3, take=False) <= 100
    assert await store.limits.rate_limit("submit", "bob", 0.01, 3) == 0  # per client
    assert 0 < await store.redis.pttl(keys.client_rate("submit", "alice")) <= 301_000


async def test_rate_limit_peek_writes_nothing(store: Store) -> None:
    assert await store.limits.rate_limit("submit", "alice", 1, 1, take=False) == 0
    assert not await store.redis.exists(keys.client_rate("submit", "alice"))


async def test_create_subscription_stops_at_the_quota(store: Store) -> None:
    base = Subscription(
        id="", client="alice", url="https://example.com/hook", secrets="[]", created_at=T0, updated_at=T0
    )
    assert await store.subscriptions.create_subscription(replace(base, id="sub_1"), max_count=2)
    assert await store.subscriptions.create_subscription(replace(base, id="sub_2"), max_count=2)
    assert not await store.subscriptions.create_subscription(replace(base, id="sub_3"), max_count=2)
    assert await store.subscriptions.get_subscription("sub_3") is None
    assert await store.redis.zcard(keys.client_subs("alice")) == 2
    assert await store.subscriptions.create_subscription(replace(base, id="sub_b", client="bob"), max_count=2)


async def test_reseal_secret_is_a_compare_and_set(store: Store) -> None:
    await _sub(store, "sub_1", secrets="old")
    key = keys.subscription("sub_1")
    assert await store.subscriptions.scripts.reseal_secret(keys=[key], args=["old", "sealed"]) == 1
    assert (
        await store.subscriptions.scripts.reseal_secret(keys=[key], args=["old", "other"]) == 0
    )  # changed meanwhile
    assert (await store.subscriptions.get_subscription("sub_1")).secrets == "sealed"  # type: ignore[union-attr]
