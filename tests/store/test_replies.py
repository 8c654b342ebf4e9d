"""Replies read through hookbridge's connections (``connection._Hiredis``) against a real redis-server:
reply for reply what redis-py's own read gives, errors included, and a timer only for a reply not yet read
off the socket (redis-py sets one for every reply; a pipeline's arrive together)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio.connection as redis_connection
from redis.asyncio import Redis
from redis.exceptions import InvalidResponse, ResponseError

from service.store import keys
from service.store.connection import _with_hiredis

# Under the store's own tag: on the tests' cluster, redis_url is the primary that holds it.
K = f"{keys.PREFIX}replies:"

COMMANDS: list[tuple[Any, ...]] = [
    ("SET", K + "s", "v"),
    ("GET", K + "s"),
    ("GET", K + "missing"),
    ("INCR", K + "s"),  # an error reply in the middle of the pipeline
    ("RPUSH", K + "l", "a", b"b\r\n\x00", ""),
    ("LRANGE", K + "l", 0, -1),
    ("HGETALL", K + "missing"),
    ("ZADD", K + "z", 1.5, "m", 2, "n"),
    ("ZRANGE", K + "z", 0, -1, "WITHSCORES"),
    ("EVAL", "return {1, {2, 'x', {}}, false, redis.status_reply('OK')}", 0),
    ("EVAL", "return redis.error_reply('ERR from a script')", 0),
    ("SET", K + "big", "x" * 200_000),  # past one socket read
    ("GET", K + "big"),
    ("DEL", K + "s", K + "l", K + "z", K + "big"),
]


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[Redis, Redis]]:
    ours, plain = (
        _with_hiredis(Redis.from_url(redis_url, socket_timeout=5)),
        Redis.from_url(redis_url, socket_timeout=5),
    )
    try:
        yield ours, plain
    finally:
        await ours.aclose()
        await plain.aclose()


async def _replies(client: Redis, commands: list[tuple[Any, ...]]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    replies = await pipe.execute(raise_on_error=False)
    return [(type(r).__name__, str(r)) if isinstance(r, Exception) else r for r in replies]


async def test_a_pipelines_replies_are_redis_pys_own_errors_included(clients: tuple[Redis, Redis]) -> None:
    ours, plain = clients
    mine = await _replies(ours, COMMANDS)
    assert mine == await _replies(plain, COMMANDS)
    assert mine[3] == ("ResponseError", "value is not an integer or out of range")
    assert mine[10] == ("ResponseError", "from a script")
    assert mine[12] == b"x" * 200_000


async def test_a_command_alone_raises_its_error_reply_as_redis_py_does(clients: tuple[Redis, Redis]) -> None:
    ours, _ = clients
    await ours.set(K + "s", "v")
    with pytest.raises(ResponseError, match="not an integer"):
        await ours.incr(K + "s")
    assert await ours.get(K + "s") == b"v"  # the connection still in step after the error
    await ours.delete(K + "s")


async def test_a_reply_already_read_off_the_socket_sets_no_timer(
    clients: tuple[Redis, Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hundred GETs in one pipeline: redis-py sets a timer for each reply; ours only while waiting."""
    timers: list[float | None] = []
    real = redis_connection.async_timeout

    def counted(delay: float | None) -> Any:
        timers.append(delay)
        return real(delay)

    monkeypatch.setattr(redis_connection, "async_timeout", counted)
    ours, plain = clients
    await ours.ping()  # connected first: a connection's handshake has timers of its own
    await plain.ping()
    gets = [("GET", K + f"n{n}") for n in range(100)]
    timers.clear()
    await _replies(plain, gets)
    assert len(timers) == 100
    timers.clear()
    assert await _replies(ours, gets) == [None] * 100
    assert 1 <= len(timers) <= 5  # the first reply waited; the rest came with it


async def test_a_broken_stream_already_read_closes_the_connection_as_redis_py_does(
    clients: tuple[Redis, Redis],
) -> None:
    """Bytes that are no reply, already in the reader (the fast path reads them without a timer): the
    error redis-py's read raises, and the connection closed, never handed out again with them."""
    for client in clients:
        connection = await client.connection_pool.get_connection()
        try:
            connection._parser._reader.feed(b"!not a reply\r\n")  # hiredis's reader, as the socket feeds it
            with pytest.raises(InvalidResponse):
                await connection.read_response()
            assert not connection.is_connected
        finally:
            await client.connection_pool.release(connection)
        assert await client.ping()  # the pool reconnects
