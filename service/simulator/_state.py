"""Simulator state shared by the vendors: the clock, the seeded RNGs, run timelines and the request log.

A run's status is never stored: it is recomputed from its :class:`Timeline` and the monotonic clock on
every request, so the simulator needs no background tasks and a test can swap in a
:class:`~service.core.clock.ManualClock`.
"""

from __future__ import annotations

import enum
import json
import random
import uuid
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol, Self

from starlette.requests import Request

from service.core.clock import Clock

from ._documents import SLOW_FACTOR, decode_base64
from .config import SimulatorConfig

QUEUED_SHARE = 0.2
# Bounds the request log's memory in long benchmarks; the oldest entries go first.
LOG_LIMIT = 100_000
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class Phase(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True)
class Timeline:
    """When a run leaves the queue and when it finishes; ``finishes_at`` None means never."""

    created_at: float
    starts_at: float
    finishes_at: float | None

    def phase(self, now: float) -> Phase:
        if now < self.starts_at:
            return Phase.QUEUED
        if self.finishes_at is None or now < self.finishes_at:
            return Phase.RUNNING
        return Phase.FINISHED

    def fraction(self, now: float, nominal_finish: float) -> float:
        """Share of the running phase done, measured against ``nominal_finish`` for runs that never end."""
        span = nominal_finish - self.starts_at
        if span <= 0:
            return 1.0
        return min(1.0, max(0.0, (now - self.starts_at) / span))


@dataclass
class LogEntry:
    t: float
    vendor: str
    method: str
    path: str
    status: int | None = None
    fault: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "vendor": self.vendor,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "fault": self.fault,
        }


@dataclass
class TokenBucket:
    """``rate`` tokens a second up to ``burst``; each request takes one or is refused."""

    tokens: float
    at: float

    def take(self, now: float, rate: float, burst: int) -> bool:
        self.tokens = min(float(burst), self.tokens + max(0.0, now - self.at) * rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def _rng(seed: int, purpose: str) -> random.Random:
    # Separate streams, so that e.g. a fault draw never shifts the durations of later runs.
    return random.Random(f"{seed}:{purpose}")


@dataclass
class SimState:
    config: SimulatorConfig
    clock: Clock
    log: deque[LogEntry] = field(default_factory=lambda: deque(maxlen=LOG_LIMIT))
    fault_rng: random.Random = field(init=False)
    run_rng: random.Random = field(init=False)
    id_rng: random.Random = field(init=False)
    # (vendor, the API key as presented) -> its bucket
    buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        seed = self.config.seed
        self.fault_rng = _rng(seed, "faults")
        self.run_rng = _rng(seed, "runs")
        self.id_rng = _rng(seed, "ids")

    def admit(self, vendor: str, key: str) -> bool:
        """Takes a token from the bucket of ``vendor`` and ``key``; False when the key is over its limit."""
        rate = float(getattr(self.config, f"{vendor}_rps"))
        if rate <= 0:
            return True
        burst = int(getattr(self.config, f"{vendor}_burst"))
        now = self.now()
        bucket = self.buckets.get((vendor, key))
        if bucket is None:
            bucket = self.buckets[(vendor, key)] = TokenBucket(tokens=float(burst), at=now)
        return bucket.take(now, rate, burst)

    def now(self) -> float:
        return self.clock.monotonic()

    def wall_iso(self, monotonic: float | None = None, *, zulu: bool = True) -> str:
        """RFC 3339 time of a monotonic instant (default now); ``zulu=False`` gives Uptiq's naive form."""
        now = self.clock.monotonic()
        at = self.clock.time() - (now - (monotonic if monotonic is not None else now))
        stamp = datetime.fromtimestamp(at, tz=UTC)
        if zulu:
            return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return stamp.replace(tzinfo=None).isoformat(timespec="microseconds")

    def new_uuid(self) -> str:
        return str(uuid.UUID(int=self.id_rng.getrandbits(128), version=4))

    def new_nutrient_id(self) -> str:
        return "".join(self.id_rng.choice(_CROCKFORD) for _ in range(26))

    def new_timeline(self, *, slow: bool, never_finishes: bool) -> Timeline:
        low, high = self.config.duration_s
        duration = self.run_rng.uniform(low, high) * (SLOW_FACTOR if slow else 1.0)
        now = self.now()
        starts_at = now + duration * QUEUED_SHARE
        return Timeline(
            created_at=now, starts_at=starts_at, finishes_at=None if never_finishes else now + duration
        )

    def nominal_duration(self, timeline: Timeline) -> float:
        """Length a run would have had; gives stuck runs a progress scale."""
        return (timeline.starts_at - timeline.created_at) / QUEUED_SHARE


def sim_state(request: Request) -> SimState:
    state = request.app.state.sim
    assert isinstance(state, SimState)
    return state


class BadRequest(Exception):
    """A request the vendor's document refuses with 400; the message goes into the error body."""


class SimRun(Protocol):
    """What every vendor's run record offers to the simulator's own endpoints."""

    @property
    def id(self) -> str: ...
    @property
    def timeline(self) -> Timeline: ...
    def status(self, now: float) -> str: ...


class VendorStore:
    """A vendor's runs, kept on the app's state under the vendor's name; the simulator's own endpoints
    (``/_sim/stats``, ``/_sim/runs``) read them."""

    vendor: ClassVar[str]

    @classmethod
    def of(cls, request: Request) -> Self:
        store = getattr(request.app.state, cls.vendor)
        assert isinstance(store, cls)
        return store

    def all_runs(self) -> Iterable[SimRun]:
        raise NotImplementedError

    def status_counts(self, now: float) -> dict[str, int]:
        return count_statuses(self.all_runs(), now)

    def summaries(self, now: float) -> list[tuple[str, str, float, float | None]]:
        return summarize(self.all_runs(), now)


def base64_field(value: Any, name: str, when: str = "") -> bytes:
    """The bytes of a base64 request field; a :class:`BadRequest` naming it when it is not a non-empty
    base64 string (``when`` says in which case the field has to be one)."""
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{name} must be a base64 string{when}")
    try:
        content = decode_base64(value)
    except ValueError:
        raise BadRequest(f"{name} is not valid base64") from None
    if not content:
        raise BadRequest(f"{name} is empty")
    return content


async def json_object(request: Request, what: str) -> dict[str, Any]:
    """The request's JSON object; a :class:`BadRequest` naming ``what`` (the vendor's word for the body)
    when it is not one."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest(f"{what} is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return body


def count_statuses(runs: Iterable[SimRun], now: float) -> dict[str, int]:
    """How many runs are in each status, for ``GET /_sim/stats``."""
    return dict(Counter(run.status(now) for run in runs))


def summarize(runs: Iterable[SimRun], now: float) -> list[tuple[str, str, float, float | None]]:
    """(id, status, created_at, planned end) of every run, for ``GET /_sim/runs``."""
    return [(run.id, run.status(now), run.timeline.created_at, run.timeline.finishes_at) for run in runs]


async def bounded_body(request: Request, limit: int) -> bytes | None:
    """The request body, read as it streams in; None as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
