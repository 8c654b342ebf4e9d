"""One step of one run: submit it, poll it, finish it, or tell the vendor it was canceled.

A step is idempotent: it may run twice (a worker died after the vendor call, before the write), and the
second time changes nothing twice. The vendor idempotency key (Nutrient) or the adapter's checkpoint
(Cloudsquid) keeps a repeated submit from creating a second vendor run; the version check in the
store's transition keeps a late or duplicate write from landing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

import structlog
from redis.exceptions import RedisError

from service import domain, lifecycle, logs, tracing, trail
from service.clock import SYSTEM, Clock
from service.domain import QUEUED, TERMINAL
from service.lifecycle import Transition
from service.metrics import RUN_TIMEOUTS, VENDOR_CREDITS, client_label
from service.records import Run
from service.settings import Settings, VendorSettings
from service.store import Applied, ClaimedRun, Conflict, Outcome, Store
from service.vendors import base, text
from service.vendors.base import (
    DeletesRuns,
    Document,
    FileResult,
    PollResult,
    SubmitRequest,
    VendorAdapter,
    VendorExpired,
    VendorRateLimited,
    VendorRejected,
    VendorResultTooLarge,
    VendorTransient,
)
from service.worker import decide
from service.worker.budget import prepaid
from service.worker.deadlines import Deadlines
from service.worker.transitions import TransitionBatcher

log = logs.get("hookbridge.worker")

# The vendor's own usage object is kept on the run up to this size; past it only the credits are kept.
MAX_USAGE_BYTES = 1024


def next_delay(policy: VendorSettings, current: float | None, rng: random.Random) -> tuple[float, float]:
    """The vendor's poll policy: start at ``POLL_INITIAL_S``, grow by the multiplier up to ``POLL_MAX_S``.

    Returns the planned interval (kept with the run, the base of the next one) and the interval to wait:
    the planned one plus up to 15 % jitter, so that runs submitted together do not poll together, but
    never past ``POLL_MAX_S``: the documented intervals (Cloudsquid 2-5 s, Uptiq 5-10 s) hold with the
    jitter included. At the maximum the jitter goes below it instead, never below ``POLL_INITIAL_S``.
    """
    planned = (
        policy.poll_initial_s if current is None else min(policy.poll_max_s, current * policy.poll_multiplier)
    )
    return planned, jittered(planned, policy.poll_initial_s, policy.poll_max_s, rng.uniform(0.0, 0.15))


def jittered(planned: float, floor: float, ceiling: float, share: float) -> float:
    """``planned`` moved by ``share`` of itself, up where there is room below ``ceiling``, else down;
    always within [floor, ceiling]."""
    up = planned * (1.0 + share)
    wait = up if up <= ceiling else planned * (1.0 - share)
    return min(ceiling, max(floor, wait))


@dataclass
class RunStepper:
    """One step of a run: submit, poll, fetch the result, time out, tell the vendor; each ends in one
    transition."""

    store: Store
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

    async def close(self) -> None:
        """Waits for the changes of the steps that ended (before the store closes)."""
        await self._transitions.settle()

    async def step(self, claimed: ClaimedRun) -> None:
        prepaid.set((claimed.slot_ms, claimed.due_ms))
        # A submit may checkpoint (a newer version of the run): the fault handlers must see that one.
        latest = [claimed.run]
        run = claimed.run
        policy = self.settings.vendor(run.vendor)
        adapter = self.adapters[run.vendor]
        timeout = self.settings.vendor_timeout_s * 2  # a step makes at most two vendor calls in a row
        # Tokens, not bound_contextvars(): that one reads the whole logging context first, on every step.
        tokens = structlog.contextvars.bind_contextvars(run_id=run.id, vendor=run.vendor)
        try:
            await self._step(claimed, latest, policy, adapter, timeout)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    async def _step(
        self,
        claimed: ClaimedRun,
        latest: list[Run],
        policy: VendorSettings,
        adapter: VendorAdapter,
        timeout: float,
    ) -> None:
        run = claimed.run
        timeout += max(0.0, claimed.slot_ms / 1000 - self.clock.time())
        if run.status in TERMINAL:
            # Its own bounded retries: a terminal run must never go through the transient path below. Up to
            # four vendor calls in a row: cancel, delete, and on 409 run_in_flight cancel and delete again.
            await self._tell_vendor(run, adapter, policy, timeout * 2)
            return
        try:
            async with self._deadlines.timeout(timeout):
                if self._now() - run.created_at > policy.max_run_s * 1000:
                    await self._time_out(run, adapter, policy)
                elif run.status == QUEUED:
                    await self._submit(latest, adapter, policy)
                else:
                    await self._poll(run, adapter, policy)
        except VendorRateLimited as exc:
            # The transport already paused the whole vendor; this run waits its turn, it does not fail.
            delay = exc.retry_after if exc.retry_after is not None else policy.poll_initial_s
            now = self._now()
            change = lifecycle.touched(latest[0], now, due_ms=now + delay * 1000)
            await self._apply(
                trail.record(change, "rate_limited", at_ms=now, detail=f"retry after {delay:g}s")
            )
        except (VendorTransient, TimeoutError) as exc:
            submitting = run.status == QUEUED and latest[0].status == QUEUED
            idempotent = bool(getattr(adapter, "submit_idempotent", False))
            action = decide.after_submit_fault(idempotent=idempotent, fault=decide.submit_fault(exc))
            if submitting and action is decide.AfterSubmit.END_AMBIGUOUS:
                await self._ambiguous(latest[0], exc)
            else:
                await self._transient(latest[0], policy, exc)
        except VendorResultTooLarge as exc:
            await self._finish(
                latest[0],
                lifecycle.failed(
                    latest[0],
                    self._now(),
                    code=domain.RESULT_TOO_LARGE,
                    message=exc.message,
                    settings=self.settings,
                ),
            )
        except (VendorExpired, VendorRejected) as exc:
            # The vendor said no for good (an unknown run, a refused cancel: 401/403/404): one outcome.
            code = domain.VENDOR_EXPIRED if isinstance(exc, VendorExpired) else domain.VENDOR_REJECTED
            if isinstance(exc, base.DocumentUnavailable):
                code = domain.DOCUMENT_UNAVAILABLE
            await self._refused(latest[0], code, exc.message)
        except RedisError:
            raise  # Redis is unreachable: the lease hands the step back once it returns
        except Exception as exc:
            # Anything else the adapter raised (a non-JSON answer, a field of the wrong type, an URL
            # that httpx refuses) is a transient fault: it counts toward VENDOR_MAX_TRANSIENT_FAILURES,
            # so it ends in a bounded outcome instead of a lease that comes back for ever.
            await self._transient(latest[0], policy, exc)

    # Steps --------------------------------------------------------------------------------------

    async def _submit(self, latest: list[Run], adapter: VendorAdapter, policy: VendorSettings) -> None:
        run = latest[0]
        document = await self._document(run, adapter, policy)
        if document is None:
            # Accepted with a document that is no longer here: the run cannot be submitted.
            await self._apply(
                lifecycle.failed(
                    run,
                    self._now(),
                    code=domain.VENDOR_REJECTED,
                    message="the document is gone",
                    settings=self.settings,
                )
            )
            return

        state = dict(run.state)

        async def checkpoint(update: dict[str, Any]) -> None:
            nonlocal run
            state.update(update)
            change = lifecycle.touched(
                run, self._now(), due_ms=self._now() + self.settings.lease_s * 1000, state=dict(state)
            )
            # A touch never ends a run: no end to count here.
            if not isinstance(await self.store.transition(change), Applied):
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
        try:
            with tracing.vendor_call("submit", run):
                accepted = await adapter.submit(request)
        except VendorRejected as exc:
            now = self._now()
            refused = lifecycle.failed(
                run, now, code=domain.VENDOR_REJECTED, message=exc.message, settings=self.settings
            )
            await self._apply(
                trail.record(refused, "error", at_ms=now, latency_ms=_ms(started), detail=exc.message)
            )
            return
        shown, delay = next_delay(policy, None, self.rng)
        change = lifecycle.submitted(
            run,
            self._now(),
            vendor_run_id=accepted.vendor_run_id,
            vendor_status=text.clean_optional(accepted.vendor_status, 200),
            state={**state, **accepted.state},
            due_ms=self._now() + delay * 1000,
            delay_s=shown,
        )
        change = trail.record(
            change,
            "submitted",
            at_ms=self._now(),
            vendor_status=text.clean_optional(accepted.vendor_status, 200),
            latency_ms=_ms(started),
        )
        outcome = await self._apply(change)
        if isinstance(outcome, Conflict) and outcome.current.status in TERMINAL:
            # Canceled while we were submitting: the vendor has a run nobody wants any more.
            vendor_state = {**state, **accepted.state}
            if adapter.supports_cancel:
                await self._cancel_quietly(adapter, accepted.vendor_run_id, vendor_state)
            if run.zero_retention and isinstance(adapter, DeletesRuns):
                try:
                    await adapter.delete(accepted.vendor_run_id, vendor_state)
                except base.VendorError as exc:
                    log.warning("vendor delete failed", vendor=adapter.name, error=exc.message)
        log.info("run submitted", run_id=run.id, vendor=run.vendor, vendor_run_id=accepted.vendor_run_id)

    async def _poll(self, run: Run, adapter: VendorAdapter, policy: VendorSettings) -> None:
        state = run.state
        # Past the submit a run has a vendor id; a record without one fails its polls (a bounded outcome).
        vendor_run_id = run.vendor_run_id or ""
        started = time.perf_counter()
        with tracing.vendor_call("poll", run):
            result = _untrusted(await adapter.poll(vendor_run_id, state))
        now = self._now()
        if result.status == base.SUCCEEDED:
            payload = result.result
            if result.needs_fetch:
                with tracing.vendor_call("fetch_result", run):
                    payload = await adapter.fetch_result(vendor_run_id, state)
            payload = _scrubbed_payload(payload)
            result_file = None
            if isinstance(payload, FileResult):
                payload, result_file = _file_result(run, payload)
            done = lifecycle.finished(
                run,
                self._now(),
                status=domain.SUCCEEDED,
                settings=self.settings,
                vendor_status=result.vendor_status,
                result=payload,
                usage=_bounded_usage(result.usage),
                result_file=result_file,
            )
            status, latency = result.vendor_status, _ms(started)
            await self._finish(
                run, trail.record(done, "result", at_ms=now, vendor_status=status, latency_ms=latency)
            )
        elif result.status in (base.FAILED, base.CANCELED):
            # Canceled at the vendor by someone else than us: for our client the run failed there.
            message = result.error or "the vendor reported a failure"
            if result.status == base.CANCELED:
                message = "the run was canceled at the vendor"
            change = lifecycle.failed(
                run,
                now,
                code=domain.VENDOR_FAILED,
                message=message,
                details=result.error_details,
                settings=self.settings,
                vendor_status=result.vendor_status,
            )
            status, latency = result.vendor_status, _ms(started)
            change = trail.record(
                change, "error", at_ms=now, vendor_status=status, latency_ms=latency, detail=message
            )
            await self._finish(run, change)
        else:
            shown, delay = next_delay(policy, run.delay_s, self.rng)
            progress = _progress(result)
            moved = progress is not None and progress != run.progress
            # The trail's entry goes in the same copy of the run as the poll's own fields.
            entry = trail.appended(
                run,
                "progress" if moved else "poll",
                at_ms=now,
                vendor_status=result.vendor_status,
                latency_ms=_ms(started),
                detail=_progress_text(progress) if moved else None,
            )
            change = lifecycle.polled(
                run,
                now,
                running=result.status == base.RUNNING,
                vendor_status=result.vendor_status,
                progress=progress,
                delay_s=shown,
                due_ms=now + delay * 1000,
                settings=self.settings,
                also=entry,
            )
            await self._apply(change)

    async def _time_out(self, run: Run, adapter: VendorAdapter, policy: VendorSettings) -> None:
        message = f"no result after {policy.max_run_s:g}s (HOOKBRIDGE_{run.vendor.upper()}_MAX_RUN_S)"
        progress = run.progress or {}
        if progress.get("message"):
            # What the vendor last said it was doing (Uptiq: "check processingStage.message").
            message += f"; the vendor last said: {progress['message']}"
        if run.vendor_run_id and adapter.supports_cancel:
            await self._cancel_quietly(adapter, run.vendor_run_id, run.state)
        now = self._now()
        change = lifecycle.failed(
            run,
            now,
            code=domain.TIMED_OUT,
            message=message,
            details={"last_progress": progress} if progress else None,
            settings=self.settings,
            count_poll=False,
        )
        await self._finish(run, trail.record(change, "timeout", at_ms=now, detail=message))
        RUN_TIMEOUTS.labels(run.vendor).inc()

    async def _tell_vendor(
        self, run: Run, adapter: VendorAdapter, policy: VendorSettings, timeout: float
    ) -> None:
        """Cancels (canceled here) and deletes (zero retention) the vendor's run, with bounded retries.

        Every way out is recorded: the vendor told, or after ``VENDOR_MAX_TRANSIENT_FAILURES`` attempts (or
        a refusal) the run says ``vendor_deleted: false`` with ``vendor_delete_error``. It never loops.
        """
        vendor_run_id, state = run.vendor_run_id, run.state
        deleted: bool | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(timeout):
                if run.vendor_cancel_pending and vendor_run_id and adapter.supports_cancel:
                    await adapter.cancel(vendor_run_id, state)
                if run.vendor_delete_pending and vendor_run_id:
                    if isinstance(adapter, DeletesRuns):
                        await adapter.delete(vendor_run_id, state)
                        deleted = True
                        log.info("vendor copy deleted", run_id=run.id, vendor=run.vendor)
                    else:
                        error = f"{run.vendor} has no API to delete its copy of a run"
        except Exception as exc:  # anything at all: a cleanup step ends recorded, never in a lease loop
            attempts = run.vendor_attempts + 1
            message = text.clean(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}".rstrip(": "))
            final = isinstance(exc, VendorRejected) or attempts >= self.settings.vendor_max_transient_failures
            log.warning(
                "telling the vendor failed",
                run_id=run.id,
                vendor=run.vendor,
                error=message,
                attempt=attempts,
            )
            if not final:
                backoff = min(policy.poll_max_s, policy.poll_initial_s * 2 ** (attempts - 1))
                delay = max(backoff, getattr(exc, "retry_after", None) or 0.0) * self.rng.uniform(1.0, 1.2)
                await self._apply(
                    lifecycle.vendor_retry(run, due_ms=self._now() + delay * 1000, attempts=attempts)
                )
                return
            error = f"gave up after {attempts} attempt{'s' if attempts > 1 else ''}: {message}"
        await self._apply(lifecycle.vendor_told(run, deleted=deleted, error=error))

    async def _ambiguous(self, run: Run, exc: BaseException) -> None:
        """A submit that may have created a job at a vendor without idempotency: the run ends here, with
        what the vendor said in its trail, and is never submitted again."""
        said = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}".rstrip(": ")
        answer = getattr(exc, "answer", None)
        message = text.clean(
            f"the submit may have created a job at {run.vendor}, which takes no idempotency key, so it "
            f"is not sent again; check the vendor before resubmitting ({said})"
        )
        now = self._now()
        change = lifecycle.failed(
            run,
            now,
            code=decide.VENDOR_SUBMIT_AMBIGUOUS,
            message=message,
            details={"vendor_answer": answer} if answer else None,
            settings=self.settings,
            count_poll=False,
        )
        detail = text.clean(f"{said}; vendor answered: {answer}" if answer else said, 1024)
        log.warning("vendor submit ambiguous", run_id=run.id, vendor=run.vendor, error=detail)
        await self._finish(run, trail.record(change, "error", at_ms=now, detail=detail))

    async def _refused(self, run: Run, code: str, message: str) -> None:
        # Terminal runs never reach here: telling the vendor has its own bounded retries (_tell_vendor).
        await self._apply(
            lifecycle.failed(run, self._now(), code=code, message=message, settings=self.settings)
        )

    async def _transient(self, run: Run, policy: VendorSettings, exc: Exception) -> None:
        count = run.transient + 1
        message = text.clean(
            getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}" or type(exc).__name__
        )
        now = self._now()
        if count >= self.settings.vendor_max_transient_failures:
            change = lifecycle.failed(
                run,
                now,
                code=domain.VENDOR_UNREACHABLE,
                message=text.clean(f"{count} transient faults in a row; the last: {message}"),
                settings=self.settings,
                count_poll=False,
            )
            await self._finish(run, trail.record(change, "error", at_ms=now, detail=message))
            return
        retry_after = getattr(exc, "retry_after", None)
        backoff = min(policy.poll_max_s, policy.poll_initial_s * 2 ** (count - 1))
        delay = max(backoff, retry_after or 0.0) * self.rng.uniform(1.0, 1.2)
        log.warning("vendor fault", run_id=run.id, vendor=run.vendor, error=message, attempt=count)
        change = lifecycle.touched(run, now, due_ms=now + delay * 1000, transient=count)
        await self._apply(trail.record(change, "error", at_ms=now, detail=message))

    # Helpers ------------------------------------------------------------------------------------

    def _now(self) -> int:
        return self.clock.now_ms()

    async def _finish(self, run: Run, change: Transition) -> None:
        with tracing.run_finish(change.run):
            outcome = await self._apply(change)
        if isinstance(outcome, Applied):
            credits = (change.run.usage or {}).get("credits")
            if isinstance(credits, int | float) and credits > 0:
                # Labels stay bounded: vendors are a fixed set, clients come from HOOKBRIDGE_API_KEYS.
                VENDOR_CREDITS.labels(run.vendor, client_label(run.client)).inc(credits)
        elif isinstance(outcome, Conflict):
            log.info("late result discarded", run_id=run.id, vendor=run.vendor)

    async def _apply(self, change: Transition) -> Outcome:
        # The batcher counts every run's end it applies in hookbridge_runs_total.
        outcome = await self._transitions.apply(change)
        new = change.run
        if not isinstance(outcome, Applied):
            return outcome
        if change.ttl_ms is not None:  # only a run's end sets its expiry
            log.info(
                "run finished",
                run_id=new.id,
                vendor=new.vendor,
                status=new.status,
                error=(new.error or {}).get("code"),
            )
            # The delivery pump learns that work is due now without waiting for its next tick.
            self.on_delivery_due()
        elif outcome.deliveries:
            self.on_delivery_due()
        return outcome

    async def _document(self, run: Run, adapter: VendorAdapter, policy: VendorSettings) -> Document | None:
        doc = run.document or {}
        if doc.get("url") and isinstance(adapter, base.UploadsUrlInput) and adapter.uploads_url_input:
            # Fetched once and kept: every try (a replay after a lost answer) uploads the same bytes.
            kept = await self.store.get_document(run.id)
            if kept is None:
                fetched = await adapter.fetch_document(doc["url"])
                kept = await self.store.keep_document(run.id, fetched, policy.max_run_s)
            return Document(
                content=kept,
                filename=doc.get("filename") or _url_filename(doc["url"]),
                media_type=doc.get("media_type") or "application/octet-stream",
            )
        if doc.get("url"):
            return Document(
                url=doc["url"],
                filename=doc.get("filename") or "document",
                media_type=doc.get("media_type") or "application/octet-stream",
            )
        content = await self.store.get_document(run.id)
        if content is None:
            return None
        return Document(
            content=content,
            filename=doc.get("filename") or "document",
            media_type=doc.get("media_type") or "application/octet-stream",
        )

    @staticmethod
    async def _cancel_quietly(adapter: VendorAdapter, vendor_run_id: str, state: dict[str, Any]) -> None:
        try:
            await adapter.cancel(vendor_run_id, state)
        except RedisError:
            raise
        except Exception as exc:  # best effort: whatever the cancel raised, the run's outcome stands
            message = text.clean(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
            log.warning("vendor cancel failed", vendor=adapter.name, error=message)


def _url_filename(url: str) -> str:
    """The last path segment of a document URL, as the upload's filename (stable across tries)."""
    name = url.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name[:200] or "document"


def _file_result(run: Run, file: FileResult) -> tuple[Any, tuple[bytes, str] | None]:
    """The event's JSON and the file to keep. The vendor's ``downloadUrl`` needs the vendor's key, so it
    becomes ours; with zero retention nothing is kept and the file travels inline, base64 encoded."""
    data = json.loads(json.dumps(file.data)) if file.data is not None else {}
    if not isinstance(data, dict):
        data = {"result": data}
    output = data.get("output")
    if not isinstance(output, dict):
        output = data["output"] = {}
    if run.zero_retention:
        output.pop("downloadUrl", None)
        output["file_base64"] = base64.b64encode(file.content).decode("ascii")
        output["file_media_type"] = file.media_type
        return data, None
    output["downloadUrl"] = f"/v1/runs/{run.id}/result"
    return data, (file.content, file.media_type)


def _untrusted(result: PollResult) -> PollResult:
    """A poll's answer with every string the vendor wrote cut short and scrubbed of our credentials
    (service/vendors/text.py), before any of it is stored, logged, traced or delivered."""
    progress = result.progress
    if progress is not None:
        progress = replace(
            progress,
            phase=text.clean_optional(progress.phase, 200),
            message=text.clean_optional(progress.message),
        )
    return replace(
        result,
        vendor_status=text.clean_optional(result.vendor_status, 200),
        progress=progress,
        error=text.clean_optional(result.error),
        error_details=text.clean_json(result.error_details) if result.error_details else None,
        usage=text.scrub_json(result.usage),
        result=text.scrub_json(result.result),
    )


def _scrubbed_payload(payload: Any) -> Any:
    if isinstance(payload, FileResult):
        return replace(payload, data=text.scrub_json(payload.data))
    return text.scrub_json(payload)


def _bounded_usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    if len(json.dumps(usage, separators=(",", ":"), default=str)) <= MAX_USAGE_BYTES:
        return usage
    return {"credits": usage.get("credits"), "reported": None}


def _progress(result: PollResult) -> dict[str, Any] | None:
    if result.progress is None:
        return None
    p = result.progress
    return {"percent": p.percent, "phase": p.phase, "message": p.message}


def _progress_text(progress: dict[str, Any] | None) -> str | None:
    if not progress:
        return None
    parts = [f"{progress['percent']:g}%" if progress.get("percent") is not None else None]
    parts += [progress.get("phase"), progress.get("message")]
    return " ".join(str(p) for p in parts if p) or None


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
