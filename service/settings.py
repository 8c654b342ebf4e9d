"""Settings: every knob is an environment variable with the prefix ``HOOKBRIDGE_``.

Read once at start by :func:`load`, validated, and frozen. A bad value raises
:class:`SettingsError` naming the variable; the CLI prints that one line and exits 2.
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from service.vendors import registry
from service.vendors.base import VendorSpec

PREFIX = "HOOKBRIDGE_"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata services (AWS, GCP and Azure; AWS over IPv6; Alibaba): never a callback target, whatever
# CALLBACK_BLOCKED_NETWORKS or CALLBACK_ALLOWED_NETWORKS say.
METADATA_NETWORKS = ("169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32")

DEFAULT_BLOCKED_NETWORKS = (
    *METADATA_NETWORKS,
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
_DEFAULT_BLOCKED = tuple(ipaddress.ip_network(n) for n in DEFAULT_BLOCKED_NETWORKS)


class SettingsError(ValueError):
    """A setting has a bad value; the message names the variable."""


class VendorPluginError(SettingsError):
    """A vendor plugin cannot be used (broken, duplicate, clashing); the message names it."""


@dataclass(frozen=True)
class VendorSettings:
    """Connection and polling policy for one vendor; the defaults come from its registered VendorSpec."""

    name: str
    base_url: str
    api_key: str = field(repr=False)
    poll_initial_s: float  # also the shortest pause of the whole vendor after a 429
    poll_max_s: float
    poll_multiplier: float
    max_run_s: float
    max_rps: float  # 0 means no budget
    pause_max_s: float = 60.0  # the longest pause of the whole vendor after a 429
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the spec's own settings, by key
    spec: VendorSpec | None = field(default=None, repr=False, compare=False)

    @property
    def operations(self) -> tuple[str, ...]:
        return self.spec.operations if self.spec is not None else ()

    @property
    def supports_cancel(self) -> bool:
        return self.spec.supports_cancel if self.spec is not None else False


@dataclass(frozen=True)
class RedisAuth:
    """Credentials and TLS for the Redis master and for the Sentinels (REDIS_* settings).

    Passwords come from the Secret (HOOKBRIDGE_REDIS_PASSWORD, HOOKBRIDGE_REDIS_SENTINEL_PASSWORD), never
    from a URL in a ConfigMap. ``tls`` applies to the master found through Sentinel (a URL says it with
    ``rediss://``); ``sentinel_tls`` to the Sentinels themselves.
    """

    username: str = ""
    password: str = field(default="", repr=False)
    sentinel_username: str = ""
    sentinel_password: str = field(default="", repr=False)
    tls: bool = False
    sentinel_tls: bool = False
    tls_ca_file: str = ""
    tls_verify: bool = True


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    redis_sentinel_master: str = "mymaster"
    redis: RedisAuth = field(default_factory=RedisAuth)
    api_keys: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    vendors: Mapping[str, VendorSettings] = field(default_factory=dict)
    vendor_timeout_s: float = 30.0
    vendor_max_transient_failures: int = 10
    callback_timeout_s: float = 15.0
    retry_schedule: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
    callback_allowed_networks: tuple[Network, ...] = ()
    # Unset or empty: this list; "none" turns it off (the metadata addresses stay blocked).
    callback_blocked_networks: tuple[Network, ...] = _DEFAULT_BLOCKED
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
    worker_metrics_host: str = "0.0.0.0"
    worker_role: str = "all"  # all | runs | deliveries
    worker_processes: int = 1  # worker processes per `hookbridge worker` (a supervisor above 1)
    shutdown_grace_s: float = 25.0
    sweep_interval_s: float = 30.0
    subscription_max_in_flight: int = 10
    subscription_disable_after_s: float = 5 * 86400.0
    secret_rotation_overlap_s: float = 86400.0
    progress_min_interval_s: float = 5.0
    retention_s: float = 7 * 86400.0
    idempotency_ttl_s: float = 86400.0
    # Subscription secrets at rest: (key id, AES key); the first encrypts, every one decrypts.
    secret_keys: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    client_max_in_flight: int = 100
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
    # The event feed's server-sent event streams and long-polls (service/api/events.py, streams.py).
    sse_heartbeat_s: float = 15.0
    max_streams_per_client: int = 10
    # Issue 23: a stream whose reader takes nothing this long is closed; a stream's longest life (it ends
    # cleanly, the client resumes with Last-Event-ID); this pod's blocking readers (one Redis connection
    # each); feed entries one request (or one stream, per second) may scan.
    sse_send_timeout_s: float = 30.0
    sse_max_s: float = 3600.0
    feed_blocking_connections: int = 200
    feed_scan_budget: int = 10_000

    def vendor(self, name: str) -> VendorSettings:
        return self.vendors[name]


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


def parse_blocked_networks(text: str) -> tuple[Network, ...]:
    """A CIDR list; empty (or only spaces and commas) means the default list, ``none`` means no list
    (the metadata addresses stay blocked either way)."""
    if text.strip().lower() == "none":
        return ()
    return parse_networks(text) or _DEFAULT_BLOCKED


_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


def parse_secret_keys(text: str) -> tuple[tuple[str, bytes], ...]:
    """``keyid:base64key,...``: AES keys of 16, 24 or 32 bytes; the first encrypts, all decrypt."""
    import base64
    import binascii

    out: list[tuple[str, bytes]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key_id, sep, encoded = item.partition(":")
        # Never echo a key: name its id at most.
        if not sep or not _KEY_ID.match(key_id):
            raise ValueError("each entry must be keyid:base64key, the id of letters, digits, . _ - (1-32)")
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {key_id}: not valid base64") from None
        if len(key) not in (16, 24, 32):
            raise ValueError(f"key {key_id}: must be 16, 24 or 32 bytes (32 recommended), got {len(key)}")
        if key_id in {k for k, _ in out}:
            raise ValueError(f"key {key_id}: listed twice")
        out.append((key_id, key))
    return tuple(out)


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

    check.choices = options  # type: ignore[attr-defined]  # read by helm/generate_schema.py
    return check


def _redis_url(text: str) -> str:
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return text


_DURATION_S = _positive(parse_duration)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _host(text: str) -> str:
    host = text.strip()
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise ValueError("must be a host name or an IP address")
    return host


# Redis credentials and TLS, read into Settings.redis (see RedisAuth). The passwords are secrets: the chart
# puts them in the Secret, never in the ConfigMap.
_REDIS_AUTH_PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "REDIS_USERNAME": ("username", str),
    "REDIS_PASSWORD": ("password", str),
    "REDIS_SENTINEL_USERNAME": ("sentinel_username", str),
    "REDIS_SENTINEL_PASSWORD": ("sentinel_password", str),
    "REDIS_TLS": ("tls", parse_bool),
    "REDIS_SENTINEL_TLS": ("sentinel_tls", parse_bool),
    "REDIS_TLS_CA_FILE": ("tls_ca_file", str),
    "REDIS_TLS_VERIFY": ("tls_verify", parse_bool),
}


def url_has_password(url: str) -> bool:
    """True when a Redis URL carries a password (userinfo or a ``password`` query parameter)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        return True
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    return any(k.lower() == "password" for k in query)


def _load_redis_auth(env: Mapping[str, str], redis_url: str | None) -> RedisAuth:
    values: dict[str, Any] = {}
    for suffix, (attr, parse) in _REDIS_AUTH_PARSERS.items():
        if env.get(PREFIX + suffix, "") != "":
            values[attr] = _read(env, PREFIX + suffix, parse)
    auth = RedisAuth(**values)
    if redis_url and redis_url.startswith("redis://") and auth.tls:
        raise SettingsError(f"{PREFIX}REDIS_TLS: with a URL, say TLS by its scheme (rediss://)")
    if redis_url and auth.password and url_has_password(redis_url):
        raise SettingsError(f"{PREFIX}REDIS_PASSWORD: the Redis URL carries credentials too; give them once")
    return auth


# Kubernetes injects these for every Service in the namespace unless the pod sets enableServiceLinks: false.
# A Service named hookbridge-api gives HOOKBRIDGE_API_SERVICE_HOST=10.0.0.7, HOOKBRIDGE_API_PORT=tcp://...
# The loader drops a name only when its shape AND its value are what Kubernetes writes, so a typo of a real
# setting (HOOKBRIDGE_RETRY_SCHEDUL=..., HOOKBRIDGE_WORKER_METRIC_PORT=9090) is still refused.
_IP = r"(?:[0-9.]+|[0-9a-fA-F:]+)"
_PORT_URL = rf"(?:tcp|udp|sctp)://(?:{_IP}|\[[0-9a-fA-F:]+\]):[0-9]{{1,5}}"
_SERVICE_LINK_SHAPES = (
    (re.compile(r"^(?:.+_)?SERVICE_HOST$"), re.compile(rf"^{_IP}$")),
    (re.compile(r"^(?:.+_)?SERVICE_PORT(?:_[A-Z0-9_]+)?$"), re.compile(r"^[0-9]{1,5}$")),
    (re.compile(r"^(?:.+_)?PORT$"), re.compile(rf"^{_PORT_URL}$")),
    (re.compile(r"^(?:.+_)?PORT_[0-9]{1,5}_(?:TCP|UDP|SCTP)$"), re.compile(rf"^{_PORT_URL}$")),
    (re.compile(r"^(?:.+_)?PORT_[0-9]{1,5}_(?:TCP|UDP|SCTP)_PROTO$"), re.compile(r"^(?:tcp|udp|sctp)$")),
    (re.compile(r"^(?:.+_)?PORT_[0-9]{1,5}_(?:TCP|UDP|SCTP)_PORT$"), re.compile(r"^[0-9]{1,5}$")),
    (re.compile(r"^(?:.+_)?PORT_[0-9]{1,5}_(?:TCP|UDP|SCTP)_ADDR$"), re.compile(rf"^{_IP}$")),
)


def is_service_link(name: str, value: str) -> bool:
    """True for a variable that Kubernetes' service links inject (``HOOKBRIDGE_<SVC>_SERVICE_HOST`` ...)."""
    if not name.startswith(PREFIX):
        return False
    rest = name[len(PREFIX) :]
    return any(n.match(rest) and v.match(value) for n, v in _SERVICE_LINK_SHAPES)


def _without_service_links(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not is_service_link(k, v)}


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
    "CALLBACK_BLOCKED_NETWORKS": ("callback_blocked_networks", parse_blocked_networks),
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
    "WORKER_METRICS_HOST": ("worker_metrics_host", _host),
    "WORKER_ROLE": ("worker_role", _choice("all", "runs", "deliveries")),
    "WORKER_PROCESSES": ("worker_processes", _positive(int)),
    "SHUTDOWN_GRACE_S": ("shutdown_grace_s", _DURATION_S),
    "SWEEP_INTERVAL_S": ("sweep_interval_s", _DURATION_S),
    "SUBSCRIPTION_MAX_IN_FLIGHT": ("subscription_max_in_flight", _positive(int)),
    "SUBSCRIPTION_DISABLE_AFTER_S": ("subscription_disable_after_s", _non_negative),
    "SECRET_ROTATION_OVERLAP_S": ("secret_rotation_overlap_s", _non_negative),
    "PROGRESS_MIN_INTERVAL_S": ("progress_min_interval_s", _non_negative),
    "RETENTION_S": ("retention_s", _DURATION_S),
    "IDEMPOTENCY_TTL_S": ("idempotency_ttl_s", _DURATION_S),
    "SECRET_KEYS": ("secret_keys", parse_secret_keys),
    "CLIENT_MAX_IN_FLIGHT": ("client_max_in_flight", _positive(int)),
    "MAX_SUBSCRIPTIONS_PER_CLIENT": ("max_subscriptions_per_client", _positive(int)),
    "SUBMIT_RATE_PER_S": ("submit_rate_per_s", _positive(float)),
    "SUBMIT_BURST": ("submit_burst", _positive(int)),
    "MAX_OPTIONS_BYTES": ("max_options_bytes", _positive(int)),
    "API_HEADER_TIMEOUT_S": ("api_header_timeout_s", _DURATION_S),
    "API_BODY_IDLE_TIMEOUT_S": ("api_body_idle_timeout_s", _DURATION_S),
    "API_KEEPALIVE_TIMEOUT_S": ("api_keepalive_timeout_s", _DURATION_S),
    "API_MAX_CONNECTIONS": ("api_max_connections", _non_negative_int),
    "SSE_HEARTBEAT_S": ("sse_heartbeat_s", _DURATION_S),
    "MAX_STREAMS_PER_CLIENT": ("max_streams_per_client", _positive(int)),
    "SSE_SEND_TIMEOUT_S": ("sse_send_timeout_s", _DURATION_S),
    "SSE_MAX_S": ("sse_max_s", _DURATION_S),
    "FEED_BLOCKING_CONNECTIONS": ("feed_blocking_connections", _positive(int)),
    "FEED_SCAN_BUDGET": ("feed_scan_budget", _positive(int)),
}

# The settings every vendor has (HOOKBRIDGE_{VENDOR}_{suffix}); their defaults come from the vendor's
# registered VendorSpec (service/vendors/registry.py), and a vendor adds its own (VendorSpec.settings).
_VENDOR_PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "BASE_URL": ("base_url", str),
    "API_KEY": ("api_key", str),
    "POLL_INITIAL_S": ("poll_initial_s", _DURATION_S),
    "POLL_MAX_S": ("poll_max_s", _DURATION_S),
    "POLL_MULTIPLIER": ("poll_multiplier", _positive(float)),
    "MAX_RUN_S": ("max_run_s", _DURATION_S),
    "MAX_RPS": ("max_rps", _non_negative),
    "PAUSE_MAX_S": ("pause_max_s", _DURATION_S),
}


def _vendor_specs() -> dict[str, VendorSpec]:
    try:
        return registry.vendors()
    except registry.PluginError as exc:
        raise VendorPluginError(str(exc)) from None


def _vendor_parsers(spec: VendorSpec) -> dict[str, tuple[str, Callable[[str], Any]]]:
    """The vendor's settings by suffix: the common ones, then its own (as ``extra.<key>``)."""
    parsers = dict(_VENDOR_PARSERS)
    for setting in spec.settings:
        if setting.name in parsers:
            raise VendorPluginError(
                f"vendor plugin {spec.name!r}: setting {setting.name} is one of the common vendor settings"
            )
        parsers[setting.name] = (f"extra.{setting.key}", setting.parse)
    return parsers


def _vendor_defaults(spec: VendorSpec) -> dict[str, Any]:
    d = spec.defaults
    return {
        "base_url": d.base_url,
        "poll_initial_s": d.poll_initial_s,
        "poll_max_s": d.poll_max_s,
        "poll_multiplier": d.poll_multiplier,
        "max_run_s": d.max_run_s,
        "max_rps": d.max_rps,
        "pause_max_s": d.pause_max_s,
        **{f"extra.{s.key}": s.default for s in spec.settings},
    }


def _load_vendor(env: Mapping[str, str], spec: VendorSpec) -> VendorSettings:
    vendor = spec.name
    cfg: dict[str, Any] = {"api_key": "", **_vendor_defaults(spec)}
    for suffix, (attr, parse) in _vendor_parsers(spec).items():
        name = f"{PREFIX}{vendor.upper()}_{suffix}"
        if name in env and env[name] != "":
            cfg[attr] = _read(env, name, parse)
    extra = {k.removeprefix("extra."): cfg.pop(k) for k in list(cfg) if k.startswith("extra.")}
    cfg["base_url"] = cfg["base_url"].rstrip("/")
    if not cfg["base_url"].startswith(("http://", "https://")):
        raise SettingsError(f"{PREFIX}{vendor.upper()}_BASE_URL: must be an http(s) URL")
    if cfg["poll_max_s"] < cfg["poll_initial_s"]:
        raise SettingsError(f"{PREFIX}{vendor.upper()}_POLL_MAX_S: must be >= POLL_INITIAL_S")
    if cfg["pause_max_s"] < cfg["poll_initial_s"]:
        raise SettingsError(f"{PREFIX}{vendor.upper()}_PAUSE_MAX_S: must be >= POLL_INITIAL_S")
    return VendorSettings(name=vendor, extra=extra, spec=spec, **cfg)


def _read(env: Mapping[str, str], name: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(env[name])
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{name}: {exc}") from None


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from the environment (or ``env``), validating every value."""
    env = _without_service_links(os.environ if env is None else env)
    specs = _vendor_specs()
    known = set(_PARSERS) | set(_REDIS_AUTH_PARSERS)
    for spec in specs.values():
        names = {f"{spec.name.upper()}_{k}" for k in _vendor_parsers(spec)}
        if names & known:
            clash = sorted(names & known)[0]
            raise VendorPluginError(f"vendor plugin {spec.name!r}: {PREFIX}{clash} is already a setting")
        known |= names
    for name in env:
        if name.startswith(PREFIX) and not name.startswith(PREFIX + "SIM_"):
            if name[len(PREFIX) :] not in known:
                raise SettingsError(f"{name}: unknown setting (see the README for the list)")

    values: dict[str, Any] = {}
    for suffix, (attr, parse) in _PARSERS.items():
        if PREFIX + suffix in env and env[PREFIX + suffix] != "":
            values[attr] = _read(env, PREFIX + suffix, parse)

    values["vendors"] = {name: _load_vendor(env, spec) for name, spec in specs.items()}
    values["redis"] = _load_redis_auth(env, values.get("redis_url"))

    settings = Settings(**values)
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
    rows += [
        (PREFIX + name, repr(getattr(defaults.redis, attr)))
        for name, (attr, _) in _REDIS_AUTH_PARSERS.items()
    ]
    for spec in _vendor_specs().values():
        defaults_of = _vendor_defaults(spec)
        for suffix, (attr, _) in _vendor_parsers(spec).items():
            rows.append((f"{PREFIX}{spec.name.upper()}_{suffix}", repr(defaults_of.get(attr, ""))))
    return rows


__all__ = [
    "RedisAuth",
    "Settings",
    "SettingsError",
    "VendorPluginError",
    "VendorSettings",
    "describe",
    "load",
    "parse_duration",
    "parse_networks",
    "parse_schedule",
]
