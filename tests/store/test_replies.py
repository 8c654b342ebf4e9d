"""Replies read through hookbridge's connections (``connection._Hiredis``) against a real redis-server:
reply for reply what redis-py's own read gives, errors included, and a timer only for a reply not yet read
off the socket (redis-py sets one for every reply; a pipeline's arrive together). And commands written
without ``asyncio.wait_for`` when the socket takes them whole, under the socket timeout when it does not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio.connection as redis_connection
from redis.asyncio import Redis
from redis.exceptions import InvalidResponse, ResponseError, TimeoutError

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


async def test_a_command_the_socket_takes_whole_is_written_without_a_task_of_its_own(
    clients: tuple[Redis, Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py writes every command inside ``asyncio.wait_for`` (on Python 3.11 a Task and a timer);
    ours writes one the socket takes whole at once, and the replies are the same."""
    waits: list[float | None] = []
    real = asyncio.wait_for

    def counted(awaitable: Any, timeout: float | None) -> Any:
        waits.append(timeout)
        return real(awaitable, timeout)

    monkeypatch.setattr(asyncio, "wait_for", counted)
    ours, plain = clients
    await ours.ping()
    await plain.ping()
    waits.clear()
    for n in range(10):
        await plain.set(K + f"w{n}", n)
    assert [await plain.get(K + f"w{n}") for n in range(10)] == [str(n).encode() for n in range(10)]
    assert len(waits) == 20
    expected = await _replies(plain, COMMANDS)
    waits.clear()
    for n in range(10):
        await ours.set(K + f"w{n}", n * 2)
    assert [await ours.get(K + f"w{n}") for n in range(10)] == [str(n * 2).encode() for n in range(10)]
    assert await _replies(ours, COMMANDS) == expected  # a pipeline of 200 kB, past one socket write
    assert waits == []
    await ours.delete(*(K + f"w{n}" for n in range(10)))


async def test_a_write_the_server_does_not_take_times_out_and_closes_the_connection() -> None:
    """A server that accepts and never reads (a Redis that hangs; no real one can be made to stop reading
    its sockets, hence a bare TCP listener): a command larger than the sockets' buffers cannot be written
    whole, so it waits for the buffer to drain under the socket timeout, then fails as redis-py's write
    fails: a TimeoutError, the connection closed."""
    accepted: list[asyncio.StreamWriter] = []

    async def hang(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    # No handshake to answer: no password, database 0, no CLIENT SETINFO.
    client = _with_hiredis(
        Redis(host="127.0.0.1", port=port, socket_timeout=0.3, lib_name=None, lib_version=None)
    )
    try:
        connection = await client.connection_pool.get_connection()
        try:
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="writing to socket"):
                await connection.send_command("SET", K + "huge", b"x" * 64 * 1024 * 1024)
            assert time.monotonic() - started < 10  # the timeout's doing, not the test's deadline
            assert not connection.is_connected
        finally:
            await client.connection_pool.release(connection)
    finally:
        await client.aclose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_connection_holding_bytes_nobody_asked_for_is_never_handed_out_with_them(
    clients: tuple[Redis, Redis],
) -> None:
    """The pool asks a connection whether it holds unread bytes before it hands it out (redis-py by a
    read under a zero timeout; ours by what this process already received): a reply left in hiredis's
    reader or in the stream's buffer, and a connection the server closed, are replaced, never read as
    the next command's reply."""
    ours, plain = clients
    await ours.set(K + "fresh", "fresh")
    for plant in ("reader", "stream"):
        connection = await ours.connection_pool.get_connection()
        if plant == "reader":
            connection._parser._reader.feed(b"$5\r\nstale\r\n")
        else:
            connection._parser._stream.feed_data(b"$5\r\nstale\r\n")
        assert await connection.can_read_destructive()
        await ours.connection_pool.release(connection)
        assert await ours.get(K + "fresh") == b"fresh", plant
    connection = await ours.connection_pool.get_connection()
    assert not await connection.can_read_destructive()  # a clean one: no timer, no read
    name = f"idle-{id(connection)}"
    await connection.send_command("CLIENT", "SETNAME", name)
    assert await connection.read_response() == b"OK"
    await ours.connection_pool.release(connection)
    clients_list = await plain.client_list()
    victim = next(c for c in clients_list if c["name"] == name)
    assert await plain.client_kill_filter(_id=victim["id"]) == 1

    async def closed() -> bool:
        stream = connection._parser._stream
        return stream is not None and stream.at_eof()

    deadline = asyncio.get_running_loop().time() + 5
    while not await closed():  # the end of stream reaches this process's stream
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    assert await ours.get(K + "fresh") == b"fresh"  # replaced, not failed: the client has no retries
    await ours.delete(K + "fresh")
