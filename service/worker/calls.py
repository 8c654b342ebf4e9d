"""What a step does at the vendor for the action the core names (``core/runs.py:Action``), and what it brings
back: one :data:`~service.core.runs.Called` value, the answer made safe (``vendors/text.py``) or the fault
the call raised, mapped once (``worker/decide.py``). Nothing here decides what follows; the step asks the
core (``worker/steps.py``).

- submit: the document read (or fetched once from its URL and kept, so that a replay uploads the same
  bytes), the adapter's checkpoint applied through the turn's batch before it goes on;
- poll, and fetch the result when the vendor keeps it apart;
- time out: cancel at the vendor at ``MAX_RUN_S``, best effort;
- tell the vendor of a run that ended here (cancel, delete under zero retention), with its own bounded tries;
- withdraw: cancel (and delete) a run the vendor took while it was canceled here.

The vendor calls of a step share one deadline: two requests' ``VENDOR_TIMEOUT_S``, plus the wait for the
budget's slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from redis.exceptions import RedisError

from service.config.settings import Settings, VendorSettings
from service.core import lifecycle, runs
from service.core.clock import SYSTEM, Clock
from service.core.domain import QUEUED
from service.core.records import Run
from service.core.runs import Action
from service.observability import logs, tracing
from service.store import Applied, ClaimedRun
from service.store.ports import RunSteps
from service.vendors import base, text
from service.vendors.base import Call, DeletesRuns, Document, SubmitRequest, VendorAdapter, VendorTransient
from service.worker import decide
from service.worker.deadlines import Deadlines
from service.worker.transitions import TransitionBatcher

log = logs.get("hookbridge.worker")


@dataclass
class VendorCalls:
    """The vendor calls of the steps of one worker loop."""

    store: RunSteps
    settings: Settings
    adapters: Mapping[str, VendorAdapter]
    # The turn's batch, which a submit's checkpoint goes through as every change of a step does.
    transitions: TransitionBatcher
    _: KW_ONLY
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        # The steps' timeouts, on one loop timer (asyncio.timeout arms one per step).
        self._deadlines = Deadlines()
        self.limits = self.settings.run_policy

    async def make(self, action: Action, claimed: ClaimedRun, call: Call) -> tuple[Run, runs.Called]:
        """The vendor call the action names, and what it brought: an answer, or the fault it raised, mapped
        once (``worker/decide.py``). Also the run as it stands after the call: a submit may checkpoint."""
        run = claimed.run
        adapter, policy = self.adapters[run.vendor], self.settings.vendor(run.vendor)
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
            now = self.clock.now_ms()
            change = lifecycle.touched(run, now, due_ms=now + self.settings.lease_s * 1000, state=dict(state))
            # Through the batch of this turn, as every change of a step; a touch never ends a run.
            if not isinstance(await self.transitions.apply(change), Applied):
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

    async def _document(self, run: Run, adapter: VendorAdapter, policy: VendorSettings) -> Document | None:
        doc = run.document or {}
        filename = doc.get("filename") or "document"
        media_type = doc.get("media_type") or "application/octet-stream"
        # The flag first: isinstance() against a runtime-checkable Protocol walks its members (~25 us a
        # submit, a percent of the worker's CPU in a burst of submits).
        uploads = getattr(adapter, "uploads_url_input", False)
        if doc.get("url") and uploads and isinstance(adapter, base.UploadsUrlInput):
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

    async def withdraw(self, run: Run, accepted: runs.Accepted, call: Call) -> None:
        """The run ended here while the vendor took it: cancel it there, and delete it (zero retention).
        Best effort, within the step's two vendor calls' time: whatever it meets, the run's end stands."""
        adapter = self.adapters[run.vendor]
        vendor_run_id = accepted.answer.vendor_run_id
        state = {**accepted.state, **accepted.answer.state}
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
