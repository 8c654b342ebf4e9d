"""The Lua scripts behind every atomic state change, loaded once per Redis client.

Each script is sent as ``keys.lua_prelude()`` (the key builders, generated from keys.py) and
``status_prelude()`` (the statuses and outcomes, generated from domain.py), then, for
the scripts that emit events, the event defaults from domain.py and ``_fanout.lua``, for those that apply
a client's rate ``_gcra.lua``, then its own file; ``transitions`` holds ``transition.lua`` as a function
that it applies to each run of a batch. No script spells a key name or a status."""

from __future__ import annotations

from importlib.resources import files

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from service import domain, records
from service.store import keys

_LUA = files("service.store") / "lua"
_SHARED = ("transition", "transitions", "emit")
_LIMITED = ("create_run", "rate_limit", "read_feed")  # the scripts that apply a client's rate (_gcra.lua)


def _lua_table(entries: dict[str, str | bool]) -> str:
    def value(v: str | bool) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else f"'{v}'"

    return "{" + ", ".join(f"{k} = {value(v)}" for k, v in entries.items()) + "}"


_FINAL = domain.ATTEMPT_FINAL_STATUS


def status_prelude() -> str:
    """The statuses and outcomes of :mod:`service.domain` as Lua tables, so no script spells one:
    ``RUN.QUEUED``, ``TERMINAL[status]``, ``DLV.PENDING``, ``OUTCOME.RETRY``, ``FINAL_STATUS[outcome]``;
    and the delivery hash's field names (``DF.status``), from records.DELIVERY_HASH.
    Tables rather than one local each: a script's functions reach them as a few upvalues."""
    lines = [
        "-- Generated from service/domain.py by status_prelude(); the scripts spell no status.",
        f"local RUN = {_lua_table({s.name: s.value for s in domain.RunStatus})}",
        f"local TERMINAL = {_lua_table({s.value: True for s in domain.TERMINAL})}",
        f"local DLV = {_lua_table({s.name: s.value for s in domain.DeliveryStatus})}",
        f"local OUTCOME = {_lua_table({o.name: o.value for o in domain.AttemptOutcome})}",
        f"local FINAL_STATUS = {_lua_table({o.value: s.value for o, s in _FINAL.items()})}",
        "-- The delivery hash's fields, from service/records.py's DELIVERY_HASH: DF.<record field>.",
        f"local DF = {_lua_table({**records.DELIVERY_HASH, **records.DELIVERY_HASH_INTERNAL})}",
    ]
    return "\n".join(lines) + "\n"


def source(name: str) -> str:
    """The full text sent to Redis for the script ``lua/{name}.lua``."""
    parts = [keys.lua_prelude(), status_prelude()]
    if name in _SHARED:
        defaults = ", ".join(f"'{t}'" for t in domain.DEFAULT_EVENT_TYPES)
        parts.append(f"local DEFAULT_TYPES = {{{defaults}}}\nlocal EVENT_TEST = '{domain.EVENT_TEST}'")
        parts.append((_LUA / "_fanout.lua").read_text())
    if name in _LIMITED:
        parts.append((_LUA / "_gcra.lua").read_text())
    if name == "transitions":
        # Its parameters shadow the script's own KEYS and ARGV; its top-level return ends the function.
        one = (_LUA / "transition.lua").read_text()
        parts.append(f"local function transition(KEYS, ARGV)\n{one}\nend")
    parts.append((_LUA / f"{name}.lua").read_text())
    return "\n".join(parts)


class Scripts:
    """One registered script per state change; redis-py re-loads them after a Redis restart (NOSCRIPT)."""

    def __init__(self, redis: Redis) -> None:
        def load(name: str) -> AsyncScript:
            return redis.register_script(source(name))

        self.create_run = load("create_run")
        self.transition = load("transition")
        self.transitions = load("transitions")
        self.emit = load("emit")
        self.claim_runs = load("claim_runs")
        self.budget = load("budget")
        self.pause = load("pause")
        self.claim_deliveries = load("claim_deliveries")
        self.delivery_result = load("delivery_result")
        self.retry_delivery = load("retry_delivery")
        self.repair = load("repair")
        self.reseal_secret = load("reseal_secret")
        self.release = load("release")
        self.rate_limit = load("rate_limit")
        self.create_subscription = load("create_subscription")
