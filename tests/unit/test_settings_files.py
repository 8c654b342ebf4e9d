"""``HOOKBRIDGE_X_FILE``, ``hookbridge settings --effective`` and ``hookbridge --version``; the real
``hookbridge`` entry point exits 2 naming the variable on nonsense."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.config import settings as s
from service.vendors.registry import load_settings

HOOKBRIDGE = Path(sys.executable).parent / "hookbridge"


def _env(**extra: str) -> dict[str, str]:
    """The process environment without any HOOKBRIDGE_ variable of the caller's, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    return {**env, **extra}


def _run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HOOKBRIDGE), *args], env=_env(**extra), capture_output=True, text=True, timeout=60
    )


def test_a_setting_from_a_file(tmp_path: Path) -> None:
    keys = tmp_path / "api-keys"
    keys.write_text("alice:from-a-file\n")  # one trailing newline, as editors and `echo` leave it
    user = tmp_path / "user"
    user.write_text("svc\n\n")  # only one newline is stripped
    cfg = s.load(
        {"HOOKBRIDGE_API_KEYS_FILE": str(keys), "HOOKBRIDGE_REDIS_USERNAME_FILE": str(user)}, vendors={}
    )
    assert cfg.api_keys == (("alice", "from-a-file"),) and cfg.redis.username == "svc\n"
    lease = tmp_path / "lease"
    lease.write_text("nan\n")
    with pytest.raises(s.SettingsError, match=r"^HOOKBRIDGE_LEASE_S_FILE: "):
        s.load({"HOOKBRIDGE_LEASE_S_FILE": str(lease)}, vendors={})
    lease.write_text("42\n")
    assert s.load({"HOOKBRIDGE_LEASE_S_FILE": str(lease)}, vendors={}).lease_s == 42


def test_a_vendor_setting_from_a_file(tmp_path: Path) -> None:
    from service.vendors import registry

    key = tmp_path / "key"
    key.write_text("nutrient-secret")
    cfg = s.load({"HOOKBRIDGE_NUTRIENT_API_KEY_FILE": str(key)}, vendors=registry.vendors())
    assert cfg.vendor("nutrient").api_key == "nutrient-secret"


def test_both_at_once_and_unreadable_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("a:b")
    with pytest.raises(s.SettingsError, match=r"^HOOKBRIDGE_API_KEYS_FILE: HOOKBRIDGE_API_KEYS is set too"):
        s.load({"HOOKBRIDGE_API_KEYS_FILE": str(path), "HOOKBRIDGE_API_KEYS": "a:c"}, vendors={})
    missing = tmp_path / "absent"
    with pytest.raises(s.SettingsError, match=r"^HOOKBRIDGE_API_KEYS_FILE: cannot read .*absent"):
        s.load({"HOOKBRIDGE_API_KEYS_FILE": str(missing)}, vendors={})
    with pytest.raises(s.SettingsError, match=r"^HOOKBRIDGE_API_KEYS_FILE: cannot read"):
        s.load({"HOOKBRIDGE_API_KEYS_FILE": str(tmp_path)}, vendors={})  # a directory
    with pytest.raises(s.SettingsError, match=r"^HOOKBRIDGE_NO_SUCH_FILE: unknown setting"):
        s.load({"HOOKBRIDGE_NO_SUCH_FILE": str(path)}, vendors={})


def test_a_bad_secret_from_a_file_is_not_echoed(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("app:ok,broken-secret-value")
    with pytest.raises(s.SettingsError) as info:
        s.load({"HOOKBRIDGE_API_KEYS_FILE": str(path)}, vendors={})
    assert str(info.value).startswith("HOOKBRIDGE_API_KEYS_FILE: ") and "broken-secret-value" not in str(
        info.value
    )


def test_settings_named_file_keep_their_meaning(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    cfg = s.load({"HOOKBRIDGE_REDIS_TLS_CA_FILE": str(ca)}, vendors={})
    assert cfg.redis.tls_ca_file == str(ca)  # the path, not the content
    # Its own _FILE form reads the path from a file.
    holder = tmp_path / "ca-path"
    holder.write_text(str(ca) + "\n")
    assert s.load({"HOOKBRIDGE_REDIS_TLS_CA_FILE_FILE": str(holder)}, vendors={}).redis.tls_ca_file == str(ca)


SECRETS = {
    "HOOKBRIDGE_API_KEYS": "alice:alice-secret-1,bob:sha256:" + "ab" * 32,
    "HOOKBRIDGE_NUTRIENT_API_KEY": "nutrient-secret-2",
    "HOOKBRIDGE_REDIS_URL": "redis://user:redis-secret-3@127.0.0.1:9/0",
    "HOOKBRIDGE_SECRET_KEYS": "k1:" + base64.b64encode(b"s" * 32).decode(),
    "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD": "sentinel-secret-4",
}


def test_effective_prints_the_running_configuration_without_a_secret(tmp_path: Path) -> None:
    password = tmp_path / "uptiq-key"
    password.write_text("uptiq-secret-5\n")
    done = _run(
        "settings",
        "--effective",
        HOOKBRIDGE_LEASE_S="42",
        HOOKBRIDGE_LOG_LEVEL="WARNING",
        HOOKBRIDGE_UPTIQ_API_KEY_FILE=str(password),
        **SECRETS,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for secret in ("alice-secret-1", "ab" * 32, "nutrient-secret-2", "redis-secret-3", "sentinel-secret-4"):
        assert secret not in out + done.stderr
    assert "uptiq-secret-5" not in out and base64.b64encode(b"s" * 32).decode() not in out
    lines = dict(line.split("=", 1) for line in out.splitlines())
    assert lines["HOOKBRIDGE_LEASE_S"] == "42" and lines["HOOKBRIDGE_LOG_LEVEL"] == "warning"
    assert lines["HOOKBRIDGE_API_KEYS"] == s.REDACTED and lines["HOOKBRIDGE_UPTIQ_API_KEY"] == s.REDACTED
    assert lines["HOOKBRIDGE_CLOUDSQUID_API_KEY"] == ""  # unset: nothing to hide
    assert lines["HOOKBRIDGE_REDIS_URL"] == "redis://user:***@127.0.0.1:9/0"
    # What it prints, the non-secret part fed back, is the same configuration.
    plain = {k: v for k, v in lines.items() if v not in ("", s.REDACTED) and k != "HOOKBRIDGE_REDIS_URL"}
    assert load_settings(plain).lease_s == 42


def test_effective_refuses_what_api_would_refuse() -> None:
    done = _run("settings", "--effective", HOOKBRIDGE_SSE_HEARTBEAT_S="0.0001")
    assert done.returncode == 2 and "HOOKBRIDGE_SSE_HEARTBEAT_S: must be between 0.1 s and" in done.stderr


def test_version() -> None:
    from importlib.metadata import version

    done = _run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"hookbridge {version('hookbridge')}"


@pytest.mark.parametrize(
    ("command", "name", "value"),
    [
        ("api", "HOOKBRIDGE_SUBMIT_RATE_PER_S", "nan"),
        ("worker", "HOOKBRIDGE_SUBSCRIPTION_DISABLE_AFTER_S", "nan"),
        ("api", "HOOKBRIDGE_SSE_HEARTBEAT_S", "0.0001"),
        ("worker", "HOOKBRIDGE_WORKER_CONCURRENCY", "1e300"),
        ("api", "HOOKBRIDGE_API_KEYS", "a:same-secret,b:same-secret"),
        ("worker", "HOOKBRIDGE_LEASE_S", ""),
    ],
)
def test_the_real_entry_point_exits_2_naming_the_variable(command: str, name: str, value: str) -> None:
    done = _run(command, HOOKBRIDGE_REDIS_URL="redis://127.0.0.1:9/0", **{name: value})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"hookbridge: configuration error: {name}: ")
    assert "Traceback" not in done.stderr and "same-secret" not in done.stderr
