"""Settings: every knob is an environment variable with the prefix ``HOOKBRIDGE_``.

Read once at start by :func:`load`, validated, and frozen. A bad value raises
:class:`SettingsError` naming the variable; the CLI prints that one line and exits 2.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

PREFIX = "HOOKBRIDGE_"
VENDORS = ("nutrient", "cloudsquid", "uptiq")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_BLOCKED_NETWORKS = (
    "127.0.0.0/8",
    "::1/128",
    "169.254.0.0/16",
    "fe80::/10",
    "0.0.0.0/8",
    "::/128",
    "224.0.0.0/4",
    "ff00::/8",
    "255.255.255.255/32",
)


class SettingsError(ValueError):
    """A setting has a bad value; the message names the variable."""


@dataclass(frozen=True)
class VendorSettings:
    """Connection and polling policy for one vendor."""

    name: str
    base_url: str
    api_key: str = field(repr=False)
    poll_initial_s: float
    poll_max_s: float
    poll_multiplier: float
    max_run_s: float
    max_rps: float  # 0 means no budget
    project: str = ""  # Cloudsquid only
    table_id: str = ""  # Cloudsquid only


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    redis_sentinel_master: str = "mymaster"
    api_keys: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    vendors: Mapping[str, VendorSettings] = field(default_factory=dict)
    vendor_timeout_s: float = 30.0
    vendor_max_transient_failures: int = 10
    callback_timeout_s: float = 15.0
    retry_schedule: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
    callback_allowed_networks: tuple[Network, ...] = ()
    callback_blocked_networks: tuple[Network, ...] = ()
    max_document_bytes: int = 50 * 1024 * 1024
    max_inline_result_bytes: int = 256 * 1024
    max_json_depth: int = 32
    max_metadata_pairs: int = 50
    max_metadata_value_bytes: int = 500
    log_format: str = "console"
    log_level: str = "INFO"
    lease_s: float = 90.0
    worker_concurrency: int = 500
    worker_batch: int = 200
    worker_idle_s: float = 0.05
    worker_metrics_port: int = 9090
    worker_role: str = "all"  # all | runs | deliveries
    shutdown_grace_s: float = 25.0
    sweep_interval_s: float = 30.0
    subscription_max_in_flight: int = 10
    subscription_disable_after_s: float = 5 * 86400.0
    secret_rotation_overlap_s: float = 86400.0
    progress_min_interval_s: float = 5.0
    retention_s: float = 7 * 86400.0
    idempotency_ttl_s: float = 86400.0
    # Per-client quotas (a hostile or runaway tenant costs itself, not the platform).
    max_subscriptions_per_client: int = 100
    submit_rate_per_s: float = 100.0
    submit_burst: int = 200
    max_options_bytes: int = 64 * 1024
    # The API's connection guard (slowloris): see service/_uvicorn.py.
    api_header_timeout_s: float = 10.0
    api_body_idle_timeout_s: float = 30.0
    api_keepalive_timeout_s: float = 5.0
    api_max_connections: int = 0  # 0: from the process's file-descriptor limit

    def vendor(self, name: str) -> VendorSettings:
        return self.vendors[name]

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **changes)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``"5s"``, ``"250ms"``, ``"2h"`` or a bare number of seconds, as seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_schedule(text: str) -> tuple[float, ...]:
    steps = tuple(parse_duration(part) for part in text.split(",") if part.strip())
    if not steps:
        raise ValueError("the schedule needs at least one step")
    return steps


def parse_networks(text: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip())


def parse_api_keys(text: str) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        client, sep, secret = item.partition(":")
        if not sep or not client or not secret:
            # Never echo the item: it holds a secret.
            raise ValueError("each entry must be client_id:secret")
        if secret.startswith("sha256:") and not re.fullmatch(r"sha256:[0-9a-fA-F]{64}", secret):
            raise ValueError(f"client {client}: sha256: must be followed by 64 hex digits")
        pairs.append((client, secret))
    return tuple(pairs)


def _parse_sentinels(text: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:
            raise ValueError("each sentinel must be host:port")
        out.append((host, int(port)))
    return tuple(out)


T = TypeVar("T")


def _positive(parse: Callable[[str], T]) -> Callable[[str], T]:
    def check(text: str) -> T:
        value = parse(text)
        if not isinstance(value, int | float) or value <= 0:
            raise ValueError("must be greater than 0")
        return value

    return check


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _choice(*options: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text.lower() not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return text.lower()

    return check


def _redis_url(text: str) -> str:
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return text


_DURATION_S = _positive(parse_duration)

# Setting name (without prefix) -> (field, parser).
_PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "REDIS_URL": ("redis_url", _redis_url),
    "REDIS_SENTINELS": ("redis_sentinels", _parse_sentinels),
    "REDIS_SENTINEL_MASTER": ("redis_sentinel_master", str),
    "API_KEYS": ("api_keys", parse_api_keys),
    "VENDOR_TIMEOUT_S": ("vendor_timeout_s", _DURATION_S),
    "VENDOR_MAX_TRANSIENT_FAILURES": ("vendor_max_transient_failures", _positive(int)),
    "CALLBACK_TIMEOUT_S": ("callback_timeout_s", _DURATION_S),
    "RETRY_SCHEDULE": ("retry_schedule", parse_schedule),
    "CALLBACK_ALLOWED_NETWORKS": ("callback_allowed_networks", parse_networks),
    "CALLBACK_BLOCKED_NETWORKS": ("callback_blocked_networks", parse_networks),
    "MAX_DOCUMENT_BYTES": ("max_document_bytes", _positive(int)),
    "MAX_INLINE_RESULT_BYTES": ("max_inline_result_bytes", _positive(int)),
    "MAX_JSON_DEPTH": ("max_json_depth", _positive(int)),
    "LOG_FORMAT": ("log_format", _choice("json", "console")),
    "LOG_LEVEL": ("log_level", _choice("debug", "info", "warning", "error")),
    "LEASE_S": ("lease_s", _DURATION_S),
    "WORKER_CONCURRENCY": ("worker_concurrency", _positive(int)),
    "WORKER_BATCH": ("worker_batch", _positive(int)),
    "WORKER_IDLE_S": ("worker_idle_s", _DURATION_S),
    "WORKER_METRICS_PORT": ("worker_metrics_port", int),
    "WORKER_ROLE": ("worker_role", _choice("all", "runs", "deliveries")),
    "SHUTDOWN_GRACE_S": ("shutdown_grace_s", _DURATION_S),
    "SWEEP_INTERVAL_S": ("sweep_interval_s", _DURATION_S),
    "SUBSCRIPTION_MAX_IN_FLIGHT": ("subscription_max_in_flight", _positive(int)),
    "SUBSCRIPTION_DISABLE_AFTER_S": ("subscription_disable_after_s", _non_negative),
    "SECRET_ROTATION_OVERLAP_S": ("secret_rotation_overlap_s", _non_negative),
    "PROGRESS_MIN_INTERVAL_S": ("progress_min_interval_s", _non_negative),
    "RETENTION_S": ("retention_s", _DURATION_S),
    "IDEMPOTENCY_TTL_S": ("idempotency_ttl_s", _DURATION_S),
    "MAX_SUBSCRIPTIONS_PER_CLIENT": ("max_subscriptions_per_client", _positive(int)),
    "SUBMIT_RATE_PER_S": ("submit_rate_per_s", _positive(float)),
    "SUBMIT_BURST": ("submit_burst", _positive(int)),
    "MAX_OPTIONS_BYTES": ("max_options_bytes", _positive(int)),
    "API_HEADER_TIMEOUT_S": ("api_header_timeout_s", _DURATION_S),
    "API_BODY_IDLE_TIMEOUT_S": ("api_body_idle_timeout_s", _DURATION_S),
    "API_KEEPALIVE_TIMEOUT_S": ("api_keepalive_timeout_s", _DURATION_S),
    "API_MAX_CONNECTIONS": ("api_max_connections", _non_negative_int),
}

# Vendor defaults come from each vendor's own documentation (shared/vendors/NOTES.md).
_VENDOR_DEFAULTS: dict[str, dict[str, Any]] = {
    "nutrient": {
        "base_url": "https://api.nutrient.io",
        "poll_initial_s": 2.0,
        "poll_max_s": 30.0,
        "poll_multiplier": 2.0,
        "max_run_s": 1800.0,  # the vendor's own limit is 15 minutes of processing
        "max_rps": 0.0,
    },
    "cloudsquid": {
        "base_url": "https://api.cloudsquid.io/api",
        "poll_initial_s": 2.0,
        "poll_max_s": 5.0,
        "poll_multiplier": 1.5,
        "max_run_s": 3600.0,
        "max_rps": 0.0,
    },
    "uptiq": {
        "base_url": "https://api-docai-uat.uptiq.ai",
        "poll_initial_s": 5.0,
        "poll_max_s": 10.0,
        "poll_multiplier": 1.5,
        "max_run_s": 3600.0,
        "max_rps": 0.0,
    },
}

_VENDOR_PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "BASE_URL": ("base_url", str),
    "API_KEY": ("api_key", str),
    "POLL_INITIAL_S": ("poll_initial_s", _DURATION_S),
    "POLL_MAX_S": ("poll_max_s", _DURATION_S),
    "POLL_MULTIPLIER": ("poll_multiplier", _positive(float)),
    "MAX_RUN_S": ("max_run_s", _DURATION_S),
    "MAX_RPS": ("max_rps", _non_negative),
    "PROJECT": ("project", str),
    "TABLE_ID": ("table_id", str),
}


def _vendor_parsers(vendor: str) -> dict[str, tuple[str, Callable[[str], Any]]]:
    if vendor == "cloudsquid":
        return _VENDOR_PARSERS
    return {k: v for k, v in _VENDOR_PARSERS.items() if k not in ("PROJECT", "TABLE_ID")}


def _read(env: Mapping[str, str], name: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(env[name])
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{name}: {exc}") from None


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from the environment (or ``env``), validating every value."""
    env = os.environ if env is None else env
    known = set(_PARSERS) | {f"{v.upper()}_{k}" for v in VENDORS for k in _vendor_parsers(v)}
    known |= {"REDIS_EMBEDDED_DIR"}
    for name in env:
        if name.startswith(PREFIX) and not name.startswith(PREFIX + "SIM_"):
            if name[len(PREFIX) :] not in known:
                raise SettingsError(f"{name}: unknown setting (see the README for the list)")

    values: dict[str, Any] = {}
    for suffix, (attr, parse) in _PARSERS.items():
        if PREFIX + suffix in env and env[PREFIX + suffix] != "":
            values[attr] = _read(env, PREFIX + suffix, parse)

    vendors: dict[str, VendorSettings] = {}
    for vendor in VENDORS:
        cfg: dict[str, Any] = {"name": vendor, "api_key": "", **_VENDOR_DEFAULTS[vendor]}
        for suffix, (attr, parse) in _vendor_parsers(vendor).items():
            name = f"{PREFIX}{vendor.upper()}_{suffix}"
            if name in env and env[name] != "":
                cfg[attr] = _read(env, name, parse)
        cfg["base_url"] = cfg["base_url"].rstrip("/")
        if not cfg["base_url"].startswith(("http://", "https://")):
            raise SettingsError(f"{PREFIX}{vendor.upper()}_BASE_URL: must be an http(s) URL")
        if cfg["poll_max_s"] < cfg["poll_initial_s"]:
            raise SettingsError(f"{PREFIX}{vendor.upper()}_POLL_MAX_S: must be >= POLL_INITIAL_S")
        vendors[vendor] = VendorSettings(**cfg)
    values["vendors"] = vendors

    settings = Settings(**values)
    if not settings.callback_blocked_networks and f"{PREFIX}CALLBACK_BLOCKED_NETWORKS" not in env:
        settings = replace(
            settings, callback_blocked_networks=parse_networks(",".join(DEFAULT_BLOCKED_NETWORKS))
        )
    outbound = max(settings.vendor_timeout_s, settings.callback_timeout_s)
    if settings.lease_s <= outbound + 5:
        # A lease shorter than a request would let a second worker send the same request in parallel.
        raise SettingsError(
            f"{PREFIX}LEASE_S: must exceed the longest outbound timeout ({outbound:g}s) by more than 5s"
        )
    return settings


def describe() -> list[tuple[str, str]]:
    """Every setting name with its default, for the README and ``hookbridge settings``."""
    defaults = Settings()
    rows = [(PREFIX + name, repr(getattr(defaults, attr))) for name, (attr, _) in _PARSERS.items()]
    for vendor in VENDORS:
        for suffix, (attr, _) in _vendor_parsers(vendor).items():
            rows.append((f"{PREFIX}{vendor.upper()}_{suffix}", repr(_VENDOR_DEFAULTS[vendor].get(attr, ""))))
    return rows


__all__ = [
    "Settings",
    "SettingsError",
    "VendorSettings",
    "describe",
    "load",
    "parse_duration",
    "parse_networks",
    "parse_schedule",
]
