"""The narrow views of the store that its consumers are typed against: a consumer names the few calls it
makes, not the whole store, so that a test can see what it touches and a change to one aggregate does
not reach consumers that never call it. The aggregates (``runs.Runs``, ...) fit them structurally."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from service.core.domain import AttemptOutcome
from service.core.records import Attempt, Delivery, Run, Subscription, Transition
from service.store.codec import ClaimedDelivery, ClaimedRun
from service.store.outcomes import Outcome


class RunTransitions(Protocol):
    """What applies a run's changes (the worker's batcher, the API's cancel)."""

    async def transition(self, change: Transition) -> Outcome: ...

    async def transitions(self, changes: Sequence[Transition]) -> list[Outcome | Exception]: ...


class RunSteps(RunTransitions, Protocol):
    """What a run's step reads and writes besides its transition: the run's document."""

    async def get_document(self, run_id: str) -> bytes | None: ...

    async def keep_document(self, run_id: str, content: bytes, ttl_s: float) -> bytes: ...


class RunReads(Protocol):
    """What reads a run by its id (the API's ownership check, the delivery's span)."""

    async def get_run(self, run_id: str) -> Run | None: ...


class RunClaims(Protocol):
    """What the run pump claims and hands back."""

    async def claim_runs(
        self,
        vendor: str,
        now_ms: int,
        limit: int,
        lease_ms: int,
        interval_ms: float,
        lookahead_ms: int,
        probe_lease_ms: int = 60_000,
    ) -> tuple[list[ClaimedRun], float | None]: ...

    async def release_runs(self, vendor: str, leases: Sequence[tuple[str, float]], now_ms: int) -> int: ...

    def forget_due(self) -> None: ...


class VendorLimits(Protocol):
    """The vendor's shared budget and pause (``worker/budget.py``)."""

    async def budget_take(self, vendor: str, now_ms: int, interval_ms: float) -> float: ...

    async def pause_limited(
        self,
        vendor: str,
        now_ms: int,
        retry_after_ms: float | None,
        floor_ms: float,
        cap_ms: float,
        probe: str | None,
    ) -> tuple[float, int]: ...

    async def pause_settle(self, vendor: str, now_ms: int, probe: str, *, answered: bool) -> bool: ...


class DeliveryClaims(Protocol):
    """What the delivery pump claims and hands back."""

    async def claim_deliveries(
        self,
        now_ms: int,
        limit: int,
        lease_ms: int,
        *,
        client_max: int | None = None,
        held: Mapping[str, int] | None = None,
    ) -> tuple[list[ClaimedDelivery], float | None]: ...

    async def unpark(self, client: str, now_ms: int, *, ended_in: int | None = None) -> bool: ...

    def forget_due(self) -> None: ...

    def made_due(self, shards: Iterable[int], now_ms: float) -> None: ...

    async def release_deliveries(self, leases: Sequence[tuple[str, str, str, float]], now_ms: int) -> int: ...


class DeliveryResults(Protocol):
    """What records a delivery attempt's outcome."""

    async def record_attempt(
        self,
        delivery: str | Delivery,
        outcome: AttemptOutcome,
        *,
        now_ms: int,
        attempt: Attempt | None,
        next_at_ms: int | None = None,
        status_code: int | None = None,
    ) -> str: ...


class SecretReads(Protocol):
    """What opens a subscription's signing secrets."""

    def open_secrets(self, sub: Subscription) -> list[list[Any]]: ...


# The consumers that touch more than one aggregate are typed against the store's shape: the aggregates
# they use, each through its narrow view (the Store fits these; a read-only property is covariant).


class RunPumpStore(Protocol):
    """The run pump: claims runs, and hands a probe back to the vendor's pause when it could not go."""

    @property
    def runs(self) -> RunClaims: ...

    @property
    def limits(self) -> VendorLimits: ...


class DelivererStore(Protocol):
    """The deliverer: opens the secrets, records the attempt, reads the run for the attempt's span."""

    @property
    def runs(self) -> RunReads: ...

    @property
    def deliveries(self) -> DeliveryResults: ...

    @property
    def subscriptions(self) -> SecretReads: ...
