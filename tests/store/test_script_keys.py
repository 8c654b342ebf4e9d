"""Every script declares every key it touches (issue 25): each file of lua/ starts with ``#!lua``, so
that Redis and Valkey >= 7 hold the script to its declared keys on a cluster, and no script builds a key
name, from data it read (a zset member, a hash field) or from its arguments: no key builder, no key
prefix, no key constant. The Python callers build every key (keys.py) and pass it in KEYS."""

from __future__ import annotations

import re

from redis.asyncio import Redis

from service.store.scripts import _LUA, BATCHED, READ_ONLY, SHEBANG, shebang, source

_SCRIPTS = sorted(p for p in _LUA.iterdir() if p.name.endswith(".lua"))
# Each file but the shared parts, and the batches of one (_batch.lua around a file).
_REGISTERED = sorted(
    [p.name.removesuffix(".lua") for p in _SCRIPTS if not p.name.startswith("_")] + list(BATCHED)
)

# What building a key in Lua looks like: a builder call (the prelude's k_run(id), ...), the prefix spelt
# or concatenated, a key constant (K_DUE_DELIVERIES, ...).
_BUILT = [
    re.compile(r"\bk_[a-z_]+\s*\("),
    re.compile(r"""['"]hb:"""),
    re.compile(r"\bK_[A-Z_]+\b"),
]


def _code(text: str) -> str:
    """The file without its comments (a comment may name a key)."""
    return "\n".join(line.split("--")[0] for line in text.splitlines())


def test_there_are_scripts_to_check() -> None:
    assert len(_SCRIPTS) >= 15
    assert "transition" in _REGISTERED and "claim_deliveries" in _REGISTERED
    assert {"transitions", "relay_feeds", "relays_done"} <= set(_REGISTERED)
    assert {"accept_run", "create_run"} <= set(_REGISTERED)  # a submit's two steps (issue 26)


def test_every_script_file_starts_with_the_lua_shebang() -> None:
    for path in _SCRIPTS:
        assert path.read_text().splitlines()[0].strip() in (SHEBANG, READ_ONLY), path.name


def test_every_assembled_script_starts_with_its_files_shebang_and_has_only_one() -> None:
    for name in _REGISTERED:
        text = source(name)
        assert text.startswith(shebang(name) + "\n"), name
        assert text.count(SHEBANG) == 1, name
    # The look at every due set's head is the one read (called as EVALSHA_RO: base.read_only); the
    # batches, assembled from others, and the writes keep the plain shebang.
    assert [name for name in _REGISTERED if shebang(name) == READ_ONLY] == ["due_heads"]
    assert source("transitions").startswith(SHEBANG + "\n")


def test_no_script_builds_a_key() -> None:
    for path in _SCRIPTS:
        code = _code(path.read_text())
        for pattern in _BUILT:
            assert not pattern.search(code), f"{path.name}: {pattern.search(code)}"


def test_the_check_would_catch_a_key_built_from_data() -> None:
    built = "local d = redis.call('HGET', KEYS[1], 'sub')\nredis.call('ZADD', k_sub_parked(d), 1, 'x')"
    spelt = "redis.call('SADD', 'hb:' .. ARGV[1], 'x')"
    constant = "redis.call('SADD', K_ACTIVE_RUNS, ARGV[1])"
    for code in (built, spelt, constant):
        assert any(p.search(_code(code)) for p in _BUILT), code


async def test_every_script_loads_with_its_shebang(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        for name in _REGISTERED:
            assert len(await redis.script_load(source(name))) == 40, name
    finally:
        await redis.aclose()
