"""Connecting to Redis by URL, through Sentinel or to a Redis Cluster, with retries on connection faults.

One place builds every Redis client of the process: the store's and arq's (``redis_class=ArqRedis``), so
that passwords, usernames and TLS reach both alike, for the master, the Sentinels and every cluster node.

A cluster client (``REDIS_CLUSTER_NODES``) is redis-py's ``RedisCluster``: it learns the slot map from the
seed nodes, sends each command to its key's primary and follows a failover (MOVED, a refused connection:
it re-reads the map). It is not a subclass of ``Redis`` but answers every command the store sends (each
names its key), so the store is typed against ``Redis`` and given either.

Every connection packs and reads through hiredis (:class:`_Hiredis`): commands packed in C, and a reply
already read off the socket taken without redis-py's timer for the read.

``WAIT`` (``REDIS_WAIT_REPLICAS``): :func:`connect` with ``durable=True`` gives a client whose every write
is followed by ``WAIT n timeout`` *on the same connection, in the same packet*. The traps this avoids:

- WAIT counts the replicas that acknowledged the last write *of its own connection*; on a connection that
  wrote nothing it returns at once, however far behind the replicas are. A pool hands out any of its
  connections, so a WAIT sent as a command of its own proves nothing.
- WAIT has no key: a cluster client would send it to a random node. Sent on the write's own socket, it
  reaches the primary that took the write (after any MOVED the write itself followed).
- WAIT cannot run inside a script: Redis refuses it ("This Redis command is not allowed from script"),
  Valkey answers at once (a script's writes reach the replicas only after it ends). It follows the
  script's EVALSHA instead, and covers everything the script wrote.

Fewer replicas than asked within the timeout raises :class:`ReplicasBehind` (the write is on the primary
and may survive or not): the API answers 503 with Retry-After, the worker backs off before announcing.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar, cast

import anyio
import hiredis
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff
from redis.commands.cluster import READ_COMMANDS
from redis.exceptions import AskError, ConnectionError, DataError, RedisError, ResponseError, TimeoutError

from service.config.settings import RedisAuth, Settings

R = TypeVar("R", bound=Redis)


def tls_options(auth: RedisAuth) -> dict[str, Any]:
    """redis-py's ssl_* keywords for a TLS connection under these settings."""
    # Strings: redis-py's asyncio SSL context ignores an ssl.VerifyMode here (and then fails on connect).
    options: dict[str, Any] = {"ssl_cert_reqs": "required" if auth.tls_verify else "none"}
    options["ssl_check_hostname"] = auth.tls_verify
    if auth.tls_ca_file:
        options["ssl_ca_certs"] = auth.tls_ca_file
    return options


def _credentials(username: str, password: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if username:
        options["username"] = username
    if password:
        options["password"] = password
    return options


class _Hiredis:
    """Packs a command with hiredis's packer (C), as redis-py's synchronous connections do when hiredis is
    installed; its asyncio connections pack in Python, which cost a worker's transition batch ~2.9 us a
    change against ~0.4 (docs/performance.md). The same bytes for every argument (str, bytes, int, float,
    memoryview); anything else is redis-py's ``DataError``, as before.

    And takes a reply that hiredis's reader already holds without a timer: redis-py sets one for every
    reply it reads (``socket_timeout``), ~4 us under uvloop (a timer handle made and cancelled), though a
    reply already read off the socket waits for nothing; a pipeline's replies arrive together, so all but
    the first are. A reply not there yet is read as redis-py reads it, its timer and all.

    And writes a command the socket takes whole without a timer: redis-py wraps every write in
    ``asyncio.wait_for`` (``socket_timeout``), which on Python 3.11 runs it as a Task of its own with a
    timer, though a write that leaves nothing in the transport's buffer has nothing to wait for. A write
    that does (a full socket buffer, TLS) waits for the buffer to drain under the socket timeout, as
    redis-py's does; a connection not connected, or due a health check, sends as redis-py sends."""

    _parser: Any
    _writer: asyncio.StreamWriter | None
    health_check_interval: float
    protocol: Any
    socket_timeout: float | None

    async def can_read_destructive(self) -> bool:
        """Whether the connection holds bytes nobody asked for (the pool asks before it hands one out, and
        reconnects one that does). redis-py's parser answers by a read under a zero timeout, a timer and a
        cancelled read on every command (~10 us). What this process has received is in hiredis's reader or
        in the stream's buffer: a connection with neither, and no end of stream or error, answers False at
        once; any other, redis-py's own check. Not seen: bytes still in the kernel's buffer, which that
        read would have taken in the same turn of the loop. They could only be a reply left unread by a
        read abandoned without closing its connection, and redis-py's read closes the connection whenever
        it fails or is cancelled; a server's close reaches the stream as its end
        (tests/store/test_replies.py)."""
        parser = self._parser
        reader = getattr(parser, "_reader", None)
        stream = getattr(parser, "_stream", None)
        if (
            reader is not None
            and isinstance(stream, asyncio.StreamReader)
            and getattr(parser, "_connected", False)
            and not reader.has_data()
            and not stream._buffer  # type: ignore[attr-defined]
            and not stream.at_eof()
            and stream.exception() is None
        ):
            return False
        return bool(await super().can_read_destructive())  # type: ignore[misc]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        writer = getattr(self, "_writer", None)
        if (
            writer is None
            or not isinstance(command, list)
            or self.health_check_interval
            or writer.transport.is_closing()
            or writer.transport.get_write_buffer_size()
        ):
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        try:
            writer.writelines(command)
            if writer.transport.get_write_buffer_size():
                async with asyncio.timeout(self.socket_timeout):
                    await writer.drain()
        except BaseException as exc:
            # What redis-py's send makes of a failed write: the connection closed, a timeout a
            # TimeoutError, a socket error a ConnectionError, anything else (a cancellation) as it is.
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            if isinstance(exc, asyncio.TimeoutError):
                raise TimeoutError("Timeout writing to socket") from None
            if isinstance(exc, OSError):
                raise ConnectionError(f"Error while writing to socket. {exc}.") from exc
            raise

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from None

    async def read_response(
        self,
        disable_decoding: bool = False,
        timeout: float | None = None,
        *,
        disconnect_on_error: bool = True,
        push_request: bool | None = False,
    ) -> Any:
        reader = getattr(self._parser, "_reader", None)  # hiredis's, in redis-py's hiredis parser
        if (
            reader is not None
            and getattr(self._parser, "_connected", False)
            and not self.health_check_interval  # redis-py sets the next health check on each read
            and self.protocol in (2, "2")
        ):
            try:
                response = reader.gets(False) if disable_decoding else reader.gets()
            except BaseException:  # a broken stream (InvalidResponse): closed, as redis-py's read closes it
                if disconnect_on_error:
                    await self.disconnect(nowait=True)  # type: ignore[attr-defined]
                raise
            if response is not NOT_ENOUGH_DATA:
                return await self._buffered(response, disconnect_on_error)
        return await super().read_response(  # type: ignore[misc]
            disable_decoding, timeout, disconnect_on_error=disconnect_on_error, push_request=push_request
        )

    async def _buffered(self, response: Any, disconnect_on_error: bool) -> Any:
        """What redis-py's read makes of a reply: an error reply raised, a broken stream a ConnectionError
        (the connection closed, as redis-py closes it on any failed read)."""
        broken = response if isinstance(response, ConnectionError) else None
        if isinstance(response, list) and response and isinstance(response[0], ConnectionError):
            broken = response[0]
        if broken is not None:
            if disconnect_on_error:
                await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise broken
        if isinstance(response, ResponseError):
            raise response from None
        return response


_HIREDIS: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _hiredis_class(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    if issubclass(cls, _Hiredis):
        return cls
    if cls not in _HIREDIS:
        _HIREDIS[cls] = type(f"Hiredis{cls.__name__}", (_Hiredis, cls), {})
    return _HIREDIS[cls]


def _with_hiredis(client: R) -> R:
    """``client`` with its pool's connections packing and reading through hiredis (:class:`_Hiredis`; the
    pool makes them lazily, so no connection exists yet): plain, TLS, Unix socket or Sentinel-managed
    alike."""
    pool = client.connection_pool
    pool.connection_class = _hiredis_class(pool.connection_class)
    return client


class ReplicasBehind(RedisError):
    """Fewer replicas than ``REDIS_WAIT_REPLICAS`` acknowledged a write within ``REDIS_WAIT_TIMEOUT_MS``.

    The write is on the primary (and may reach the replicas later, or be lost with the primary). Not a
    ``ConnectionError``: redis-py retries those, and a retried write would run twice."""

    def __init__(self, acked: int, wanted: int) -> None:
        super().__init__(f"WAIT: {acked} of {wanted} replicas acknowledged the write in time")
        self.acked = acked
        self.wanted = wanted


# Commands that change no data: no WAIT after them. READ_COMMANDS is redis-py's list of the plain reads;
# the others are the reads it leaves out and the connection's own chatter.
_NO_WAIT = READ_COMMANDS | {
    "ASKING", "AUTH", "CLIENT", "CLUSTER", "COMMAND", "DISCARD", "ECHO", "EXEC", "HELLO", "HSCAN", "INFO",
    "MULTI", "PING", "READONLY", "READWRITE", "ROLE", "SCAN", "SCRIPT", "SELECT", "SSCAN", "TIME",
    "UNWATCH", "WAIT", "WATCH", "XRANGE", "XREVRANGE", "ZRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYSCORE",
    "ZSCAN",
}  # fmt: skip


def _writes(name: Any) -> bool:
    if isinstance(name, bytes | memoryview):
        name = bytes(name).decode("ascii", "replace")
    return str(name).split(" ", 1)[0].upper() not in _NO_WAIT


class _Packed(list[bytes]):
    """A packed command with WAIT behind it: how many replies come before the WAIT's."""

    replies_before_wait = 0


class _Waiting:
    """Sends ``WAIT replicas timeout`` right behind every write on this connection (one packet), reads its
    reply right after the write's, and raises :class:`ReplicasBehind` when too few replicas acknowledged.

    A pipeline (``pack_commands``: a MULTI/EXEC or a plain batch) gets one WAIT behind its last command,
    which covers every write before it on this connection. The count of replies to read before the WAIT's
    travels with the packed bytes and is armed only once they are sent: a cluster node packs a command
    before its connection connects, and the handshake's own replies (HELLO, AUTH) must not count. It is
    reset when the connection drops, so a broken read never leaves a stray WAIT reply for the next
    command."""

    wait_replicas: int
    wait_timeout_ms: int
    _replies_before_wait = 0
    _batching = False

    def _with_wait(self, packed: list[bytes], replies: int) -> _Packed:
        out = _Packed([*packed, *super().pack_command("WAIT", self.wait_replicas, self.wait_timeout_ms)])  # type: ignore[misc]
        out.replies_before_wait = replies
        return out

    def pack_command(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
        if not self._batching and _writes(args[0]):
            return self._with_wait(packed, 1)
        return packed

    def pack_commands(self, commands: Any) -> list[bytes]:
        commands = [tuple(c) for c in commands]
        self._batching = True
        try:
            packed: list[bytes] = super().pack_commands(commands)  # type: ignore[misc]
        finally:
            self._batching = False
        if any(_writes(c[0]) for c in commands):
            return self._with_wait(packed, len(commands))
        return packed

    async def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> None:
        await super().send_packed_command(command, *args, **kwargs)  # type: ignore[misc]
        if isinstance(command, _Packed):
            self._replies_before_wait = command.replies_before_wait

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if not self._replies_before_wait:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        self._replies_before_wait -= 1
        try:
            reply = await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError:
            if not self._replies_before_wait:
                await super().read_response()  # type: ignore[misc]  # the WAIT's, to stay in step
            raise
        if not self._replies_before_wait:
            acked = int(await super().read_response())  # type: ignore[misc]
            if acked < self.wait_replicas:
                raise ReplicasBehind(acked, self.wait_replicas)
        return reply

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._replies_before_wait = 0
        await super().disconnect(*args, **kwargs)  # type: ignore[misc]


def _waiting_class(cls: type[AbstractConnection], replicas: int, timeout_ms: int) -> type[AbstractConnection]:
    attrs = {"wait_replicas": replicas, "wait_timeout_ms": timeout_ms}
    return type(f"Waiting{cls.__name__}", (_Waiting, cls), attrs)


class _SentinelPool(SentinelConnectionPool):
    """Closes the Sentinel clients with the pool: the client is the only owner of its Sentinel (which
    redis-py leaves open, one connection per Sentinel, when the master client is closed)."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        for sentinel in self.sentinel_manager.sentinels:
            await sentinel.aclose()


def connect(
    settings: Settings,
    *,
    url: str | None = None,
    redis_class: type[R] = Redis,  # type: ignore[assignment]
    for_arq: bool = False,
    durable: bool = False,
) -> R:
    """A client that retries a command a few times on connection faults, then raises.

    Beyond those retries the caller decides: the API answers 503, the worker backs off.

    ``for_arq``: the connection options arq gives its own pool (no socket timeout, no retries; arq's loop
    is restarted from outside on a Redis error), with the same credentials, TLS and Sentinel. arq's tasks
    are cancelled from outside, and redis-py wraps each read in a timeout scope in which, on Python 3.11,
    a cancellation can be swallowed: with a socket timeout the worker's exit waited forever on arq. On a
    cluster arq is given a plain connection to one node instead (``worker/queue.py``), never this.

    ``durable``: every write waits for ``REDIS_WAIT_REPLICAS`` replicas (the module's docstring); with 0
    asked, the plain client.
    """
    auth = settings.redis
    options: dict[str, Any] = {
        "socket_connect_timeout": 2.0,
        **_credentials(auth.username, auth.password),
    }
    if not for_arq:
        options |= {
            "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
            "retry_on_error": [ConnectionError, TimeoutError],
            "socket_timeout": 10.0,
            # No health_check_interval: with it, redis-py retries a refused AUTH (NOAUTH is a
            # ConnectionError) inside its own health check without end (a wrong or missing password hung
            # every command). The retries above reconnect a connection that went stale while idle.
            "max_connections": 200,
        }
    wait = settings.redis_wait_replicas if durable else 0
    if wait:
        # A read of WAIT's reply must outlast WAIT's own timeout.
        options["socket_timeout"] = max(10.0, settings.redis_wait_timeout_ms / 1000 + 5.0)
    if settings.redis_cluster_nodes and url is None:
        if for_arq or redis_class is not Redis:
            raise ValueError("a cluster client is the store's; arq connects to one node (worker/queue.py)")
        return cast(R, _cluster(settings, options, wait))
    if settings.redis_sentinels and url is None:
        sentinel_options: dict[str, Any] = {
            "socket_connect_timeout": 2.0,
            "socket_timeout": None if for_arq else 5.0,
            **_credentials(auth.sentinel_username, auth.sentinel_password),
        }
        if auth.sentinel_tls:
            sentinel_options |= {"ssl": True, **tls_options(auth)}
        if auth.tls:
            options |= {"ssl": True, **tls_options(auth)}
        sentinel = Sentinel(list(settings.redis_sentinels), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
        client: R = sentinel.master_for(
            settings.redis_sentinel_master,
            redis_class=redis_class,
            connection_pool_class=_SentinelPool,
            **options,
        )
        return _finish(client, settings, wait)
    target = url or settings.redis_url
    if not target:
        raise ValueError("no Redis URL")
    if target.startswith("rediss://"):  # a URL says TLS by its scheme; REDIS_TLS is for Sentinel's master
        options |= tls_options(auth)
    client = redis_class.from_url(target, **options)
    return _finish(client, settings, wait)


def _finish(client: R, settings: Settings, wait: int) -> R:
    client = _with_hiredis(client)
    if wait:
        pool = client.connection_pool
        pool.connection_class = _waiting_class(pool.connection_class, wait, settings.redis_wait_timeout_ms)
    return client


CLUSTER_SOCKET_TIMEOUT_S = 5.0
CLUSTER_ATTEMPTS = 3


def _cluster(settings: Settings, options: dict[str, Any], wait: int) -> RedisCluster:
    """A ``RedisCluster`` over the seed nodes, with the credentials and TLS (``REDIS_TLS``) on every node.

    redis-py takes no connection class for a cluster: it is set on the nodes' shared connection options
    (the nodes it discovers are made from them) and on the seeds made already."""
    auth = settings.redis
    if auth.tls:
        options |= {"ssl": True, **tls_options(auth)}
    # How long a command may hang before the API answers 503: a node that stops answering (hung, or cut
    # off) is given CLUSTER_SOCKET_TIMEOUT_S per attempt, and the attempts are few. A timeout is not
    # retried on the same node (it would hang as long again); the cluster client re-reads the slot map
    # and tries CLUSTER_ATTEMPTS times in all. A refused connection (a dead process) fails at once and
    # is retried on the node twice, then the same way. Worst case: about
    # CLUSTER_ATTEMPTS * CLUSTER_SOCKET_TIMEOUT_S, measured in tests/integration/test_cluster_api_failover.py.
    if not wait:
        options["socket_timeout"] = CLUSTER_SOCKET_TIMEOUT_S
    options["retry"] = Retry(
        ExponentialBackoff(cap=0.5, base=0.05), retries=2, supported_errors=(ConnectionError,)
    )
    options["retry_on_error"] = [ConnectionError]
    client: RedisCluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in settings.redis_cluster_nodes],
        # A failover re-reads the slot map at once rather than after 5 MOVED replies.
        reinitialize_steps=1,
        cluster_error_retry_attempts=CLUSTER_ATTEMPTS - 1,
        **options,
    )
    cls = _hiredis_class(client.connection_kwargs["connection_class"])
    if wait:
        cls = _waiting_class(cls, wait, settings.redis_wait_timeout_ms)
    client.connection_kwargs["connection_class"] = cls
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = cls  # type: ignore[assignment]
    return client


async def replicas_short(client: Redis, wanted: int) -> list[str]:
    """The primaries (``host:port``) with fewer than ``wanted`` replicas online: every primary of a
    cluster, or the one master of a URL or of Sentinel. Empty when ``wanted`` is 0."""
    if not wanted:
        return []
    if isinstance(client, RedisCluster):
        found = await client.info("replication", target_nodes=RedisCluster.PRIMARIES)
        infos = found if isinstance(found, dict) and all(isinstance(v, dict) for v in found.values()) else {}
        if "role" in found:  # one primary: redis-py gives its INFO as it is
            infos = {"primary": found}
    else:
        infos = {"primary": await client.info("replication")}
    return [name for name, info in infos.items() if _online_replicas(info) < wanted]


def _online_replicas(info: dict[str, Any]) -> int:
    return sum(
        1
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


# A blocking read on a cluster that failed so may have gone to a primary that is no more (MovedError is an
# AskError).
_MAP_STALE = (ConnectionError, TimeoutError, AskError)


def pool_size(client: Redis) -> int:
    """How many connections ``client`` may open (per node, for a cluster)."""
    if isinstance(client, RedisCluster):
        return int(client.connection_kwargs["max_connections"])
    return int(client.connection_pool.max_connections)


def limit_pool(client: Redis, size: int) -> None:
    """At most ``size`` connections (per node, for a cluster: the nodes it learns later are made from
    the shared options, the seeds exist already)."""
    if isinstance(client, RedisCluster):
        client.connection_kwargs["max_connections"] = size
        for node in client.nodes_manager.startup_nodes.values():
            node.max_connections = size
    else:
        client.connection_pool.max_connections = size


async def blocking_read(client: Redis, key: str, *command: Any, timeout_s: float) -> Any:
    """Sends ``command`` (a blocking read of ``key``: ``XREAD ... BLOCK``) on a connection of its own and
    returns its reply, on the node that owns ``key`` for a cluster; ``timeout_s`` bounds the wait for the
    reply (more than the command blocks for).

    The connection is taken and given back by hand, not through ``execute_command``: a reader that hangs
    up cancels the read mid-reply, and its connection, in no known state, is then closed (shielded from
    that cancellation) rather than handed to the next reader. On a cluster a connection fault or a MOVED
    also drops the client's slot map, which is read again at the next call (as redis-py's own commands
    do after a failover)."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        node = client.get_node_from_key(key)
        conn = node.acquire_connection()

        async def release() -> None:
            node._free.append(conn)  # redis-py has no public release for a node's connection

    else:
        pool = client.connection_pool
        conn = await pool.get_connection()

        async def release() -> None:
            await pool.release(conn)

    try:
        await conn.send_command(*command)
        return await conn.read_response(timeout=timeout_s)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await conn.disconnect()
            if isinstance(client, RedisCluster) and isinstance(exc, _MAP_STALE):
                await client.aclose()  # the map is read again before the next command
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await release()
