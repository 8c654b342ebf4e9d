"""What every aggregate of the store shares: the connection, the loaded scripts and the few settings the
scripts are given (retention), built once by the facade (``service/store/__init__.py``) and handed to
each aggregate, so that the five of them never load the scripts five times."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from service.config.settings import Settings
from service.core.records import Event
from service.store import bodies
from service.store.scripts import Scripts


class Part:
    """One aggregate's view of the store: the connection, the scripts, the settings it reads."""

    def __init__(self, redis: Redis, scripts: Scripts, settings: Settings) -> None:
        self.redis = redis
        self.scripts = scripts
        self.settings = settings
        self.retention_ms = int(settings.retention_s * 1000)

    async def hashes(self, names: Iterable[str]) -> list[Any]:
        """Every field of each hash, in one round trip (an empty reply for a hash that is gone)."""
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(name)
        return list(await pipe.execute())

    async def heads(self, names: Sequence[str]) -> list[float | None]:
        """Each sorted set's lowest score, None where it is empty (a due set's head: when its first member
        is due). On a Redis server one call of ``due_heads.lua`` for them all: a worker looks at every
        shard's head of its due sets once per ``WORKER_IDLE_S``, and a ZRANGE each cost an idle worker
        4 % of a core more (docs/performance.md, stop 54). On a cluster, whose slots one call cannot
        span, a ZRANGE each in one pipeline (the client sends each node its own)."""
        if isinstance(self.redis, RedisCluster):
            pipe = self.redis.pipeline(transaction=False)
            for name in names:
                pipe.zrange(name, 0, 0, withscores=True)
            return [float(head[0][1]) if head else None for head in await pipe.execute()]
        scores = await read_only(self.redis, self.scripts.due_heads, list(names))
        return [None if score is None else float(score) for score in scores]

    async def values(self, names: Iterable[str]) -> list[Any]:
        """Each string's value (None where it is gone), in one round trip: GETs, not one MGET, since the
        keys may lie in many shards (a cluster refuses an MGET across slots)."""
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        return list(await pipe.execute())


def stored_event(event: Event, argv: list[Any], run_id: str) -> dict[str, Any]:
    """The event as the scripts take it: no null fields (a Lua null is truthy), and its bodies in their
    stored form (``bodies.packed``: bytes) appended to ``argv``, the script's arguments, which it names by
    their positions there (1-based, as Lua's ``ARGV``: ``_fanout.lua``'s ``with_bodies``), packed against
    ``run_id``, the run that emits it (``bodies.RUN_MARKS``)."""
    out: dict[str, Any] = {"id": event.id, "type": event.type, "created": event.created}
    if event.vendor is not None:
        out["vendor"] = event.vendor
    argv.append(bodies.packed(event.body, run_id))
    out["body"] = len(argv)
    if event.feed is not None:
        argv.append(bodies.packed(event.feed, run_id))
        out["feed"] = len(argv)
    return out


async def read_only(redis: Redis, script: AsyncScript, keys: list[str]) -> Any:
    """A script declared ``#!lua flags=no-writes`` (``scripts.READ_ONLY``) called as EVALSHA_RO, which
    changes nothing and so has no WAIT sent behind it in the durable mode (redis-py's script object calls
    EVALSHA, which ``connection`` must take for a write). Loaded again and sent once more on ``NOSCRIPT``,
    as redis-py does for EVALSHA."""
    try:
        return await redis.evalsha_ro(script.sha, len(keys), *keys)  # type: ignore[misc]
    except NoScriptError:
        script.sha = await redis.script_load(script.script)
        return await redis.evalsha_ro(script.sha, len(keys), *keys)  # type: ignore[misc]


async def each_call(redis: Redis, script: AsyncScript, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
    """``script`` once per (keys, args): in one pipeline on a Redis server; on a cluster client, which
    refuses scripts in its pipelines, a few at a time (each call goes to its keys' node)."""
    return await scripts_in_turn(redis, [(script, ks, args) for ks, args in calls])


async def batched(redis: Redis, script: AsyncScript, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
    """Each (keys, args) of one script, through ``script``, its batch (:data:`scripts.BATCHED`): one call
    of it for the calls whose keys are in one slot on a cluster (their first key's hash tag: every key of a
    call shares it), one for them all on a Redis server (:func:`batch_groups`), all of them in one round
    trip (:func:`each_call`). Returns each call's reply in the calls' order;
    a call that raised in the script replies ``{'error', message}`` (the others still ran)."""
    groups = batch_groups([ks[0] for ks, _ in calls], by_slot=isinstance(redis, RedisCluster))
    batches: list[tuple[list[str], list[Any]]] = []
    for members in groups:
        ks_all: list[str] = []
        argv: list[Any] = []
        for i in members:
            ks, args = calls[i]
            ks_all += ks
            argv += [len(ks), len(args), *args]
        batches.append((ks_all, argv))
    out: list[Any] = [None] * len(calls)
    for members, replies in zip(groups, await each_call(redis, script, batches), strict=True):
        for i, reply in zip(members, replies, strict=True):
            out[i] = reply
    return out


def batch_groups(first_keys: Sequence[str], *, by_slot: bool) -> list[list[int]]:
    """Which calls of a batch go in one call of its script, by their places in the batch (each group in
    the calls' order): on a cluster (``by_slot``), those whose keys share a slot, known by their first
    key's hash tag; on one Redis server, which has no slots, all of them. At scale a batch's few changes
    spread over the shards, so one call per shard was a call per change on one server, each with the
    script's own cost in Redis (stop 51, bench/analysis.md)."""
    if not first_keys:
        return []
    if not by_slot:
        return [list(range(len(first_keys)))]
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(first_keys):
        groups.setdefault(_hash_tag(key), []).append(i)
    return list(groups.values())


def _hash_tag(key: str) -> str:
    """What of ``key`` a cluster hashes: the text between its first ``{`` and the next ``}``."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else key


def failed(reply: Any) -> str | None:
    """The message of a batched call's ``{'error', message}`` reply (None for any other reply)."""
    if isinstance(reply, list) and len(reply) == 2 and reply[0] in (b"error", "error"):
        message = reply[1]
        return message.decode() if isinstance(message, bytes) else str(message)
    return None


# Script calls as scripts_in_turn takes them: (script, keys, args).
Calls = list[tuple[AsyncScript, list[str], list[Any]]]


async def scripts_in_turn(redis: Redis, calls: Calls) -> list[Any]:
    """Each (script, keys, args), as :func:`each_call` sends them: on a Redis server in one pipeline, so
    in this order; on a cluster, at once (each to its keys' node), so in no order between slots."""
    if not isinstance(redis, RedisCluster):
        return await _pipelined(redis, calls)
    out: list[Any] = []
    for at in range(0, len(calls), 50):
        out += await asyncio.gather(*(script(keys=ks, args=args) for script, ks, args in calls[at : at + 50]))
    return out


async def _pipelined(redis: Redis, calls: Calls) -> list[Any]:
    """The calls as EVALSHAs in one pipeline: one round trip, where redis-py's pipeline asks ``SCRIPT
    EXISTS`` of its scripts first (two, for every batch of claims or transitions). A command refused with
    ``NOSCRIPT`` (the server's script cache was emptied: a restart, a failover, ``SCRIPT FLUSH``) ran
    nothing, so the scripts are loaded and the refused commands sent again as they were, in their order.
    Raises the first other error, as a pipeline does, once every call has run."""
    pipe = redis.pipeline(transaction=False)
    for script, ks, args in calls:
        await script(keys=ks, args=args, client=pipe)
    scripts: set[Any] = set(pipe.scripts)  # typed as the sync Script, though these are ours, AsyncScript
    pipe.scripts.clear()  # what Pipeline.execute would SCRIPT EXISTS first
    commands = list(pipe.command_stack)
    replies = list(await pipe.execute(raise_on_error=False))
    refused = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if refused:
        for script in scripts:
            await redis.script_load(script.script)  # its sha is the one it had: SHA-1 of its text
        again = redis.pipeline(transaction=False)
        for n in refused:
            command, options = commands[n]
            again.execute_command(*command, **options)
        for n, reply in zip(refused, await again.execute(raise_on_error=False), strict=True):
            replies[n] = reply
    if error := next((reply for reply in replies if isinstance(reply, Exception)), None):
        raise error
    return replies
