"""A primary and its replica, two real redis-servers on loopback, for the tests of WAIT and of /readyz's
replica check; and :func:`stopped`, which freezes a server (SIGSTOP) so that it acknowledges nothing
while its primary still counts it as connected, as a replica on a congested link would be."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import redis

from service.dev.embedded_redis import EmbeddedRedis


def command(port: int, *args: object) -> Any:
    with redis.Redis(port=port, socket_timeout=5) as client:
        return client.execute_command(*args)


@dataclass
class Pair:
    primary: EmbeddedRedis
    replica: EmbeddedRedis

    @classmethod
    @contextlib.contextmanager
    def started(cls) -> Iterator[Pair]:
        with EmbeddedRedis(appendonly=False) as primary, EmbeddedRedis(appendonly=False) as replica:
            pair = cls(primary, replica)
            pair.attach()
            yield pair

    def attach(self) -> None:
        """The replica follows the primary again (after :meth:`detach`), with its link up."""
        command(self.replica.port, "REPLICAOF", "127.0.0.1", self.primary.port)
        until(self.link_up, "the replica's link is up")

    def detach(self) -> None:
        """The replica stops following: its primary has no replica."""
        command(self.replica.port, "REPLICAOF", "NO", "ONE")
        until(lambda: command(self.primary.port, "INFO", "replication")["connected_slaves"] == 0, "detached")

    def link_up(self) -> bool:
        info = command(self.replica.port, "INFO", "replication")
        acked = command(self.primary.port, "INFO", "replication").get("slave0", {})
        return info.get("master_link_status") == "up" and acked.get("state") == "online"


def until(check: Callable[[], Any], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout_s}s")


@contextlib.contextmanager
def stopped(process: subprocess.Popen[bytes] | None) -> Iterator[None]:
    """``process`` frozen (SIGSTOP) for the block: it takes nothing and acknowledges nothing."""
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.pid, signal.SIGCONT)
