"""One step of one run: claim → call → decide → apply.

The core names the call (``runs.next_action``: tell the vendor of an ended run, time out at ``MAX_RUN_S``,
submit, or poll), the step makes it and brings back what it got as one value (an answer, or the fault it
raised, mapped once by ``worker/decide.py``), the core decides the change (``runs.decide``, pure) and the
step applies it (one atomic script, batched with the other steps of the same turn). The calls are
``worker/calls.py``'s; nothing is decided here: the step's own code is the sequence and the apply.

A step is idempotent: it may run twice (a worker died after the vendor call, before the write), and the
second time changes nothing twice. The vendor idempotency key (Nutrient) or the adapter's checkpoint
(Cloudsquid) keeps a repeated submit from creating a second vendor run; the version check in the
store's transition keeps a late or duplicate write from landing.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field, replace

import structlog
from redis.exceptions import RedisError

from service.config.settings import Settings, VendorSettings
from service.core import runs
from service.core.clock import SYSTEM, Clock
from service.core.domain import TERMINAL, FaultKind
from service.core.lifecycle import Transition
from service.core.records import Run
from service.core.runs import Action, Fault
from service.observability import logs, tracing
from service.observability.metrics import RUN_TIMEOUTS, VENDOR_CREDITS, client_label
from service.store import Applied, ClaimedRun, Conflict, Outcome
from service.store.ports import RunSteps
from service.vendors.base import Call, VendorAdapter
from service.worker import decide
from service.worker.budget import StepTicket
from service.worker.calls import VendorCalls
from service.worker.transitions import TransitionBatcher

log = logs.get("hookbridge.worker")


@dataclass
class RunStepper:
    """One step of a run: call the vendor, ask the core what follows, apply it."""

    store: RunSteps
    settings: Settings
    adapters: Mapping[str, VendorAdapter]
    _: KW_ONLY
    # Told the shards of the deliveries a change's events made due (the delivery pump's due_in).
    on_delivery_due: Callable[[frozenset[int]], None] = lambda shards: None
    rng: random.Random = field(default_factory=random.Random)
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        # The changes of steps that finish together share one round trip to Redis.
        self._transitions = TransitionBatcher(self.store)
        # The vendor calls (worker/calls.py): a submit's checkpoint goes through the same batch.
        self.calls = VendorCalls(
            self.store, self.settings, self.adapters, self._transitions, clock=self.clock
        )
        # What the decisions read of the configuration: the run policy, not the whole settings.
        self.limits = self.settings.run_policy

    async def close(self) -> None:
        """Waits for the changes of the steps that ended (before the store closes)."""
        await self._transitions.settle()

    async def step(self, claimed: ClaimedRun) -> None:
        run = claimed.run
        # What the step's requests tell the vendor's budget: the slot the claim took for the first one,
        # and whether the step is the vendor's probe after a 429 (worker/budget.py). It travels in the
        # adapter's call, to each request's extensions.
        ticket = StepTicket(run.vendor, prepaid=(claimed.slot_ms, claimed.due_ms), probe=claimed.probe)
        call = Call(
            run_id=run.id,
            zero_retention=run.zero_retention,
            result_url=f"/v1/runs/{run.id}/result",
            ticket=ticket,
        )
        # Tokens, not bound_contextvars(): that one reads the whole logging context first, on every step.
        tokens = structlog.contextvars.bind_contextvars(run_id=run.id, vendor=run.vendor)
        try:
            await self._step(claimed, call)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    async def _step(self, claimed: ClaimedRun, call: Call) -> None:
        run = claimed.run
        policy = self.settings.vendor(run.vendor)
        action = runs.next_action(run, policy, self._now())
        run, called = await self.calls.make(action, claimed, call)
        try:
            outcome = await self._decide_and_apply(run, called, policy)
        except RedisError:
            raise  # Redis is unreachable: the lease hands the step back once it returns
        except Exception as exc:
            # The answer could not be decided or written (an adapter's value the core cannot read, a bug):
            # a fault of this step like any other, bounded by its kind, never a lease that comes back for
            # ever. A submit the vendor took is not sent again unless the vendor is idempotent.
            fault = decide.fault_of(exc)
            idempotent = bool(getattr(self.adapters[run.vendor], "submit_idempotent", False))
            if isinstance(called, runs.Accepted) and not idempotent:
                fault = replace(fault, kind=FaultKind.AMBIGUOUS, answer=called.answer.vendor_run_id)
            log.error("deciding the step's answer failed", error=fault.message)  # cleaned: no traceback
            outcome = await self._decide_and_apply(
                run, runs.Told(fault=fault) if action is Action.TELL else fault, policy
            )
        if action is Action.TIME_OUT and isinstance(outcome, Applied):
            RUN_TIMEOUTS.labels(run.vendor).inc()
        if isinstance(called, runs.Accepted):
            vendor_run_id = called.answer.vendor_run_id
            log.info("run submitted", run_id=run.id, vendor=run.vendor, vendor_run_id=vendor_run_id)
            if isinstance(outcome, Conflict) and outcome.current.status in TERMINAL:
                # Canceled while we were submitting: the vendor has a run nobody wants any more.
                await self.calls.withdraw(run, called, call)

    # Applying -----------------------------------------------------------------------------------

    def _now(self) -> int:
        return self.clock.now_ms()

    async def _decide_and_apply(self, run: Run, called: runs.Called, policy: VendorSettings) -> Outcome:
        change = runs.decide(run, called, policy, self.limits, now_ms=self._now(), jitter=self.rng)
        if isinstance(called, Fault) and called.kind in (FaultKind.TRANSIENT, FaultKind.AMBIGUOUS):
            log.warning("vendor fault", kind=called.kind, error=called.message, attempt=change.run.transient)
        return await self._apply(change)

    async def _apply(self, change: Transition) -> Outcome:
        """The change, in the batch of this turn. A run's end (the only change that sets ``ttl_ms``) is
        traced, its credits counted, and the delivery pump woken; the batcher counts it in
        hookbridge_runs_total."""
        new = change.run
        if change.ttl_ms is None:
            outcome = await self._transitions.apply(change)
            if isinstance(outcome, Applied) and outcome.due_in:
                self.on_delivery_due(outcome.due_in)
            return outcome
        with tracing.run_finish(new):
            outcome = await self._transitions.apply(change)
        if isinstance(outcome, Applied):
            error = (new.error or {}).get("code")
            log.info("run finished", run_id=new.id, vendor=new.vendor, status=new.status, error=error)
            credits = (new.usage or {}).get("credits")
            if isinstance(credits, int | float) and credits > 0:
                # Labels stay bounded: vendors are a fixed set, clients come from HOOKBRIDGE_API_KEYS.
                VENDOR_CREDITS.labels(new.vendor, client_label(new.client)).inc(credits)
            # The delivery pump learns that work is due now, and where, without waiting for its next tick.
            self.on_delivery_due(outcome.due_in)
        elif isinstance(outcome, Conflict):
            log.info("late result discarded", run_id=new.id, vendor=new.vendor)
        return outcome
