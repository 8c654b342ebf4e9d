"""What every handler needs, built once in the app's lifespan and handed to requests as its state."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request

from service.api.auth import KeyRing
from service.api.models import Models
from service.api.problems import NotFound, RateLimited
from service.config.settings import Settings
from service.core import domain
from service.core.records import Delivery, Run, Subscription
from service.delivery.urlsafety import Policy
from service.store import Store
from service.store.feed import Feed

# Where a handler leaves fields for its request's log line (written by app.RequestContext once the answer
# is sent): one line per request, where a submit used to write two.
LOG_FIELDS = "hookbridge.log_fields"


def annotate(request: Request, **fields: str) -> None:
    """Adds ``fields`` to the request's log line (the ``request`` line every /v1 request writes)."""
    request.scope.setdefault(LOG_FIELDS, {}).update(fields)


@dataclass
class Context:
    settings: Settings
    store: Store
    keys: KeyRing
    url_policy: Policy
    models: Models
    openapi: bytes  # the document, encoded once
    log: Any
    feed: Feed | None = None  # the event feed (GET /v1/events, the SSE streams)
    durable_store: Store | None = None  # the store over a client that WAITs (REDIS_WAIT_REPLICAS > 0)

    @property
    def durable(self) -> Store:
        """The store for a write whose success the answer shows (contract section 10): each of its writes
        reaches ``REDIS_WAIT_REPLICAS`` replicas before it returns, or raises ``ReplicasBehind`` (a 503).
        The plain store when no replica is asked for."""
        return self.durable_store or self.store

    @staticmethod
    def of(request: Request) -> Context:
        ctx: Context = request.state.ctx
        return ctx

    @staticmethod
    def authenticated(request: Request) -> tuple[Context, str]:
        """The context and the calling client (401 without a valid key)."""
        ctx: Context = request.state.ctx
        return ctx, ctx.keys.authenticate(request)

    @staticmethod
    async def owned(request: Request, kind: type[R]) -> tuple[Context, str, R]:
        """The context, the client, and the run, subscription or delivery (``kind``) that the path names:
        404 when it is not the caller's, whether or not it exists."""
        ctx, client = Context.authenticated(request)
        prefix, param, what = _OWNED[kind]
        record_id = request.path_params[param]
        get = {
            Run: ctx.store.runs.get_run,
            Subscription: ctx.store.subscriptions.get_subscription,
            Delivery: ctx.store.deliveries.get_delivery,
        }
        record = await get[kind](record_id) if domain.is_id(prefix, record_id) else None
        if not isinstance(record, kind) or record.client != client:
            raise NotFound(f"No {what} {record_id[:40]}.")
        return ctx, client, record

    async def rate(self, limiter: str, client: str, what: str, *, take: bool = True) -> None:
        """429 past the client's rate (``SUBMIT_RATE_PER_S``, ``SUBMIT_BURST``) on ``limiter``: submits
        on one (taken by the run's creation itself, :meth:`Runs.create_run`), sends on demand (test, retry,
        recover: requests to a URL the tenant chose) on another."""
        wait_s = await self.store.limits.rate_limit(limiter, client, *self.submit_rate, take=take)
        if wait_s > 0:
            raise self.over_rate(wait_s, what)

    @property
    def submit_rate(self) -> tuple[float, int]:
        return self.settings.submit_rate_per_s, self.settings.submit_burst

    def over_rate(self, wait_s: float, what: str) -> RateLimited:
        rate, burst = self.submit_rate
        return RateLimited(
            f"More than {rate:g} {what} per second (burst {burst}) for this client "
            "(HOOKBRIDGE_SUBMIT_RATE_PER_S); retry after the time in Retry-After.",
            retry_after=max(1, math.ceil(wait_s)),
        )


R = TypeVar("R", Run, Subscription, Delivery)
_OWNED: dict[type[Any], tuple[str, str, str]] = {
    Run: ("run", "run_id", "run"),
    Subscription: ("sub", "sub_id", "subscription"),
    Delivery: ("dlv", "delivery_id", "delivery"),
}
