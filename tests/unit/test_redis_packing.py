"""Commands packed by hiredis (``service/store/connection.py``): the same bytes redis-py's own Python
packer writes, the same error for what it refuses, on every kind of connection ``connect`` makes."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.exceptions import DataError

from service.store.connection import _Hiredis, connect
from service.vendors.registry import load_settings
from tests.conftest import base_env

COMMANDS: list[tuple[Any, ...]] = [
    ("PING",),
    ("SET", "hb:run:run_1", '{"id":"run_1","metadata":{"ü":"😀"}}', "PX", 60_000),
    ("EVALSHA", "a" * 40, 2, "k1", "k2", b"\x00\xff\r\n", 0.1, 1e-7, 2.5e20, -0.0, float("inf"), 10**30, -5),
    ("CLIENT SETNAME", "hookbridge"),  # a command of two words, split as redis-py splits it
    (b"CONFIG GET", b"maxmemory"),
    ("SET", "k", memoryview(b"view")),
    ("SET", "k", "x" * 100_000),  # past redis-py's buffer cutoff, where it chunks
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_the_bytes_are_redis_pys_own(command: tuple[Any, ...]) -> None:
    plain = Connection()
    packing = type("Packing", (_Hiredis, Connection), {})()
    assert b"".join(packing.pack_command(*command)) == b"".join(plain.pack_command(*command))


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_what_redis_py_refuses_is_still_its_data_error(value: Any) -> None:
    packing = type("Packing", (_Hiredis, Connection), {})()
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", value)
    with pytest.raises(DataError):
        packing.pack_command("SET", "k", value)


@pytest.mark.parametrize(
    ("env", "base"),
    [
        ({"HOOKBRIDGE_REDIS_URL": "redis://127.0.0.1:9/0"}, Connection),
        ({"HOOKBRIDGE_REDIS_URL": "rediss://127.0.0.1:9/0"}, SSLConnection),
        ({"HOOKBRIDGE_REDIS_URL": "unix:///tmp/none.sock"}, UnixDomainSocketConnection),
        ({"HOOKBRIDGE_REDIS_SENTINELS": "127.0.0.1:9"}, SentinelManagedConnection),
    ],
)
async def test_every_connection_connect_makes_packs_with_hiredis(env: dict[str, str], base: type) -> None:
    # One Redis address at a time (contract section 10): the case's own replaces base_env's URL.
    common = {k: v for k, v in base_env("redis://127.0.0.1:9/0").items() if k != "HOOKBRIDGE_REDIS_URL"}
    settings = load_settings({**common, **env})
    for for_arq in (False, True):
        client = connect(settings, for_arq=for_arq)
        try:
            cls = client.connection_pool.connection_class
            assert issubclass(cls, _Hiredis) and issubclass(cls, base), cls.__mro__
        finally:
            await client.aclose()
