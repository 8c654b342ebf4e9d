"""The Lua scripts behind every atomic state change, loaded once per Redis client.

Each script is sent as ``#!lua`` (so that Redis and Valkey >= 7 hold it to the keys it declares), then
``status_prelude()`` (the statuses and outcomes, generated from domain.py), then, for the scripts that fan
events out (a fan-out's deliveries and feed), the event defaults from domain.py and ``_fanout.lua``, for those
that apply a client's rate ``_gcra.lua``, then its own file; ``transitions`` holds ``transition.lua`` as a
function that it applies to each run of a batch (``_batch.lua``; so do ``relay_feeds``, ``relays_done``
and ``claims`` with theirs: :data:`BATCHED`), and ``submit_run`` a submit's two steps as two. No
script spells a status, and no script names a key: every key it touches is one of its ``KEYS``, built by
the Python caller (``keys.py``); where a key depends on data in Redis (a delivery's subscription, a
client's subscriptions, the events in a run's outbox) the caller reads that first and the script checks it
still holds (tests/store/test_script_keys.py holds every file to this).

A number that a script only hands on to Redis (a score, a time, an expiry, a list index) reaches it as text,
from the caller's arguments or as a literal: Redis formats every Lua number given to ``redis.call`` again
(``%.17g``), ~0.5 us an argument (docs/performance.md, stop 53)."""

from __future__ import annotations

from importlib.resources import files

import msgspec
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from service.core import domain, records

_LUA = files("service.store") / "lua"
# The scripts that fan events out or append them to a client's feed (_fanout.lua).
_SHARED = ("fanout_deliveries", "relay_feed", "transition")
# The scripts that apply a client's rate (_gcra.lua).
_LIMITED = ("accept_run", "submit_run", "rate_limit", "read_feed")
# The scripts that apply another to each call of a batch (_batch.lua): one EVALSHA for many calls whose
# keys share a slot on a cluster, for them all on one server (a batch's transitions, its relays' feed
# steps and last steps, a claim's leases in each shard: base.batched).
BATCHED = {
    "transitions": "transition",
    "relay_feeds": "relay_feed",
    "relays_done": "relay_done",
    "claims": "claim_runs",
}


def _lua_table(entries: dict[str, str | bool]) -> str:
    def value(v: str | bool) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else f"'{v}'"

    return "{" + ", ".join(f"{k} = {value(v)}" for k, v in entries.items()) + "}"


_FINAL = domain.ATTEMPT_FINAL_STATUS


def status_prelude() -> str:
    """The statuses and outcomes of :mod:`service.core.domain` as Lua tables, so no script spells one:
    ``RUN.QUEUED``, ``TERMINAL[status]``, ``DLV.PENDING``, ``OUTCOME.RETRY``, ``FINAL_STATUS[outcome]``;
    and the delivery hash's field names (``DF.status``), from records.DELIVERY_HASH; and ``RUN_HEAD``
    (:func:`run_head`). Tables rather than one local each: a script's functions reach them as a few
    upvalues."""
    lines = [
        "-- Generated from service/core/domain.py by status_prelude(); the scripts spell no status.",
        f"local RUN = {_lua_table({s.name: s.value for s in domain.RunStatus})}",
        f"local TERMINAL = {_lua_table({s.value: True for s in domain.TERMINAL})}",
        f"local DLV = {_lua_table({s.name: s.value for s in domain.DeliveryStatus})}",
        f"local OUTCOME = {_lua_table({o.name: o.value for o in domain.AttemptOutcome})}",
        f"local FINAL_STATUS = {_lua_table({o.value: s.value for o, s in _FINAL.items()})}",
        "-- The delivery hash's fields, from service/core/records.py's DELIVERY_HASH: DF.<record field>.",
        f"local DF = {_lua_table({**records.DELIVERY_HASH, **records.DELIVERY_HASH_INTERNAL})}",
        "-- A stored run's head, from records.Run's field order: string.match(record, RUN_HEAD) -> status,",
        "-- version, or nil for a record in another form (then read whole).",
        f"local RUN_HEAD = '{run_head()}'",
    ]
    return "\n".join(lines) + "\n"


def run_head() -> str:
    """A Lua pattern for the first fields of a stored run, as ``Run.to_json`` writes them (in the struct's
    order, with their stored names, the id left out) up to ``version``, capturing the status and the
    version: a transition reads those two with one anchored match in the record's first ~100 bytes, where
    decoding the whole record cost ~12 us of Redis's time a change (transition.lua).

    Every field up to ``version`` is required, so it is always written. A JSON string cannot hold an
    unescaped ``"``, so a string's lazy ``.-`` ends only at the next field's name, never inside a value.
    A record that does not match (written with the long names, or before a field moved) is decoded whole,
    so the pattern is a shortcut, never the only reader."""
    pieces = []
    for field in msgspec.structs.fields(records.Run)[1:]:  # the id is not stored (the key names it)
        if field.required is False:
            raise ValueError(f"Run.{field.name} has a default: the stored head may leave it out")
        name = records.STORED_NAMES.get(field.name, field.name)
        if field.name == "status":
            value = '"([^"]*)"'
        elif field.name == "version":
            value = "(%d+)"
        elif field.type is str:
            value = '".-"'
        elif field.type is int:
            value = "%-?%d+"
        else:
            raise ValueError(f"Run.{field.name}: no pattern for {field.type!r}")
        pieces.append(f'"{name}":{value}')
        if field.name == "version":
            return "^{" + ",".join(pieces) + "[,}]"
    raise ValueError("Run has no version field")


SHEBANG = "#!lua"
# A script that changes nothing says so on its first line, and Redis then refuses it any write. It is called
# as EVALSHA_RO (``base.read_only``): a read, with no WAIT behind it in the durable mode
# (``connection._NO_WAIT``; behind an EVALSHA the WAIT would wait out the replicas).
READ_ONLY = SHEBANG + " flags=no-writes"


def _lines(name: str) -> tuple[str, str]:
    """A file of lua/ as its ``#!lua`` line (each file has one) and the rest."""
    text = (_LUA / f"{name}.lua").read_text()
    first, _, rest = text.partition("\n")
    return (first.strip(), rest) if first.split(" ", 1)[0] == SHEBANG else (SHEBANG, text)


def _body(name: str) -> str:
    """A file of lua/ without its ``#!lua`` line (the assembled script has one, first)."""
    return _lines(name)[1]


def shebang(name: str) -> str:
    """The first line of the script ``name``: its file's own (``READ_ONLY`` for a read), or ``#!lua`` for
    one assembled from others (a batch)."""
    return _lines(name)[0] if (_LUA / f"{name}.lua").is_file() else SHEBANG


def source(name: str) -> str:
    """The full text sent to Redis for the script ``lua/{name}.lua``."""
    parts = [shebang(name), status_prelude()]
    one = BATCHED.get(name)
    if name in _SHARED or one in _SHARED:
        defaults = ", ".join(f"'{t}'" for t in domain.DEFAULT_EVENT_TYPES)
        parts.append(f"local DEFAULT_TYPES = {{{defaults}}}\nlocal EVENT_TEST = '{domain.EVENT_TEST}'")
        parts.append(_body("_fanout"))
    if name in _LIMITED or one in _LIMITED:
        parts.append(_body("_gcra"))
    if one is not None:
        # Its parameters shadow the script's own KEYS and ARGV; its top-level return ends the function.
        parts.append(f"local function one(KEYS, ARGV)\n{_body(one)}\nend\n{_body('_batch')}")
        return "\n".join(parts)
    if name == "submit_run":
        # A submit's two steps, each a function of its own KEYS and ARGV (its top-level return ends it).
        for step in ("accept_run", "create_run"):
            parts.append(f"local function {step}(KEYS, ARGV)\n{_body(step)}\nend")
    parts.append(_body(name))
    return "\n".join(parts)


class Scripts:
    """One registered script per state change. After a Redis restart or failover (NOSCRIPT) a script called
    alone is loaded again by redis-py, one called in a batch by ``base.scripts_in_turn``."""

    def __init__(self, redis: Redis) -> None:
        def load(name: str) -> AsyncScript:
            return redis.register_script(source(name))

        self.accept_run = load("accept_run")
        self.create_run = load("create_run")
        self.submit_run = load("submit_run")
        self.transition = load("transition")
        self.transitions = load("transitions")
        self.fanout_deliveries = load("fanout_deliveries")
        self.relay_feed = load("relay_feed")
        self.relay_done = load("relay_done")
        self.relay_feeds = load("relay_feeds")
        self.relays_done = load("relays_done")
        self.pending_done = load("pending_done")
        self.claims = load("claims")  # claim_runs.lua, only ever called batched
        self.budget = load("budget")
        self.budget_batch = load("budget_batch")
        self.pause = load("pause")
        self.claim_deliveries = load("claim_deliveries")
        self.due_heads = load("due_heads")
        self.delivery_result = load("delivery_result")
        self.unpark = load("unpark")
        self.retry_delivery = load("retry_delivery")
        self.repair = load("repair")
        self.reseal_secret = load("reseal_secret")
        self.release = load("release")
        self.rate_limit = load("rate_limit")
        self.create_subscription = load("create_subscription")
        self.widen_sub_types = load("widen_sub_types")
