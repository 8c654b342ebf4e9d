"""The Lua scripts behind every atomic state change, loaded once per Redis client.

Each script is sent as ``keys.lua_prelude()`` (the key builders, generated from keys.py), then, for
the scripts that emit events, the event defaults from domain.py and ``_fanout.lua``, for those that apply
a client's rate ``_gcra.lua``, then its own file; ``transitions`` holds ``transition.lua`` as a function
that it applies to each run of a batch. No script spells a key name."""

from __future__ import annotations

from importlib.resources import files

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from service import domain
from service.store import keys

_LUA = files("service.store") / "lua"
_SHARED = ("transition", "transitions", "emit")
_LIMITED = ("create_run", "rate_limit")  # the scripts that apply a client's rate (_gcra.lua)


def source(name: str) -> str:
    """The full text sent to Redis for the script ``lua/{name}.lua``."""
    parts = [keys.lua_prelude()]
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
