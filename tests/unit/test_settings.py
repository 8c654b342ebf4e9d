"""Settings are read once, validated, and a bad value names its variable."""

from __future__ import annotations

import ipaddress

import pytest

from service.config import settings as s
from service.vendors.registry import load_settings


def test_defaults_follow_the_contract_and_the_vendor_documents() -> None:
    cfg = load_settings({})
    assert cfg.callback_timeout_s == 15 and cfg.max_document_bytes == 50 * 1024 * 1024
    assert cfg.retry_schedule == (5, 300, 1800, 7200, 18000, 36000, 36000)
    nutrient = cfg.vendor("nutrient")
    assert (nutrient.poll_initial_s, nutrient.poll_max_s, nutrient.poll_multiplier) == (2, 30, 2)
    assert cfg.vendor("uptiq").poll_initial_s == 5 and cfg.vendor("cloudsquid").poll_max_s == 5
    assert ipaddress.ip_address("169.254.169.254") in ipaddress.ip_network("169.254.0.0/16")
    assert any(str(n) == "169.254.0.0/16" for n in cfg.callback_blocked_networks)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("HOOKBRIDGE_REDIS_URL", "http://x", "redis://"),
        ("HOOKBRIDGE_RETRY_SCHEDULE", "5s,soon", "duration"),
        ("HOOKBRIDGE_CALLBACK_TIMEOUT_S", "-1", "duration"),
        ("HOOKBRIDGE_WORKER_CONCURRENCY", "0", "between 1 and"),
        ("HOOKBRIDGE_LOG_FORMAT", "xml", "json"),
        ("HOOKBRIDGE_CALLBACK_BLOCKED_NETWORKS", "10.0.0.0/33", ""),
        ("HOOKBRIDGE_NUTRIENT_MAX_RPS", "fast", ""),
        ("HOOKBRIDGE_NUTRIENT_POLL_MAX_S", "1", "POLL_INITIAL_S"),
        ("HOOKBRIDGE_UPTIQ_BASE_URL", "ftp://x", "http"),
        ("HOOKBRIDGE_NO_SUCH_THING", "1", "unknown setting"),
        ("HOOKBRIDGE_NUTRIENT_PROJECT", "p", "unknown setting"),
        ("HOOKBRIDGE_LEASE_S", "20", "outbound timeout"),
    ],
)
def test_a_bad_value_names_its_variable(name: str, value: str, words: str) -> None:
    with pytest.raises(s.SettingsError) as info:
        load_settings({name: value})
    message = str(info.value)
    assert message.startswith(name) and words in message


def test_api_keys_never_echo_a_secret_in_errors() -> None:
    with pytest.raises(s.SettingsError) as info:
        load_settings({"HOOKBRIDGE_API_KEYS": "app:ok,broken-secret-value"})
    assert "broken-secret-value" not in str(info.value)
    keys = load_settings({"HOOKBRIDGE_API_KEYS": "a:one, b:sha256:" + "ab" * 32}).api_keys
    assert keys == (("a", "one"), ("b", "sha256:" + "ab" * 32))


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("5s", 5), ("5m", 300), ("2h", 7200), ("1.5", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert s.parse_duration(text) == seconds


def test_the_lease_must_outlast_every_outbound_timeout() -> None:
    assert load_settings({"HOOKBRIDGE_VENDOR_TIMEOUT_S": "10", "HOOKBRIDGE_LEASE_S": "21"}).lease_s == 21
    with pytest.raises(s.SettingsError, match="LEASE_S"):
        load_settings({"HOOKBRIDGE_CALLBACK_TIMEOUT_S": "100"})
