"""One delivery attempt: send (sign the event, POST it), decide (``service.core.deliveries``: what the
answer means), apply (record the attempt and its outcome in one atomic step)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import structlog

from service import __version__
from service.config.settings import Settings
from service.core import deliveries, domain
from service.core.clock import SYSTEM, Clock
from service.core.domain import AttemptOutcome
from service.core.records import Attempt, Delivery, Subscription
from service.delivery import signing
from service.delivery.client import CallbackClient
from service.delivery.urlsafety import Policy, UnsafeURL
from service.observability import logs, tracing
from service.observability.metrics import (
    CALLBACK_ATTEMPT_SECONDS,
    DELIVERIES,
    DELIVERY_ATTEMPTS,
    DELIVERY_LATENCY,
    client_label,
)
from service.store import ClaimedDelivery, SecretUnavailable
from service.store.ports import DelivererStore
from service.vendors.http import retry_after_seconds

log = logs.get("hookbridge.delivery")
USER_AGENT = f"hookbridge/{__version__}"


def active_secrets(secrets: list[list[Any]], now_ms: int) -> list[str]:
    """The current secret, and a rotated-out one while its overlap lasts."""
    return [s for s, expires in secrets if expires is None or expires > now_ms]


def redact(text: str, url: str) -> str:
    """``text`` without the callback URL's query string and userinfo: receivers authenticate with them
    (``?token=``), and the delivery log is read by the tenant, the worker log by the operator."""
    try:
        parts = urlsplit(url)
        hidden = [parts.query, parts.netloc.rpartition("@")[0]]
    except ValueError:
        hidden = []
    for part in hidden:
        if len(part) >= 3:
            text = text.replace(part, "[redacted]")
    return logs.redact_urls(text)


@dataclass
class Deliverer:
    """Makes one delivery attempt at a time: signs, sends, and records what came of it."""

    store: DelivererStore
    settings: Settings
    client: CallbackClient
    _: KW_ONLY
    rng: random.Random = field(default_factory=random.Random)
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        # What the deliverer reads of the configuration: the delivery policy.
        self.delivery = self.settings.delivery
        self.policy = Policy(self.delivery.callback_allowed_networks, self.delivery.callback_blocked_networks)

    async def attempt(self, claimed: ClaimedDelivery) -> str:
        """Returns the outcome: succeeded, retry, failed, gone or skipped."""
        dlv, sub = claimed.delivery, claimed.subscription
        with logs_bound(dlv):
            reason = deliveries.skip_reason(sub, claimed.body)
            if reason is not None or sub is None or claimed.body is None:  # (the last two: for the types)
                return await self._skip(dlv, reason or "")
            async with tracing.delivery_attempt(self.store.runs, dlv):
                return await self._send(dlv, sub, claimed.body)

    async def _send(self, dlv: Delivery, sub: Subscription, body: bytes) -> str:
        """Send, decide, apply: the POST, the core's verdict on its answer, the attempt's record."""
        started = self.clock.time()
        attempt, retry_after = await self._post(dlv, sub, body, started)
        done_ms = self.clock.now_ms()
        verdict = deliveries.after_attempt(
            attempt.status_code,
            retry_after,
            failures=deliveries.failures_in_series(dlv),
            schedule=self.delivery.retry_schedule,
            now_ms=done_ms,
            jitter=self.rng,
        )
        await self.store.deliveries.record_attempt(
            dlv,
            verdict.outcome,
            now_ms=done_ms,
            attempt=attempt,
            next_at_ms=verdict.next_at_ms,
            status_code=attempt.status_code,
        )
        self._count(dlv, verdict.outcome, attempt, done_ms)
        return verdict.outcome

    async def _post(
        self, dlv: Delivery, sub: Subscription, body: bytes, started: float
    ) -> tuple[Attempt, float | None]:
        """The signed POST and what came of it: the attempt as recorded, and the receiver's Retry-After."""
        wall_start = time.time()
        now_ms = int(started * 1000)
        status_code: int | None = None
        error: str | None = None
        response_body = ""
        retry_after: float | None = None
        timeout_s = self.delivery.callback_timeout_s
        try:
            # Whatever this raises is a failed attempt, recorded: never a lease loop.
            async with asyncio.timeout(timeout_s):
                url = self.policy.check_syntax(sub.url)
                secrets = active_secrets(self.store.subscriptions.open_secrets(sub), now_ms)
                headers = signing.headers(secrets, dlv.event_id, int(started), body, USER_AGENT)
                tracing.inject(headers)  # the receiver continues the run's trace
                answer = await self.client.post(
                    url, body, headers, client=dlv.client, subscription=dlv.subscription_id
                )
            status_code = answer.status
            response_body = answer.body.decode("utf-8", "replace")
            retry_after = retry_after_seconds(answer.headers.get("Retry-After"))
            if 300 <= status_code < 400:
                error = f"redirect to {answer.headers.get('Location', '?')} not followed"
        except UnsafeURL as exc:
            error = f"callback_url_not_allowed: {exc}"
        except TimeoutError:
            error = f"timed out after {timeout_s:g}s"
        except SecretUnavailable as exc:
            error = f"secret_unavailable: {exc}"
            log.error("subscription secret cannot be decrypted", error=str(exc))
        except Exception as exc:
            error = _describe(exc)
        attempt = Attempt(
            at=domain.rfc3339(now_ms) or "",
            status_code=status_code,
            # The request's own duration, on the system's clock even when a test moves self.clock.
            duration_ms=round((time.time() - wall_start) * 1000, 1),
            error=None if error is None else redact(error, sub.url),
            response_body=response_body,
        )
        return attempt, retry_after

    def _count(self, dlv: Delivery, outcome: AttemptOutcome, attempt: Attempt, done_ms: int) -> None:
        tracing.outcome(outcome, attempt.status_code)
        client = client_label(dlv.client)
        DELIVERY_ATTEMPTS.labels(outcome, client).inc()
        CALLBACK_ATTEMPT_SECONDS.labels(outcome).observe(attempt.duration_ms / 1000)
        if outcome != AttemptOutcome.RETRY:
            DELIVERIES.labels(client, outcome).inc()
        if outcome == AttemptOutcome.SUCCEEDED and dlv.attempts == 0:
            DELIVERY_LATENCY.observe(max(0.0, done_ms - dlv.created_at) / 1000)
        log.info(
            "delivery attempt",
            outcome=outcome,
            status_code=attempt.status_code,
            error=attempt.error,
            duration_ms=attempt.duration_ms,
        )

    async def _skip(self, dlv: Delivery, reason: str) -> str:
        now_ms = self.clock.now_ms()
        attempt = Attempt(
            at=domain.rfc3339(now_ms) or "", status_code=None, duration_ms=0, error=reason, response_body=""
        )
        await self.store.deliveries.record_attempt(
            dlv, AttemptOutcome.SKIPPED, now_ms=now_ms, attempt=attempt
        )
        client = client_label(dlv.client)
        DELIVERY_ATTEMPTS.labels(AttemptOutcome.SKIPPED, client).inc()
        DELIVERIES.labels(client, AttemptOutcome.SKIPPED).inc()
        log.info("delivery skipped", reason=reason)
        return AttemptOutcome.SKIPPED


def _describe(exc: BaseException) -> str:
    """The root cause, named by its own type: the transport's wrapper types can mislead (a refused
    connection comes back as httpx's ConnectTimeout), and the root says "blocked" or "refused"."""
    chain = [exc]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 5:
        chain.append(nxt)
    named = next((e for e in reversed(chain[1:]) if not isinstance(e, OSError) and str(e)), exc)
    parts = [f"{type(named).__name__}: {named}" if str(named) else type(named).__name__]
    parts += [str(e) for e in chain if str(e) and str(e) not in parts[0]][:2]
    return "; ".join(parts)[:500] or type(exc).__name__


def logs_bound(dlv: Delivery) -> Any:
    return structlog.contextvars.bound_contextvars(
        delivery_id=dlv.id, subscription_id=dlv.subscription_id, run_id=dlv.run_id
    )
