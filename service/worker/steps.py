"""One step of one run: claim → call → decide → apply.

The core names the call (``runs.next_action``: tell the vendor of an ended run, time out at ``MAX_RUN_S``,
submit, or poll), the step makes it and brings back what it got as one value (an answer, or the fault it
raised, mapped once by ``worker/decide.py``), the core decides the change (``runs.decide``, pure) and the
step applies it (one atomic script, batched with the other steps of the same turn). Nothing is decided
here: the step's own code is the calls, the safety of what the vendor wrote, and the apply.

A step is idempotent: it may run twice (a worker died after the vendor call, before the write), and the
second time changes nothing twice. The vendor idempotency key (Nutrient) or the adapter's checkpoint
(Cloudsquid) keeps a repeated submit from creating a second vendor run; the version check in the
store's transition keeps a late or duplicate write from landing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog
from redis.exceptions import RedisError

from service.config.settings import Settings, VendorSettings
from service.core import lifecycle, runs
from service.core.clock import SYSTEM, Clock
from service.core.domain import QUEUED, TERMINAL, FaultKind
from service.core.lifecycle import Transition
from service.core.records import Run
from service.core.runs import Action, Fault
from service.observability import logs, tracing
from service.observability.metrics import RUN_TIMEOUTS, VENDOR_CREDITS, client_label
from service.store import Applied, ClaimedRun, Conflict, Outcome
from service.store.ports import RunSteps
from service.vendors import base, text
from service.vendors.base import (
    Call,
    DeletesRuns,
    Document,
    SubmitRequest,
    VendorAdapter,
    VendorTransient,
)
from service.worker import decide
from service.worker.budget import StepTicket
from service.worker.deadlines import Deadlines
from service.worker.transitions import TransitionBatcher

log = logs.get("hookbridge.worker")


@dataclass
class RunStepper:
    """One step of a run: call the vendor, ask the core what follows, apply it."""

    store: RunSteps
    settings: Settings
    adapters: Mapping[str, VendorAdapter]
    _: KW_ONLY
    on_delivery_due: Callable[[], None] = lambda: None
    rng: random.Random = field(default_factory=random.Random)
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        # The changes of steps that finish together share one round trip to Redis.
        self._transitions = TransitionBatcher(self.store)
        # The steps' timeouts, on one loop timer (asyncio.timeout arms one per step).
        self._deadlines = Deadlines()
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
        adapter = self.adapters[run.vendor]
        action = runs.next_action(run, policy, self._now())
        run, called = await self._call(action, claimed, adapter, policy, call)
        change = runs.decide(run, called, policy, self.limits, now_ms=self._now(), jitter=self.rng)
        if isinstance(called, Fault) and called.kind in (FaultKind.TRANSIENT, FaultKind.AMBIGUOUS):
            log.warning("vendor fault", kind=called.kind, error=called.message, attempt=change.run.transient)
        outcome = await self._apply(change)
        if action is Action.TIME_OUT and isinstance(outcome, Applied):
            RUN_TIMEOUTS.labels(run.vendor).inc()
        if isinstance(called, runs.Accepted):
            vendor_run_id = called.answer.vendor_run_id
            log.info("run submitted", run_id=run.id, vendor=run.vendor, vendor_run_id=vendor_run_id)
            if isinstance(outcome, Conflict) and outcome.current.status in TERMINAL:
                # Canceled while we were submitting: the vendor has a run nobody wants any more.
                state = {**called.state, **called.answer.state}
                await self._withdraw(run, adapter, vendor_run_id, state, call)

    # The call -----------------------------------------------------------------------------------

    async def _call(
        self, action: Action, claimed: ClaimedRun, adapter: VendorAdapter, policy: VendorSettings, call: Call
    ) -> tuple[Run, runs.Called]:
        """The vendor call the action names, and what it brought: an answer, or the fault it raised, mapped
        once (``worker/decide.py``). Also the run as it stands after the call: a submit may checkpoint."""
        run = claimed.run
        # A step makes at most two vendor calls in a row; the slot the budget gave it counts on top.
        timeout = self.limits.vendor_timeout_s * 2 + max(0.0, claimed.slot_ms / 1000 - self.clock.time())
        if action is Action.TELL:
            # Its own bounded retries (up to four calls: cancel, delete, and on 409 run_in_flight both
            # again), every fault recorded in the answer: an ended run never goes through the path below.
            return run, await self._tell_vendor(run, adapter, timeout * 2, call)
        latest = [run]
        try:
            async with self._deadlines.timeout(timeout):
                called: runs.Called
                if action is Action.TIME_OUT:
                    await self._cancel_at_vendor(adapter, run.vendor_run_id, run.state, call)
                    called = runs.Overdue()
                elif action is Action.SUBMIT:
                    called = await self._submit(latest, adapter, policy, call)
                else:
                    called = await self._poll(run, adapter, call)
                return latest[0], called
        except RedisError:
            raise  # Redis is unreachable: the lease hands the step back once it returns
        except Exception as exc:
            submitting = action is Action.SUBMIT and latest[0].status == QUEUED
            idempotent = bool(getattr(adapter, "submit_idempotent", False))
            return latest[0], decide.fault_of(exc, submitting=submitting, idempotent=idempotent)

    async def _submit(
        self, latest: list[Run], adapter: VendorAdapter, policy: VendorSettings, call: Call
    ) -> runs.Accepted | runs.DocumentGone:
        run = latest[0]
        document = await self._document(run, adapter, policy)
        if document is None:
            return runs.DocumentGone()
        state = dict(run.state)

        async def checkpoint(update: dict[str, Any]) -> None:
            nonlocal run
            state.update(update)
            now = self._now()
            change = lifecycle.touched(run, now, due_ms=now + self.settings.lease_s * 1000, state=dict(state))
            # Through the batch of this turn, as every change of a step; a touch never ends a run.
            if not isinstance(await self._transitions.apply(change), Applied):
                raise VendorTransient("the run changed while it was being submitted")
            run = latest[0] = change.run

        request = SubmitRequest(
            run_id=run.id,
            operation=run.operation,
            document=document,
            options=run.options,
            zero_retention=run.zero_retention,
            state=state,
            checkpoint=checkpoint,
        )
        started = time.perf_counter()
        with tracing.vendor_call("submit", run):
            accepted = text.safe_submit(await adapter.submit(request, call=call))
        return runs.Accepted(accepted, state, latency_ms=_ms(started))

    async def _poll(self, run: Run, adapter: VendorAdapter, call: Call) -> runs.Polled:
        # Past the submit a run has a vendor id; a record without one fails its polls (a bounded outcome).
        vendor_run_id = run.vendor_run_id or ""
        started = time.perf_counter()
        with tracing.vendor_call("poll", run):
            result = text.safe_poll(await adapter.poll(vendor_run_id, run.state, call=call))
        payload = None
        if result.status == base.SUCCEEDED and result.needs_fetch:
            state = {**run.state, **result.state} if result.state else run.state
            with tracing.vendor_call("fetch_result", run):
                payload = text.safe_result(await adapter.fetch_result(vendor_run_id, state, call=call))
        if isinstance(payload, base.ResultFile) or isinstance(result.result, base.ResultFile):
            # Not yet: the store takes a result whole (MAX_DOCUMENT_BYTES). Refused for good, the file
            # removed, rather than read into memory.
            for kept in (payload, result.result):
                if isinstance(kept, base.ResultFile):
                    with contextlib.suppress(OSError):
                        os.unlink(kept.path)
            raise base.VendorResultTooLarge(
                "a result streamed to a file is not kept by this version of hookbridge yet"
            )
        return runs.Polled(result, payload, latency_ms=_ms(started))

    async def _tell_vendor(self, run: Run, adapter: VendorAdapter, timeout: float, call: Call) -> runs.Told:
        """Cancels (canceled here) and deletes (zero retention) the vendor's run; what follows a failure
        (again later, or given up and recorded) is the core's ``after_telling``. It never loops."""
        vendor_run_id, state = run.vendor_run_id, run.state
        try:
            async with asyncio.timeout(timeout):
                if run.vendor_cancel_pending and vendor_run_id and adapter.supports_cancel:
                    await adapter.cancel(vendor_run_id, state, call=call)
                if run.vendor_delete_pending and vendor_run_id:
                    if not isinstance(adapter, DeletesRuns):
                        return runs.Told(error=f"{run.vendor} has no API to delete its copy of a run")
                    await adapter.delete(vendor_run_id, state, call=call)
                    log.info("vendor copy deleted", run_id=run.id, vendor=run.vendor)
                    return runs.Told(deleted=True)
        except Exception as exc:  # anything at all: a cleanup step ends recorded, never in a lease loop
            fault = decide.fault_of(exc)
            log.warning("telling the vendor failed", error=fault.message, attempt=run.vendor_attempts + 1)
            return runs.Told(fault=fault)
        return runs.Told()

    # Applying -----------------------------------------------------------------------------------

    def _now(self) -> int:
        return self.clock.now_ms()

    async def _apply(self, change: Transition) -> Outcome:
        """The change, in the batch of this turn. A run's end (the only change that sets ``ttl_ms``) is
        traced, its credits counted, and the delivery pump woken; the batcher counts it in
        hookbridge_runs_total."""
        new = change.run
        if change.ttl_ms is None:
            outcome = await self._transitions.apply(change)
            if isinstance(outcome, Applied) and outcome.deliveries:
                self.on_delivery_due()
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
            # The delivery pump learns that work is due now without waiting for its next tick.
            self.on_delivery_due()
        elif isinstance(outcome, Conflict):
            log.info("late result discarded", run_id=new.id, vendor=new.vendor)
        return outcome

    async def _document(self, run: Run, adapter: VendorAdapter, policy: VendorSettings) -> Document | None:
        doc = run.document or {}
        filename = doc.get("filename") or "document"
        media_type = doc.get("media_type") or "application/octet-stream"
        if doc.get("url") and isinstance(adapter, base.UploadsUrlInput) and adapter.uploads_url_input:
            # Fetched once and kept: every try (a replay after a lost answer) uploads the same bytes.
            kept = await self.store.get_document(run.id)
            if kept is None:
                fetched = await adapter.fetch_document(doc["url"])
                kept = await self.store.keep_document(run.id, fetched, policy.max_run_s)
            return Document(
                content=kept,
                filename=doc.get("filename") or _url_filename(doc["url"]),
                media_type=media_type,
            )
        if doc.get("url"):
            return Document(url=doc["url"], filename=filename, media_type=media_type)
        content = await self.store.get_document(run.id)
        if content is None:
            return None
        return Document(content=content, filename=filename, media_type=media_type)

    async def _withdraw(
        self, run: Run, adapter: VendorAdapter, vendor_run_id: str, state: dict[str, Any], call: Call
    ) -> None:
        """The run ended here while the vendor took it: cancel it there, and delete it (zero retention).
        Best effort, within the step's two vendor calls' time: whatever it meets, the run's end stands."""
        try:
            async with self._deadlines.timeout(self.limits.vendor_timeout_s * 2):
                await self._cancel_at_vendor(adapter, vendor_run_id, state, call)
                if run.zero_retention and isinstance(adapter, DeletesRuns):
                    await adapter.delete(vendor_run_id, state, call=call)
        except RedisError:
            raise
        except Exception as exc:
            log.warning("vendor delete failed", vendor=adapter.name, error=decide.said(exc))

    @staticmethod
    async def _cancel_at_vendor(
        adapter: VendorAdapter, vendor_run_id: str | None, state: dict[str, Any], call: Call
    ) -> None:
        """Best effort: whatever the cancel raised, the run's outcome stands."""
        if not (vendor_run_id and adapter.supports_cancel):
            return
        try:
            await adapter.cancel(vendor_run_id, state, call=call)
        except RedisError:
            raise
        except Exception as exc:
            log.warning("vendor cancel failed", vendor=adapter.name, error=decide.said(exc))


def _url_filename(url: str) -> str:
    """The last path segment of a document URL, as the upload's filename (stable across tries)."""
    name = url.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name[:200] or "document"


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
