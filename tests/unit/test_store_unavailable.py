"""What the API answers for each way the store can fail (contract section 10: during a failover 503 with
Retry-After, never a 500), as a table over redis-py's exceptions, the cluster client's included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from redis import exceptions as e
from redis.asyncio.connection import Connection
from starlette.requests import Request

from service.api.app import _error, _redis_down
from service.store.connection import ReplicasBehind


def _cluster_unreachable() -> e.RedisClusterException:
    try:
        try:
            raise e.ConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused.")
        except e.ConnectionError as cause:
            raise e.RedisClusterException("Redis Cluster cannot be connected.") from cause
    except e.RedisClusterException as exc:
        return exc


UNAVAILABLE = [
    e.ConnectionError("Connection refused"),
    e.TimeoutError("Timeout reading from 127.0.0.1:7000"),
    e.BusyLoadingError("LOADING"),
    e.MaxConnectionsError("Too many connections"),
    e.ReadOnlyError("READONLY You can't write against a read only replica."),
    e.ClusterDownError("CLUSTERDOWN The cluster is down"),
    e.MasterDownError("MASTERDOWN Link with MASTER is down"),
    e.ClusterError("TTL exhausted."),  # MOVED / ASK past the client's redirections
    e.TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    e.MovedError("3999 127.0.0.1:7002"),  # left in a pipeline's replies
    e.AskError("3999 127.0.0.1:7002"),
    e.SlotNotCoveredError('Slot "3999" is not covered by the cluster.'),
    _cluster_unreachable(),
    ReplicasBehind(0, 1),
    OSError("Network is unreachable"),
]
OURS = [
    e.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    e.ClusterCrossSlotError("CROSSSLOT Keys in request don't hash to the same slot"),
    e.RedisClusterException("No way to dispatch this command to Redis Cluster. Missing key."),
    e.NoScriptError("NOSCRIPT"),
    e.DataError("Invalid input of type: 'dict'."),
]


async def _write_on_a_torn_down_connection() -> Exception:
    """What redis-py 5.3's asyncio connection raises when a failover tore it down under a request (its
    writer gone): AttributeError from inside redis-py, not a ConnectionError (redis/redis-py#4287)."""
    connection = Connection()
    try:
        await connection._send_packed_command([b"PING"])  # never connected: no writer, as after a teardown
    except AttributeError as exc:
        return exc
    raise AssertionError("redis-py wrote on a connection without a writer")


async def test_a_write_on_a_connection_torn_down_in_a_failover_is_503() -> None:
    exc = await _write_on_a_torn_down_connection()
    assert _redis_down(exc)
    assert (await _error(_request(), exc)).status_code == 503


def test_an_attribute_error_of_our_own_stays_a_500() -> None:
    writer: Any = None
    try:
        writer.writelines([b"PING"])  # the same error, raised outside redis-py
    except AttributeError as exc:
        assert not _redis_down(exc)
    else:
        raise AssertionError("no AttributeError")


@pytest.mark.parametrize("exc", UNAVAILABLE, ids=lambda x: type(x).__name__)
async def test_the_store_unavailable_is_503_with_retry_after(exc: Exception) -> None:
    assert _redis_down(exc)
    response = await _error(_request(), exc)
    assert response.status_code == 503 and int(response.headers["retry-after"]) >= 1
    body = json.loads(bytes(response.body))
    assert body["code"] == "unavailable"
    assert "127.0.0.1" not in body["detail"]  # no address of the store in an error body


@pytest.mark.parametrize("exc", OURS, ids=lambda x: type(x).__name__)
async def test_a_fault_of_ours_stays_a_500(exc: Exception) -> None:
    assert not _redis_down(exc)
    assert (await _error(_request(), exc)).status_code == 500


async def test_replicas_behind_says_the_write_may_exist() -> None:
    body = json.loads(bytes((await _error(_request(), ReplicasBehind(0, 1))).body))
    assert "may exist" in body["detail"] and "Idempotency-Key" in body["detail"]


def _request() -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/runs", "headers": [], "query_string": b""})
