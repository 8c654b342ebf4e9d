"""Settings: every knob is an environment variable with the prefix ``HOOKBRIDGE_``.

Declared once: each field of :class:`Settings` (and of :class:`RedisAuth` and :class:`VendorSettings`)
carries its variable's name, its parser with its bounds, and a one-line doc (:func:`setting`). The loader,
``hookbridge settings``, the README's configuration table and the chart's values schema all read that one
declaration (:func:`table`), so a new field is parsed, bounded, documented and tested without a second edit.

Read once at start by :func:`load`, validated, and frozen. Any ``HOOKBRIDGE_X`` may come from a file
instead (``HOOKBRIDGE_X_FILE``, the Kubernetes and Docker secrets convention). A bad value raises
:class:`SettingsError` naming the variable; the CLI prints that one line and exits 2. The consumers'
frozen sub-configs (:class:`RedisConfig`, :class:`ApiLimits`, :class:`WorkerConfig`,
:class:`DeliveryPolicy`, :class:`RunPolicy`) check the rules between fields when they are built, so a
:class:`Settings` made in code is held to the same rules as one read from the environment.

Vendor plugins are not loaded here, nor the vendors imported: the composition root (the CLI) passes the
installed specs to :func:`load`, which reads each as a :class:`VendorDeclaration` (the part of a spec that
declares settings); ``service.vendors.registry.load_settings`` does the same for the other callers (dev,
the conformance kit, the tests).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import hashlib
import ipaddress
import math
import os
import re
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.core.backoff import VendorPolicy

PREFIX = "HOOKBRIDGE_"
# A vendor's name, as contract section 10 allows it; its settings are HOOKBRIDGE_{NAME}_{SETTING}.
VENDOR_NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
# The most bytes read from a HOOKBRIDGE_X_FILE: a setting, not a document.
MAX_FILE_BYTES = 1024 * 1024

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

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


class LogFormat(enum.StrEnum):
    JSON = "json"
    CONSOLE = "console"


class LogLevel(enum.StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class WorkerRole(enum.StrEnum):
    ALL = "all"
    RUNS = "runs"
    DELIVERIES = "deliveries"


# --- parsers -------------------------------------------------------------------------------------------
# Only ASCII digits: Python's \d and int() take Unicode digits ("١٢٣") that nothing downstream expects.
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_INT = re.compile(r"^\s*[+-]?[0-9]+\s*$")
_FLOAT = re.compile(r"^\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*$")
DAY = 86400.0


def parse_duration(text: str) -> float:
    """``"5s"``, ``"250ms"``, ``"2h"`` or a bare number of seconds, as seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    value = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(value):
        raise ValueError(f"not a duration: {text!r}")
    return value


class NumberKind(enum.StrEnum):
    INT = "int"
    FLOAT = "float"
    DURATION = "duration"


def _number_text(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Number:
    """A number between ``low`` and ``high`` (inclusive), finite; 0 too when ``zero`` says what it means.

    Durations are seconds with an optional unit; their ``low`` is at least 1 ms wherever they become a
    TTL or a timer, so no value rounds to 0 ms. An empty value is refused: unset the variable instead.
    """

    kind: NumberKind
    low: float
    high: float
    zero: str = ""  # what 0 means, when 0 is allowed

    numeric = True  # read by the table-driven tests: every numeric setting gets the nonsense values

    def __call__(self, text: str) -> Any:
        if not text.strip():
            raise ValueError("empty: unset the variable to use the default")
        value: float
        if self.kind is NumberKind.INT:
            if not _INT.match(text):
                raise ValueError(f"must be a whole number, got {text.strip()[:40]!r}")
            value = int(text)
        elif self.kind is NumberKind.FLOAT:
            if not _FLOAT.match(text):
                raise ValueError(f"must be a number, got {text.strip()[:40]!r}")
            value = float(text)
        else:
            value = parse_duration(text)
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        if value == 0 and self.zero:
            return value
        if not self.low <= value <= self.high:
            raise ValueError(f"must be {self.describe()}")
        return value

    def describe(self) -> str:
        unit = " s" if self.kind is NumberKind.DURATION else ""
        text = f"between {_number_text(self.low)}{unit} and {_number_text(self.high)}{unit}"
        return text + (f", or 0 ({self.zero})" if self.zero else "")


def _int(low: int, high: int, zero: str = "") -> Number:
    return Number(NumberKind.INT, low, high, zero)


def _float(low: float, high: float, zero: str = "") -> Number:
    return Number(NumberKind.FLOAT, low, high, zero)


def _duration(low: float, high: float, zero: str = "") -> Number:
    return Number(NumberKind.DURATION, low, high, zero)


MS = 0.001


@dataclass(frozen=True)
class Schedule:
    """Comma-separated durations, each at least 1 ms; at most ``max_steps`` of them."""

    low: float = MS
    high: float = 30 * DAY
    max_steps: int = 100

    numeric = True

    def __call__(self, text: str) -> tuple[float, ...]:
        steps = tuple(parse_duration(part) for part in text.split(",") if part.strip())
        if not steps:
            raise ValueError("the schedule needs at least one step")
        if len(steps) > self.max_steps:
            raise ValueError(f"at most {self.max_steps} steps")
        if any(not self.low <= s <= self.high for s in steps):
            raise ValueError(f"each step must be between {self.low:g} s and {self.high:g} s")
        return steps


_SCHEDULE = Schedule()


def parse_schedule(text: str) -> tuple[float, ...]:
    return _SCHEDULE(text)


@dataclass(frozen=True)
class Choice:
    """One of an enum's values (case-insensitive)."""

    options: type[enum.StrEnum]

    @property
    def choices(self) -> tuple[str, ...]:  # read by helm/generate_schema.py
        return tuple(m.value for m in self.options)

    def __call__(self, text: str) -> enum.StrEnum:
        try:
            return self.options(text.strip().lower())
        except ValueError:
            raise ValueError(f"must be one of {', '.join(self.choices)}") from None


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
        if key in {k for _, k in out}:
            raise ValueError(f"key {key_id}: the same key as another id")
        out.append((key_id, key))
    return tuple(out)


def _secret_digest(secret: str) -> str:
    if secret.startswith("sha256:"):
        return secret.removeprefix("sha256:").lower()
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_api_keys(text: str) -> tuple[tuple[str, str], ...]:
    """``client:secret,...``; a client listed twice, or two clients with one secret (plain or as its
    sha256), are refused: a request would authenticate as whichever the lookup found first."""
    pairs: list[tuple[str, str]] = []
    digests: dict[str, str] = {}
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
        if any(c == client for c, _ in pairs):
            raise ValueError(f"client {client}: listed twice")
        digest = _secret_digest(secret)
        if digest in digests:
            raise ValueError(f"clients {digests[digest]} and {client} have the same secret")
        digests[digest] = client
        pairs.append((client, secret))
    return tuple(pairs)


def parse_host_ports(text: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        host, _, port = item.strip().rpartition(":")
        if not host or not _INT.match(port) or not 1 <= int(port) <= 65535:
            raise ValueError("each entry must be host:port (port 1-65535)")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("needs at least one host:port")
    return tuple(out)


_parse_sentinels = parse_host_ports  # the old name


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _redis_url(text: str) -> str:
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return text


def _host(text: str) -> str:
    host = text.strip()
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise ValueError("must be a host name or an IP address")
    return host


def _name(text: str) -> str:
    name = text.strip()
    if not name or any(c.isspace() for c in name):
        raise ValueError("must be a name without spaces")
    return name


def _http_url(text: str) -> str:
    url = text.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError("must be an http(s) URL")
    return url


def url_has_password(url: str) -> bool:
    """True when a Redis URL carries a password (userinfo or a ``password`` query parameter)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        return True
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    return any(k.lower() == "password" for k in query)


def redact_url(url: str) -> str:
    """The URL with any password replaced (for ``hookbridge settings --effective``)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if parts.password:
        user = parts.username or ""
        host = netloc.rpartition("@")[2]
        netloc = f"{user}:***@{host}"
    query = urllib.parse.urlencode(
        [
            (k, "***" if k.lower() == "password" else v)
            for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ]
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# --- the declaration -----------------------------------------------------------------------------------
_META = "hookbridge.setting"
_SECRET_NAME = re.compile(r"(^|_)(API_KEYS?|PASSWORD|ENCRYPTION_KEYS?|SECRET_KEYS?|TOKEN|CREDENTIALS)$")


def is_secret(name: str) -> bool:
    """A setting whose value is a secret by its name (the chart puts those in the Secret)."""
    return bool(_SECRET_NAME.search(name.removeprefix(PREFIX).removesuffix("_FILE")))


@dataclass(frozen=True)
class Declared:
    """One setting: ``name`` (without ``HOOKBRIDGE_``; for a vendor, without the vendor's part), the
    field it fills, its parser and a one-line doc. ``shown`` is the default as the README shows it."""

    name: str
    attr: str
    parse: Callable[[str], Any]
    doc: str
    secret: bool = False
    shown: str = ""

    @property
    def numeric(self) -> bool:
        return bool(getattr(self.parse, "numeric", False))


def setting(
    default: Any,
    parse: Callable[[str], Any],
    doc: str,
    *,
    name: str = "",
    secret: bool = False,
    shown: str = "",
) -> Any:
    """A field of a settings class, declared with its variable (``name``, else the field's in upper case)."""
    meta = {_META: (name, parse, doc, secret, shown)}
    if default is dataclasses.MISSING:
        return field(repr=not secret, metadata=meta)
    return field(default=default, repr=not secret, metadata=meta)


def declared(cls: type) -> tuple[Declared, ...]:
    """The settings a class declares, in field order."""
    out = []
    for f in dataclasses.fields(cls):
        if _META in f.metadata:
            name, parse, doc, secret, shown = f.metadata[_META]
            out.append(Declared(name or f.name.upper(), f.name, parse, doc, secret, shown))
    return tuple(out)


# --- vendors -------------------------------------------------------------------------------------------
# What the settings read of a vendor: the part of its spec that declares settings. A plugin's
# ``service.vendors.base.VendorSpec`` is one (with its ``VendorDefaults``, ``VendorSetting``s and
# ``KindBudget``s); the settings never import the vendors, and the composition root hands the specs in.
class DeclaredDefaults(VendorPolicy, Protocol):
    """The defaults of a vendor's common settings (``VendorDefaults``): the run policy's numbers
    (core.backoff.VendorPolicy) and the rest."""

    @property
    def base_url(self) -> str: ...
    @property
    def max_rps(self) -> float: ...
    @property
    def max_answer_bytes(self) -> int: ...
    @property
    def min_poll_s(self) -> float: ...


class DeclaredSetting(Protocol):
    """A setting of one vendor beyond the common ones (``VendorSetting``): ``HOOKBRIDGE_{VENDOR}_{name}``,
    its value under ``key`` in :attr:`VendorSettings.extra`."""

    @property
    def name(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def default(self) -> Any: ...
    @property
    def parse(self) -> Callable[[str], Any]: ...
    @property
    def description(self) -> str: ...


class DeclaredBudget(Protocol):
    """Request kinds with a rate of their own (``KindBudget``): ``HOOKBRIDGE_{VENDOR}_{NAME}_MAX_RPS``."""

    @property
    def name(self) -> str: ...
    @property
    def kinds(self) -> Collection[str]: ...
    @property
    def max_rps(self) -> float: ...


class VendorDeclaration(Protocol):
    """One vendor as the settings know it (``VendorSpec``): its name, what it can do, its settings."""

    @property
    def name(self) -> str: ...
    @property
    def operations(self) -> tuple[str, ...]: ...
    @property
    def supports_cancel(self) -> bool: ...
    @property
    def defaults(self) -> DeclaredDefaults: ...
    @property
    def settings(self) -> Sequence[DeclaredSetting]: ...
    @property
    def budgets(self) -> Sequence[DeclaredBudget]: ...
    @property
    def required(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class VendorSettings:
    """Connection and polling policy for one vendor (``HOOKBRIDGE_{VENDOR}_{NAME}``); the defaults come
    from its registered VendorSpec, and a plugin adds its own settings (``VendorSpec.settings``)."""

    name: str
    base_url: str = setting(dataclasses.MISSING, _http_url, "the vendor's API root")
    api_key: str = setting(dataclasses.MISSING, str, "the platform's key for the vendor", secret=True)
    poll_initial_s: float = setting(
        dataclasses.MISSING,
        _duration(MS, 3600),
        "first poll interval of a run; also the shortest pause of the whole vendor after a 429",
    )
    poll_max_s: float = setting(
        dataclasses.MISSING, _duration(MS, DAY), "longest poll interval (at least POLL_INITIAL_S)"
    )
    poll_multiplier: float = setting(
        dataclasses.MISSING, _float(1, 10), "growth of the poll interval per poll; +0-15 % jitter"
    )
    max_run_s: float = setting(
        dataclasses.MISSING,
        _duration(1, 30 * DAY),
        "a run still unfinished after this ends `failed` with `timed_out`",
    )
    max_rps: float = setting(
        dataclasses.MISSING,
        _float(MS, 100_000, zero="no budget"),
        "requests per second to the vendor, submits and polls together, shared by every worker",
    )
    pause_max_s: float = setting(
        60.0,
        _duration(MS, DAY),
        "the longest pause of the whole vendor after a 429 (cap of the growing pause and of Retry-After); "
        "also the latest a vendor's own Retry-After on a 202 or 200 sets the next poll",
    )
    max_answer_bytes: int = setting(
        0,
        _int(1024, 16 * 1024 * 1024 * 1024, zero="MAX_DOCUMENT_BYTES and 64 KiB"),
        "the most bytes of one vendor answer read (and of a result the adapter streams to a file)",
    )
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the spec's own settings, by key
    # The variables of the spec's ``required`` settings left unset: a submit to the vendor is refused.
    missing: tuple[str, ...] = field(default=(), compare=False)
    # What the loader changed of the given values, and why: logged as warnings at start.
    warnings: tuple[str, ...] = field(default=(), compare=False)
    # The vendor's spec, as the composition root passed it (``service.vendors.registry.spec_of`` gives
    # it back as the ``VendorSpec`` it is).
    spec: VendorDeclaration | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        var = f"{PREFIX}{self.name.upper()}_"
        if not self.base_url.startswith(("http://", "https://")):
            raise SettingsError(f"{var}BASE_URL: must be an http(s) URL")
        if self.poll_max_s < self.poll_initial_s:
            raise SettingsError(f"{var}POLL_MAX_S: must be >= POLL_INITIAL_S")
        if self.pause_max_s < self.poll_initial_s:
            raise SettingsError(f"{var}PAUSE_MAX_S: must be >= POLL_INITIAL_S")

    @property
    def operations(self) -> tuple[str, ...]:
        return self.spec.operations if self.spec is not None else ()

    @property
    def supports_cancel(self) -> bool:
        return self.spec.supports_cancel if self.spec is not None else False


# The settings every vendor has, declared once on VendorSettings.
VENDOR_SETTINGS = declared(VendorSettings)


# --- Redis ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RedisAuth:
    """Credentials and TLS for the Redis master and for the Sentinels (REDIS_* settings).

    Passwords come from the Secret (HOOKBRIDGE_REDIS_PASSWORD, HOOKBRIDGE_REDIS_SENTINEL_PASSWORD), never
    from a URL in a ConfigMap. ``tls`` applies to the master found through Sentinel (a URL says it with
    ``rediss://``); ``sentinel_tls`` to the Sentinels themselves.
    """

    username: str = setting("", str, "the master's ACL user", name="REDIS_USERNAME")
    password: str = setting(
        "",
        str,
        "the master's password (from the Secret; a URL with a password too is refused)",
        name="REDIS_PASSWORD",
        secret=True,
    )
    sentinel_username: str = setting("", str, "the Sentinels' own ACL user", name="REDIS_SENTINEL_USERNAME")
    sentinel_password: str = setting(
        "",
        str,
        "the Sentinels' own password (`requirepass` on the Sentinels)",
        name="REDIS_SENTINEL_PASSWORD",
        secret=True,
    )
    tls: bool = setting(
        False,
        parse_bool,
        "TLS to the master found through Sentinel, or to every node of a cluster; with a URL, TLS is "
        "`rediss://`",
        name="REDIS_TLS",
    )
    sentinel_tls: bool = setting(False, parse_bool, "TLS to the Sentinels", name="REDIS_SENTINEL_TLS")
    tls_ca_file: str = setting(
        "",
        str,
        "the CA that signed the Redis and Sentinel certificates (a path)",
        name="REDIS_TLS_CA_FILE",
        shown="system CAs",
    )
    tls_verify: bool = setting(
        True, parse_bool, "`false` skips certificate and host checks", name="REDIS_TLS_VERIFY"
    )


@dataclass(frozen=True)
class RedisConfig:
    """Where Redis is and how hard a write must land; validates that one address is given at most."""

    redis_url: str | None
    redis_sentinels: tuple[tuple[str, int], ...]
    redis_sentinel_master: str
    redis_cluster_nodes: tuple[tuple[str, int], ...]
    redis_wait_replicas: int
    redis_wait_timeout_ms: int
    redis: RedisAuth

    def __post_init__(self) -> None:
        given = [
            name
            for name, value in (
                ("REDIS_URL", self.redis_url),
                ("REDIS_SENTINELS", self.redis_sentinels),
                ("REDIS_CLUSTER_NODES", self.redis_cluster_nodes),
            )
            if value
        ]
        if len(given) > 1:
            raise SettingsError(
                f"{PREFIX}{given[1]}: give one of REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES"
            )
        url = self.redis_url
        if url and url.startswith("redis://") and self.redis.tls:
            raise SettingsError(f"{PREFIX}REDIS_TLS: with a URL, say TLS by its scheme (rediss://)")
        if url and self.redis.password and url_has_password(url):
            raise SettingsError(
                f"{PREFIX}REDIS_PASSWORD: the Redis URL carries credentials too; give them once"
            )

    @property
    def configured(self) -> bool:
        return bool(self.redis_url or self.redis_sentinels or self.redis_cluster_nodes)


# --- the consumers' sub-configs ------------------------------------------------------------------------
@dataclass(frozen=True)
class ApiLimits:
    """What the API enforces per request, per connection and per client."""

    max_document_bytes: int
    max_json_depth: int
    max_metadata_pairs: int
    max_metadata_value_bytes: int
    max_options_bytes: int
    submit_rate_per_s: float
    submit_burst: int
    max_subscriptions_per_client: int
    max_streams_per_client: int
    sse_heartbeat_s: float
    idempotency_ttl_s: float
    api_header_timeout_s: float
    api_body_idle_timeout_s: float
    api_keepalive_timeout_s: float
    api_max_connections: int


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker process runs: its concurrency, its lease, its metrics listener."""

    worker_concurrency: int
    worker_batch: int
    worker_idle_s: float
    worker_claim_gap_s: float
    delivery_claim_gap_s: float
    worker_metrics_port: int
    worker_metrics_host: str
    worker_role: WorkerRole
    worker_processes: int
    shutdown_grace_s: float
    sweep_interval_s: float
    lease_s: float
    vendor_timeout_s: float
    callback_timeout_s: float

    def __post_init__(self) -> None:
        outbound = max(self.vendor_timeout_s, self.callback_timeout_s)
        if self.lease_s <= outbound + 5:
            # A lease shorter than a request would let a second worker send the same request in parallel.
            raise SettingsError(
                f"{PREFIX}LEASE_S: must exceed the longest outbound timeout ({outbound:g}s) by more than 5s"
            )
        if self.worker_metrics_port and self.worker_metrics_port + self.worker_processes - 1 > 65535:
            raise SettingsError(f"{PREFIX}WORKER_PROCESSES: WORKER_METRICS_PORT + processes passes 65535")


@dataclass(frozen=True)
class DeliveryPolicy:
    """How callbacks are sent, retried, limited and where they may go."""

    callback_timeout_s: float
    retry_schedule: tuple[float, ...]
    callback_allowed_networks: tuple[Network, ...]
    callback_blocked_networks: tuple[Network, ...]
    subscription_max_in_flight: int
    subscription_disable_after_s: float
    secret_rotation_overlap_s: float
    client_max_in_flight: int


@dataclass(frozen=True)
class RunPolicy:
    """What the run lifecycle reads: how often progress is told, how long records live, what is inline."""

    progress_min_interval_s: float
    retention_s: float
    max_inline_result_bytes: int
    vendor_timeout_s: float
    vendor_max_transient_failures: int


def _build(cls: type[Any], source: object) -> Any:
    return cls(**{f.name: getattr(source, f.name) for f in dataclasses.fields(cls)})


# --- the settings --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    redis_url: str | None = setting(
        None,
        _redis_url,
        "`redis://`, `rediss://` or `unix://`. `api` and `worker` refuse to start without one of URL, "
        "SENTINELS, CLUSTER_NODES; `dev`/`demo` start a Redis of their own",
        shown="unset",
    )
    redis_sentinels: tuple[tuple[str, int], ...] = setting(
        (), parse_host_ports, "`host:port,host:port`: Sentinel instead of a URL", shown="unset"
    )
    redis_sentinel_master: str = setting("mymaster", _name, "the master's name at the Sentinels")
    redis_cluster_nodes: tuple[tuple[str, int], ...] = setting(
        (),
        parse_host_ports,
        "`host:port,host:port`: seed nodes of a Redis Cluster (or Valkey cluster); the client learns the "
        "rest from them. USERNAME, PASSWORD and TLS apply to every node",
        shown="unset",
    )
    redis_wait_replicas: int = setting(
        0,
        _int(1, 16, zero="no WAIT"),
        "replicas every write shown to anyone must reach first (`WAIT`): a submit's 202, a cancel, a "
        "subscription's change; a worker's transitions before their callbacks. Fewer in time: 503",
    )
    redis_wait_timeout_ms: int = setting(
        1000, _int(1, 60_000), "how long a write waits for REDIS_WAIT_REPLICAS (milliseconds)"
    )
    redis: RedisAuth = field(default_factory=RedisAuth)
    api_keys: tuple[tuple[str, str], ...] = setting(
        (),
        parse_api_keys,
        "`client_id:secret,...`; a secret may be `sha256:<hex>`. A client listed twice, or two clients "
        "with one secret, are refused",
        secret=True,
        shown="empty",
    )
    vendors: Mapping[str, VendorSettings] = field(default_factory=dict)
    vendor_timeout_s: float = setting(30.0, _duration(MS, 3600), "one vendor request")
    vendor_max_transient_failures: int = setting(
        10,
        _int(1, 1000),
        "transient faults in a row before a run fails `vendor_unreachable` (429s don't count); also the "
        "attempts at canceling or deleting a finished run at the vendor",
    )
    callback_timeout_s: float = setting(15.0, _duration(MS, 3600), "one callback attempt, in total")
    retry_schedule: tuple[float, ...] = setting(
        (5, 300, 1800, 7200, 18000, 36000, 36000),
        _SCHEDULE,
        "waits after the first attempt (`ms`, `s`, `m`, `h`; each 1 ms to 30 days), ±20 % jitter",
        shown="`5s,5m,30m,2h,5h,10h,10h`",
    )
    callback_allowed_networks: tuple[Network, ...] = setting(
        (),
        parse_networks,
        "CIDR list checked at registration and at every attempt: addresses here pass the blocked list",
        shown="empty",
    )
    # Unset or empty: this list; "none" turns it off (the metadata addresses stay blocked).
    callback_blocked_networks: tuple[Network, ...] = setting(
        _DEFAULT_BLOCKED,
        parse_blocked_networks,
        "CIDR list of refused callback addresses; empty means the default, `none` turns it off. The cloud "
        "metadata addresses are refused whatever either list says, and IPv6 forms that embed an IPv4 "
        "address are judged by the IPv4 rules too",
        shown="loopback, link-local, unspecified, multicast (v4 and v6)",
    )
    max_document_bytes: int = setting(
        50 * 1024 * 1024,
        _int(1, 1024 * 1024 * 1024),
        "larger documents are refused with 413; a vendor result asset past it fails the run "
        "`result_too_large`",
        shown="52428800 (50 MiB)",
    )
    max_inline_result_bytes: int = setting(
        256 * 1024,
        _int(1, 64 * 1024 * 1024),
        "larger results go by `result_url` (zero retention: always inline)",
        shown="262144 (256 KiB)",
    )
    max_json_depth: int = setting(32, _int(1, 512), "deeper JSON bodies are refused with 400")
    max_metadata_pairs: int = 50
    max_metadata_value_bytes: int = 500
    # RUF009: setting() is dataclasses.field() with the declaration in its metadata; the default is an enum.
    log_format: LogFormat = setting(  # noqa: RUF009
        LogFormat.CONSOLE, Choice(LogFormat), "`json` in production"
    )
    log_level: LogLevel = setting(  # noqa: RUF009
        LogLevel.INFO, Choice(LogLevel), "the lowest level logged"
    )
    lease_s: float = setting(
        90.0,
        _duration(1, DAY),
        "how long a claimed step or delivery is held; must exceed every outbound timeout by more than 5 s",
    )
    worker_concurrency: int = setting(500, _int(1, 100_000), "steps in flight per worker")
    worker_batch: int = setting(200, _int(1, 10_000), "items claimed per Redis call")
    worker_idle_s: float = setting(
        0.05, _duration(MS, 60), "the longest a worker sleeps between claims when nothing is due"
    )
    worker_claim_gap_s: float = setting(
        0.05,
        _duration(MS, 1, zero="claim again at once"),
        "the least time between two claims of run steps when the first took all that was due: what falls "
        "due meanwhile waits at most this long (a poll's lateness), and one claim takes it all",
    )
    delivery_claim_gap_s: float = setting(
        0.01,
        _duration(MS, 1, zero="claim again at once"),
        "the same for callbacks: at most this much is added to a callback's delay",
    )
    worker_metrics_port: int = setting(
        9090, _int(1, 65535, zero="off"), "the worker's `/healthz` and `/metrics`; 0 turns them off"
    )
    worker_metrics_host: str = setting(
        "0.0.0.0", _host, "the address they listen on (`127.0.0.1` keeps them local; `::` is IPv6 only)"
    )
    worker_role: WorkerRole = setting(  # noqa: RUF009
        WorkerRole.ALL,
        Choice(WorkerRole),
        "`runs` (vendor steps only) or `deliveries` (callbacks only): run them in separate processes so "
        "that callbacks never queue behind a backlog of polls",
    )
    worker_processes: int = setting(
        1,
        _int(1, 256),
        "worker processes per `hookbridge worker` (or `--processes N`), under a supervisor; process *i* "
        "serves `/healthz` and `/metrics` on `WORKER_METRICS_PORT` + *i*",
    )
    shutdown_grace_s: float = setting(
        25.0, _duration(MS, 3600), "on SIGTERM, how long work in flight may take to finish"
    )
    sweep_interval_s: float = setting(30.0, _duration(1, 60), "the sweeper's period")
    subscription_max_in_flight: int = setting(
        10,
        _int(1, 10_000),
        "deliveries in flight per subscription (a subscription may set its own); the rest wait aside",
    )
    subscription_disable_after_s: float = setting(
        5 * DAY,
        _duration(1, 365 * DAY, zero="disable at the first delivery that fails for good"),
        "a subscription whose deliveries fail for good for this long is disabled",
        shown="432000 (5 days)",
    )
    secret_rotation_overlap_s: float = setting(
        DAY,
        _duration(1, 30 * DAY, zero="no overlap"),
        "how long a rotated-out secret keeps signing",
    )
    progress_min_interval_s: float = setting(
        5.0,
        _duration(MS, 3600, zero="every progress"),
        "at most one `run.progress` per run this often",
    )
    retention_s: float = setting(
        7 * DAY,
        _duration(1, 365 * DAY),
        "ended runs, results, events and delivery logs are kept this long",
        shown="604800 (7 days)",
    )
    idempotency_ttl_s: float = setting(
        DAY, _duration(1, 30 * DAY), "how long an `Idempotency-Key` is remembered"
    )
    # Subscription secrets at rest: (key id, AES key); the first encrypts, every one decrypts.
    secret_keys: tuple[tuple[str, bytes], ...] = setting(
        (),
        parse_secret_keys,
        "`keyid:base64key,...` (16, 24 or 32 bytes each): subscription secrets are sealed in Redis with "
        "AES-GCM under the first key; every key listed can open them. **Unset, they are stored in Redis in "
        'plain text**: see "Secrets at rest" below',
        secret=True,
        shown="unset",
    )
    client_max_in_flight: int = setting(
        100,
        _int(1, 100_000),
        "callbacks in flight per client in each worker, and in each shard across every worker (a client "
        "whose subscriptions lie in k shards may have up to k times this in flight over several workers: "
        "docs/shards.md); a worker applies at most half its `WORKER_CONCURRENCY` (and says so at start "
        "when this is more), so that one client's hanging receivers leave every worker room for everyone "
        "else's callbacks",
    )
    # Per-client quotas (a hostile or runaway tenant costs itself, not the platform).
    max_subscriptions_per_client: int = setting(
        100, _int(1, 1_000_000), "more is `409 quota_exceeded` (one run fans out to every subscription)"
    )
    submit_rate_per_s: float = setting(
        100.0,
        _float(MS, 1_000_000),
        "submits per second per client (GCRA in Redis, shared by every API pod); past it `429 rate_limited` "
        "with `Retry-After`. Test sends, retries and recovers have a limiter of their own at the same rate",
    )
    submit_burst: int = setting(200, _int(1, 1_000_000), "the submits a client may send at once")
    max_options_bytes: int = setting(
        64 * 1024,
        _int(1, 16 * 1024 * 1024),
        "a run's `options` as JSON; more is `422 options_too_large`",
        shown="65536 (64 KiB)",
    )
    # The API's connection guard (slowloris): see service/serving/server.py.
    api_header_timeout_s: float = setting(
        10.0, _duration(MS, 3600), "a request's headers must be complete this long after the connection"
    )
    api_body_idle_timeout_s: float = setting(
        30.0, _duration(MS, 3600), "a request body that sends nothing for this long is closed"
    )
    api_keepalive_timeout_s: float = setting(
        5.0, _duration(MS, 3600), "an idle keep-alive connection is closed after this"
    )
    api_max_connections: int = setting(
        0,
        _int(1, 1_000_000, zero="the file limit minus 256"),
        "open connections; past it a new one evicts the one that waited longest for its headers, or gets "
        "`503` when all are busy",
        shown="0 (the file limit minus 256)",
    )
    # The event feed's server-sent event streams and long-polls (service/api/events.py, streams.py).
    sse_heartbeat_s: float = setting(
        15.0,
        _duration(0.1, 3600),
        "an event stream sends a `: keep-alive` comment after this long without events",
    )
    max_streams_per_client: int = setting(
        10,
        _int(1, 10_000),
        "open event streams and waiting long-polls per client, across every API pod; past it "
        "`429 too_many_streams`",
    )
    sse_send_timeout_s: float = setting(
        30.0,
        _duration(0.1, 3600),
        "an event stream whose reader takes nothing for this long is closed (what it holds is one page and "
        "the socket's buffers)",
    )
    sse_max_s: float = setting(
        3600.0,
        _duration(1, 86400),
        "an event stream's longest life; it then ends cleanly and the client resumes with `Last-Event-ID`",
    )
    feed_blocking_connections: int = setting(
        200,
        _int(1, 10_000),
        "this pod's lanes for streams and waiting long-polls (one blocking Redis connection each); a "
        "client takes at most `MAX_STREAMS_PER_CLIENT` of them, and the last quarter is kept for clients "
        "that hold none; past it `429 too_many_streams`",
    )
    feed_scan_budget: int = setting(
        10_000,
        _int(100, 1_000_000),
        "feed entries one long-poll may scan, and a client at once (`FEED_SCAN_RATE_PER_S`'s burst); a "
        "filter that matches nothing then answers with the iterator instead of rescanning",
    )
    feed_scan_rate_per_s: float = setting(
        10_000.0,
        _float(1, 10_000_000),
        "feed entries a client may scan per second, across every API pod and all its reads (pages, "
        "long-polls, streams; a GCRA in Redis, `FEED_SCAN_BUDGET` at once); past it a long-poll or a "
        "stream waits for it to refill and a page read is `429 rate_limited` with `Retry-After`",
    )

    # The consumers' views, built (and so validated) with the settings.
    connection: RedisConfig = field(init=False, repr=False, compare=False)
    api_limits: ApiLimits = field(init=False, repr=False, compare=False)
    worker: WorkerConfig = field(init=False, repr=False, compare=False)
    delivery: DeliveryPolicy = field(init=False, repr=False, compare=False)
    run_policy: RunPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, cls in (
            ("connection", RedisConfig),
            ("api_limits", ApiLimits),
            ("worker", WorkerConfig),
            ("delivery", DeliveryPolicy),
            ("run_policy", RunPolicy),
        ):
            object.__setattr__(self, name, _build(cls, self))

    def vendor(self, name: str) -> VendorSettings:
        return self.vendors[name]


# --- the table -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One variable: its full name, its declaration, its default, and whose it is (``""``: Settings,
    ``"redis"``: RedisAuth, else a vendor's name)."""

    name: str
    setting: Declared
    default: Any
    owner: str = ""

    @property
    def secret(self) -> bool:
        return self.setting.secret or is_secret(self.name)


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A plugin's own parser, held to the same rule as ours: no NaN or infinity gets through."""

    def check(text: str) -> Any:
        value = parse(text)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    return check


def _vendor_rows(spec: VendorDeclaration) -> list[Row]:
    if not VENDOR_NAME.match(spec.name):
        raise VendorPluginError(f"vendor plugin {spec.name!r}: the name must match {VENDOR_NAME.pattern}")
    head = f"{PREFIX}{spec.name.upper()}_"
    d = spec.defaults
    rows = [
        Row(head + s.name, s, "" if s.attr == "api_key" else getattr(d, s.attr), spec.name)
        for s in VENDOR_SETTINGS
    ]
    common = {s.name for s in VENDOR_SETTINGS}
    for own in spec.settings:
        if own.name in common:
            raise VendorPluginError(
                f"vendor plugin {spec.name!r}: setting {own.name} is one of the common vendor settings"
            )
        decl = Declared(own.name, f"extra.{own.key}", _checked(own.parse), own.description)
        rows.append(Row(head + own.name, decl, own.default, spec.name))
    for group in spec.budgets:  # {V}_SUBMIT_MAX_RPS, {V}_POLL_MAX_RPS (contract §10)
        name = f"{group.name.upper()}_MAX_RPS"
        kinds = ", ".join(sorted(group.kinds))
        doc = f"requests per second of kind {kinds}, with a 429 pause of their own, shared by every worker"
        decl = Declared(name, f"extra.{group.name}_max_rps", _float(MS, 100_000, zero="no budget"), doc)
        rows.append(Row(head + name, decl, group.max_rps, spec.name))
    unknown = sorted(set(spec.required) - common - {own.name for own in spec.settings})
    if unknown:
        raise VendorPluginError(
            f"vendor plugin {spec.name!r}: required names no setting of it: {', '.join(unknown)}"
        )
    return rows


def table(vendors: Mapping[str, VendorDeclaration] | None = None) -> list[Row]:
    """Every setting, in the declared order: the one table that the loader, ``hookbridge settings``, the
    README and the chart's schema read. ``vendors`` are the installed specs (none: no vendor rows)."""
    defaults = Settings()
    rows: list[Row] = []
    for f in dataclasses.fields(Settings):
        if f.name == "redis":
            rows += [
                Row(PREFIX + s.name, s, getattr(defaults.redis, s.attr), "redis") for s in declared(RedisAuth)
            ]
        elif f.name == "vendors":
            own = {r.name for r in rows}
            for spec in (vendors or {}).values():
                for row in _vendor_rows(spec):
                    if row.name in own:
                        raise VendorPluginError(
                            f"vendor plugin {spec.name!r}: {row.name} is already a setting"
                        )
                    rows.append(row)
        elif _META in f.metadata:
            s = next(d for d in declared(Settings) if d.attr == f.name)
            rows.append(Row(PREFIX + s.name, s, getattr(defaults, f.name)))
    # A vendor's settings may not shadow a later top-level one either.
    names = [r.name for r in rows]
    for row in rows:
        if row.owner not in ("", "redis") and names.count(row.name) > 1:
            raise VendorPluginError(f"vendor plugin {row.owner!r}: {row.name} is already a setting")
    return rows


# --- reading -------------------------------------------------------------------------------------------
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


def _resolve_files(env: Mapping[str, str], known: Mapping[str, Row]) -> tuple[dict[str, str], dict[str, str]]:
    """``HOOKBRIDGE_X_FILE=/path`` gives ``HOOKBRIDGE_X`` the file's content, one trailing newline
    stripped. Returns the environment with those replaced, and each replaced name's file variable."""
    out = dict(env)
    origin: dict[str, str] = {}
    for name, path in env.items():
        if not name.startswith(PREFIX) or not name.endswith("_FILE") or name in known:
            continue  # a setting whose own name ends in _FILE (REDIS_TLS_CA_FILE) keeps its meaning
        base = name.removesuffix("_FILE")
        if base not in known:
            continue  # refused as unknown below
        if base in env:
            raise SettingsError(f"{name}: {base} is set too; give one of them")
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise SettingsError(
                f"{name}: cannot read {path!r}: {exc.strerror or type(exc).__name__}"
            ) from None
        if len(data) > MAX_FILE_BYTES:
            raise SettingsError(f"{name}: {path!r} is larger than {MAX_FILE_BYTES} bytes")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise SettingsError(f"{name}: {path!r} is not UTF-8 text") from None
        out[base] = text.removesuffix("\n")
        del out[name]
        origin[base] = name
    return out, origin


def _read(env: Mapping[str, str], name: str, parse: Callable[[str], Any], shown: str = "") -> Any:
    try:
        return parse(env[name])
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{shown or name}: {exc}") from None


def load(
    env: Mapping[str, str] | None = None, vendors: Mapping[str, VendorDeclaration] | None = None
) -> Settings:
    """Build :class:`Settings` from the environment (or ``env``), validating every value.

    ``vendors``: the vendors' specs, which the composition root passes (``service.vendors.registry``'s
    ``load_settings`` passes the installed ones); none: no vendor.
    """
    env = _without_service_links(os.environ if env is None else env)
    specs = dict(vendors or {})
    rows = table(specs)
    known = {r.name: r for r in rows}
    env, origin = _resolve_files(env, known)
    for name in env:
        if name.startswith(PREFIX) and not name.startswith(PREFIX + "SIM_") and name not in known:
            raise SettingsError(f"{name}: unknown setting (see the README for the list)")

    values: dict[str, Any] = {}
    redis: dict[str, Any] = {}
    per_vendor: dict[str, dict[str, Any]] = {name: {} for name in specs}
    for row in rows:
        if row.name not in env or (env[row.name] == "" and not row.setting.numeric):
            continue  # unset, or empty: the default (an empty number is refused by its parser)
        value = _read(env, row.name, row.setting.parse, origin.get(row.name, ""))
        target = values if row.owner == "" else redis if row.owner == "redis" else per_vendor[row.owner]
        target[row.setting.attr] = value

    try:
        values["redis"] = RedisAuth(**redis)
        values["vendors"] = {name: _vendor(spec, per_vendor[name]) for name, spec in specs.items()}
        return Settings(**values)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, SettingsError):
            raise
        raise SettingsError(f"{PREFIX}: {exc}") from None


def _vendor(spec: VendorDeclaration, given: Mapping[str, Any]) -> VendorSettings:
    d = spec.defaults
    cfg: dict[str, Any] = {s.attr: getattr(d, s.attr) for s in VENDOR_SETTINGS if s.attr != "api_key"}
    cfg["api_key"] = ""
    extra = {s.key: s.default for s in spec.settings}
    extra.update({f"{group.name}_max_rps": group.max_rps for group in spec.budgets})
    for attr, value in given.items():
        if attr.startswith("extra."):
            extra[attr.removeprefix("extra.")] = value
        else:
            cfg[attr] = value
    cfg["base_url"] = str(cfg["base_url"]).rstrip("/")
    warnings = _raised_to_floor(spec, cfg)
    attrs = {s.name: s.attr for s in VENDOR_SETTINGS} | {s.name: f"extra.{s.key}" for s in spec.settings}
    head = f"{PREFIX}{spec.name.upper()}_"
    missing = tuple(head + name for name in spec.required if attrs[name] not in given)
    return VendorSettings(name=spec.name, extra=extra, spec=spec, missing=missing, warnings=warnings, **cfg)


def _raised_to_floor(spec: VendorDeclaration, cfg: dict[str, Any]) -> tuple[str, ...]:
    """A ``POLL_INITIAL_S`` below the vendor's documented minimum is raised to it (contract §10), and the
    intervals that must not be below it with it; the warning says what was given."""
    floor = spec.defaults.min_poll_s
    if floor <= 0 or cfg["poll_initial_s"] >= floor:
        return ()
    given = cfg["poll_initial_s"]
    cfg["poll_initial_s"] = floor
    cfg["poll_max_s"] = max(cfg["poll_max_s"], floor)
    cfg["pause_max_s"] = max(cfg["pause_max_s"], floor)
    var = f"{PREFIX}{spec.name.upper()}_POLL_INITIAL_S"
    return (
        f"{var}={given:g}s is below {spec.name}'s documented minimum of {floor:g}s between polls; "
        f"using {floor:g}s",
    )


def warnings(settings: Settings) -> list[str]:
    """What the loader changed of the given settings (a vendor's poll floor), to log at start."""
    return [note for vendor in settings.vendors.values() for note in vendor.warnings]


# --- showing -------------------------------------------------------------------------------------------
def show(value: Any) -> str:
    """A value as its variable would say it (what ``hookbridge settings`` prints)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(
            f"{v[0]}:{v[1]}" if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], int) else show(v)
            for v in value
        )
    return str(value)


REDACTED = "<redacted>"


def _current(settings: Settings, row: Row) -> Any:
    if row.owner == "":
        return getattr(settings, row.setting.attr)
    if row.owner == "redis":
        return getattr(settings.redis, row.setting.attr)
    vendor = settings.vendors[row.owner]
    if row.setting.attr.startswith("extra."):
        return vendor.extra.get(row.setting.attr.removeprefix("extra."), row.default)
    return getattr(vendor, row.setting.attr)


def effective(settings: Settings) -> list[tuple[str, str]]:
    """The running configuration, every variable with its value; secrets redacted (set or not is shown),
    and a Redis URL's password too."""
    specs = {name: v.spec for name, v in settings.vendors.items() if v.spec is not None}
    out = []
    for row in table(specs):
        value = _current(settings, row)
        if row.secret:
            text = REDACTED if value else ""
        elif row.name == PREFIX + "REDIS_URL" and value:
            text = redact_url(str(value))
        else:
            text = show(value)
        out.append((row.name, text))
    return out


def describe(vendors: Mapping[str, VendorDeclaration]) -> list[tuple[str, str]]:
    """Every setting name with its default as a Python literal (the form this function always gave)."""
    return [
        (row.name, repr(row.default.value if isinstance(row.default, enum.Enum) else row.default))
        for row in table(vendors)
    ]


def defaults(vendors: Mapping[str, VendorDeclaration]) -> list[tuple[str, str]]:
    """Every setting name with its default as its variable would say it (``hookbridge settings``)."""
    return [(row.name, show(row.default)) for row in table(vendors)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(vendors: Mapping[str, VendorDeclaration]) -> str:
    """The README's configuration table: the settings, then each vendor's (common ones once, as ``{V}_``,
    with every vendor's default), then the vendors' own."""
    lines = ["| setting | default | what |", "|---|---|---|"]
    rows = table(vendors)
    for row in rows:
        if row.owner in ("", "redis"):
            default = row.setting.shown or (f"`{show(row.default)}`" if show(row.default) else "unset")
            lines.append(
                f"| `{row.name.removeprefix(PREFIX)}` | {_cell(default)} | {_cell(_full_doc(row))} |"
            )
    for s in VENDOR_SETTINGS:
        defaults = ", ".join(
            f"{spec.name} `{show('' if s.attr == 'api_key' else getattr(spec.defaults, s.attr))}`"
            for spec in vendors.values()
            if s.attr != "api_key"
        )
        doc = _full_doc(Row(s.name, s, None, "vendor"))
        lines.append(f"| `{{V}}_{s.name}` | {_cell(defaults or 'unset')} | {_cell(doc)} |")
    for row in rows:
        if row.owner not in ("", "redis") and row.setting.attr.startswith("extra."):
            default = f"`{show(row.default)}`" if show(row.default) else "unset"
            lines.append(
                f"| `{row.name.removeprefix(PREFIX)}` | {_cell(default)} | {_cell(row.setting.doc)} |"
            )
    return "\n".join(lines) + "\n"


def _full_doc(row: Row) -> str:
    doc = row.setting.doc
    parse = row.setting.parse
    if isinstance(parse, Number):
        doc += f" ({parse.describe()})"
    elif isinstance(parse, Choice):
        doc += f" (one of {', '.join(f'`{c}`' for c in parse.choices)})"
    if row.secret:
        doc += "; a secret: from the Secret or a `_FILE`"
    return doc


def iter_numeric(vendors: Mapping[str, VendorDeclaration] | None = None) -> Iterator[Row]:
    """The numeric settings (their parser bounds them): what the table-driven tests feed nonsense to."""
    return (row for row in table(vendors) if row.setting.numeric)


__all__ = [
    "ApiLimits",
    "Choice",
    "DeliveryPolicy",
    "LogFormat",
    "LogLevel",
    "Number",
    "RedisAuth",
    "RedisConfig",
    "Row",
    "RunPolicy",
    "Settings",
    "SettingsError",
    "VendorPluginError",
    "VendorSettings",
    "WorkerConfig",
    "WorkerRole",
    "defaults",
    "describe",
    "effective",
    "load",
    "parse_duration",
    "parse_networks",
    "parse_schedule",
    "table",
]
