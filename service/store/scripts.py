"""The Lua scripts behind every atomic state change, loaded once per Redis client."""

from __future__ import annotations

from importlib.resources import files

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

_LUA = files("service.store") / "lua"
_SHARED = ("transition", "emit")


def _source(name: str) -> str:
    text = (_LUA / f"{name}.lua").read_text()
    if name in _SHARED:
        text = (_LUA / "_fanout.lua").read_text() + "\n" + text
    return text


class Scripts:
    """One registered script per state change; redis-py re-loads them after a Redis restart (NOSCRIPT)."""

    def __init__(self, redis: Redis) -> None:
        def load(name: str) -> AsyncScript:
            return redis.register_script(_source(name))

        self.create_run = load("create_run")
        self.transition = load("transition")
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
