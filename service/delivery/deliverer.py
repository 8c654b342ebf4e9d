"""One delivery attempt: sign the event, POST it, record the attempt and what follows from it."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import structlog

from service import __version__, domain, logs, tracing
from service.clock import SYSTEM, Clock
from service.delivery import schedule, signing
from service.delivery.client import CallbackClient
from service.delivery.urlsafety import Policy, UnsafeURL
from service.domain import AttemptOutcome
from service.metrics import (
    CALLBACK_ATTEMPT_SECONDS,
    DELIVERIES,
    DELIVERY_ATTEMPTS,
    DELIVERY_LATENCY,
    client_label,
)
from service.records import Attempt, Delivery, Subscription
from service.settings import Settings
from service.store import ClaimedDelivery, SecretUnavailable, Store
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

    store: Store
    settings: Settings
    client: CallbackClient
    _: KW_ONLY
    rng: random.Random = field(default_factory=random.Random)
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        self.policy = Policy(self.settings.callback_allowed_networks, self.settings.callback_blocked_networks)

    async def attempt(self, claimed: ClaimedDelivery) -> str:
        """Returns the outcome: succeeded, retry, failed, gone or skipped."""
        dlv, sub = claimed.delivery, claimed.subscription
        with logs_bound(dlv):
            if sub is None:
                return await self._skip(dlv, "the subscription was deleted")
            if sub.disabled:
                return await self._skip(
                    dlv, f"the subscription is disabled: {sub.disabled_reason or 'by its owner'}"
                )
            if claimed.body is None:
                return await self._skip(dlv, "the event is no longer kept (zero retention or past retention)")
            async with tracing.delivery_attempt(self.store, dlv):
                return await self._send(dlv, sub, claimed.body)

    async def _send(self, dlv: Delivery, sub: Subscription, body: bytes) -> str:
        started = self.clock.time()
        wall_start = time.time()
        now_ms = int(started * 1000)
        status_code: int | None = None
        error: str | None = None
        response_body = ""
        retry_after: float | None = None
        try:
            # Whatever this raises is a failed attempt, recorded below: never a lease loop.
            async with asyncio.timeout(self.settings.callback_timeout_s):
                url = self.policy.check_syntax(sub.url)
                secrets = active_secrets(self.store.open_secrets(sub), now_ms)
                headers = signing.headers(secrets, dlv.event_id, int(started), body, USER_AGENT)
                tracing.inject(headers)  # the receiver continues the run's trace
                answer = await self.client.post(
                    url, body, headers, client=dlv.client, subscription=dlv.subscription_id
                )
            status_code = answer.status
            response_body = answer.body.decode("utf-8", "replace")
            if status_code in (429, 503):
                retry_after = retry_after_seconds(answer.headers.get("Retry-After"))
            if 300 <= status_code < 400:
                error = f"redirect to {answer.headers.get('Location', '?')} not followed"
        except UnsafeURL as exc:
            error = f"callback_url_not_allowed: {exc}"
        except TimeoutError:
            error = f"timed out after {self.settings.callback_timeout_s:g}s"
        except SecretUnavailable as exc:
            error = f"secret_unavailable: {exc}"
            log.error("subscription secret cannot be decrypted", error=str(exc))
        except Exception as exc:
            error = _describe(exc)
        if error is not None:
            error = redact(error, sub.url)
        # The duration is the request's own, on the system's clock even when a test moves self.clock.
        duration_ms = round((time.time() - wall_start) * 1000, 1)
        attempt = Attempt(
            at=domain.rfc3339(now_ms) or "",
            status_code=status_code,
            duration_ms=duration_ms,
            error=error,
            response_body=response_body,
        )
        done_ms = self.clock.now_ms()
        if status_code is not None and 200 <= status_code < 300:
            outcome, next_at = AttemptOutcome.SUCCEEDED, None
        elif status_code == 410:
            outcome, next_at = AttemptOutcome.GONE, None
        else:
            failures = dlv.attempts - dlv.series + 1
            wait = schedule.next_wait(self.settings.retry_schedule, failures, retry_after, self.rng)
            outcome = AttemptOutcome.FAILED if wait is None else AttemptOutcome.RETRY
            next_at = None if wait is None else done_ms + int(wait * 1000)
        await self.store.record_attempt(
            dlv.id, outcome, now_ms=done_ms, attempt=attempt, next_at_ms=next_at, status_code=status_code
        )
        tracing.outcome(outcome, status_code)
        client = client_label(dlv.client)
        DELIVERY_ATTEMPTS.labels(outcome, client).inc()
        CALLBACK_ATTEMPT_SECONDS.labels(outcome).observe(duration_ms / 1000)
        if outcome != AttemptOutcome.RETRY:
            DELIVERIES.labels(client, outcome).inc()
        if outcome == AttemptOutcome.SUCCEEDED and dlv.attempts == 0:
            DELIVERY_LATENCY.observe(max(0.0, done_ms - dlv.created_at) / 1000)
        log.info(
            "delivery attempt", outcome=outcome, status_code=status_code, error=error, duration_ms=duration_ms
        )
        return outcome

    async def _skip(self, dlv: Delivery, reason: str) -> str:
        now_ms = self.clock.now_ms()
        attempt = Attempt(
            at=domain.rfc3339(now_ms) or "", status_code=None, duration_ms=0, error=reason, response_body=""
        )
        await self.store.record_attempt(dlv.id, AttemptOutcome.SKIPPED, now_ms=now_ms, attempt=attempt)
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
