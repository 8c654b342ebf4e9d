"""``/v1/subscriptions`` and ``/v1/deliveries``: where callbacks go, and what happened to them."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.api import views
from service.api.body import bad_cursor, json_body, query
from service.api.context import Context
from service.api.examples import example_event
from service.api.models import DeliveryPage, Page, Recover, SubscriptionFields, TestEventRequest
from service.api.problems import (
    CallbackURLNotAllowed,
    DeliveryInFlight,
    NotFound,
    QuotaExceeded,
    SubscriptionDisabled,
    Unavailable,
)
from service.api.views import JSONResponse
from service.core import domain
from service.core.records import Delivery, Event, Subscription, replace
from service.delivery.signing import new_secret
from service.delivery.urlsafety import UnsafeURL
from service.store import OWNER_DISABLED, Applied, Busy, Missing, SecretUnavailable

# The request members that are the record's own fields, under the same names.
_FIELDS = ("url", "event_types", "description", "metadata", "max_in_flight", "rate_limit_per_s")


async def _changes(ctx: Context, req: SubscriptionFields) -> dict[str, Any]:
    """The record's fields for the members the request gave, once the URL passes the policy."""
    given = req.model_fields_set
    out: dict[str, Any] = {name: getattr(req, name) for name in given if name in _FIELDS}
    if "url" in out:
        await _check_url(ctx, out["url"])
    if "event_types" in out:
        types = out["event_types"]
        out["event_types"] = tuple(dict.fromkeys(map(str, types))) if types else None
    if "description" in out:
        out["description"] = out["description"] or None
    if "metadata" in out:
        out["metadata"] = out["metadata"] or {}
    if out.get("rate_limit_per_s") is not None:
        out["rate_limit_per_s"] = float(out["rate_limit_per_s"])
    if "disabled" in given:
        out.update(
            {"disabled": True, "disabled_reason": OWNER_DISABLED}
            if getattr(req, "disabled", False)
            else {
                "disabled": False,
                "disabled_reason": None,
                "failing_since": None,
                "consecutive_failures": 0,
            }
        )
    return out


async def _check_url(ctx: Context, url: str) -> None:
    try:
        await ctx.url_policy.check(url)
    except UnsafeURL as exc:
        raise CallbackURLNotAllowed(f"This URL cannot receive callbacks: {exc}") from None
    except ValueError:  # e.g. UnicodeError from the resolver: an empty or too long label
        raise CallbackURLNotAllowed(
            "This URL cannot receive callbacks: its host is not a valid name."
        ) from None


def _secrets(ctx: Context, sub: Subscription) -> list[list[Any]]:
    """The subscription's secrets, opened; a sealed value whose key is not configured is the operator's
    fault, not the tenant's: 503, with the key id in the log only."""
    try:
        return ctx.store.subscriptions.open_secrets(sub)
    except SecretUnavailable as exc:
        ctx.log.error("subscription secret cannot be decrypted", subscription_id=sub.id, error=str(exc))
        raise Unavailable(
            "This subscription's secret cannot be read with the keys the service holds; try again later."
        ) from None


class SubscriptionRoutes(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, client = Context.authenticated(request)
        q = query(request, Page)
        try:
            page = await ctx.store.subscriptions.list_subscriptions(client, limit=q.limit, cursor=q.cursor)
        except (ValueError, UnicodeDecodeError):
            raise bad_cursor() from None
        return JSONResponse(views.page([views.subscription(s) for s in page.data], page.next_cursor))

    async def post(self, request: Request) -> Response:
        ctx, client = Context.authenticated(request)
        req = await json_body(request, ctx.settings, ctx.models.subscription_create)
        changes = await _changes(ctx, req)
        now = domain.now_ms()
        secret = new_secret()
        sub_id = await ctx.store.subscriptions.new_subscription_id(client)
        secrets = ctx.store.subscriptions.seal_secrets(sub_id, [[secret, None]])
        sub = Subscription(
            id=sub_id, client=client, secrets=secrets, created_at=now, updated_at=now, **changes
        )
        quota = ctx.settings.max_subscriptions_per_client
        if not await ctx.durable.subscriptions.create_subscription(sub, max_count=quota):
            raise QuotaExceeded(
                f"This client already has {quota} subscriptions (HOOKBRIDGE_MAX_SUBSCRIPTIONS_PER_CLIENT); "
                "delete one first.",
                quota=quota,
            )
        ctx.log.info("subscription created", subscription_id=sub.id)
        headers = {"Location": f"/v1/subscriptions/{sub.id}"}
        return JSONResponse(views.subscription(sub, secret), status_code=201, headers=headers)


class SubscriptionOne(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        _, _, sub = await Context.owned(request, Subscription)
        return JSONResponse(views.subscription(sub))

    async def patch(self, request: Request) -> Response:
        ctx, _, sub = await Context.owned(request, Subscription)
        changes = await _changes(ctx, await json_body(request, ctx.settings, ctx.models.subscription_update))
        if changes:
            changes["updated_at"] = domain.now_ms()
            if not ctx.store.subscriptions.secrets_current(sub.secrets):
                # Any write seals a secret stored plain (or under a key no longer first): the lazy migration.
                with contextlib.suppress(SecretUnavailable):
                    changes["secrets"] = ctx.store.subscriptions.seal_secrets(
                        sub.id, ctx.store.subscriptions.open_secrets(sub)
                    )
            sub = replace(sub, **changes)
            await ctx.durable.subscriptions.update_subscription(sub, changes)
        return JSONResponse(views.subscription(sub))

    async def delete(self, request: Request) -> Response:
        ctx, client, sub = await Context.owned(request, Subscription)
        await ctx.durable.subscriptions.delete_subscription(sub.id, client)
        return Response(status_code=204)


class SubscriptionSecret(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, _, sub = await Context.owned(request, Subscription)
        return JSONResponse({"secret": _secrets(ctx, sub)[0][0]})


class RotateSecret(HTTPEndpoint):
    async def post(self, request: Request) -> Response:
        ctx, _, sub = await Context.owned(request, Subscription)
        now = domain.now_ms()
        old = [[s, exp] for s, exp in _secrets(ctx, sub) if exp is None or exp > now]
        expires = now + int(ctx.settings.secret_rotation_overlap_s * 1000)
        secret = new_secret()
        # The new secret signs first; the old ones keep signing beside it until the overlap ends.
        secrets = [[secret, None], *[[s, min(exp or expires, expires)] for s, exp in old]]
        sub = replace(sub, secrets=ctx.store.subscriptions.seal_secrets(sub.id, secrets), updated_at=now)
        await ctx.durable.subscriptions.update_subscription(sub, ["secrets", "updated_at"])
        return JSONResponse(views.subscription(sub, secret))


class TestSubscription(HTTPEndpoint):
    async def post(self, request: Request) -> Response:
        ctx, client, sub = await Context.owned(request, Subscription)
        req = await json_body(request, ctx.settings, TestEventRequest)
        await ctx.rate("send", client, "test, retry or recover requests")
        now = domain.now_ms()
        if req.event_type is not None and req.event_type != domain.EVENT_TEST:
            event = example_event(str(req.event_type), client, ctx.settings, now)
            if not await ctx.durable.subscriptions.emit_test_event(client, sub.id, event, now, example=True):
                raise SubscriptionDisabled("The subscription is disabled; enable it to test it.")
            return JSONResponse({"event_id": event.id}, status_code=202)
        event_id = domain.new_id("evt")
        body = {
            "type": domain.EVENT_TEST,
            "timestamp": domain.rfc3339(now),
            "data": {"subscription_id": sub.id, "message": "This is a test event from hookbridge."},
        }
        event = Event(
            id=event_id, type=domain.EVENT_TEST, created=now, body=json.dumps(body, separators=(",", ":"))
        )
        if not await ctx.durable.subscriptions.emit_test_event(client, sub.id, event, now):
            raise SubscriptionDisabled("The subscription is disabled; enable it to test it.")
        return JSONResponse({"event_id": event_id}, status_code=202)


class SubscriptionDeliveries(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, _, sub = await Context.owned(request, Subscription)
        q = query(request, DeliveryPage)
        try:
            page = await ctx.store.deliveries.list_deliveries(
                sub.id,
                limit=q.limit,
                cursor=q.cursor,
                status=q.status,
                event_type=q.event_type,
                run_id=q.run_id,
            )
        except (ValueError, UnicodeDecodeError):
            raise bad_cursor() from None
        return JSONResponse(views.page([views.delivery(d) for d in page.data], page.next_cursor))


class RecoverDeliveries(HTTPEndpoint):
    async def post(self, request: Request) -> Response:
        ctx, client, sub = await Context.owned(request, Subscription)
        req = await json_body(request, ctx.settings, Recover)
        await ctx.rate("send", client, "test, retry or recover requests")
        now = domain.now_ms()
        since = int(req.since.timestamp() * 1000)
        until = None if req.until is None else int(req.until.timestamp() * 1000)
        try:
            failed, next_cursor = await ctx.store.deliveries.failed_deliveries_since(
                sub.id, since, until_ms=until, cursor=req.cursor
            )
        except (ValueError, UnicodeDecodeError):
            raise bad_cursor() from None
        retried = 0
        for delivery_id in failed:
            retried += isinstance(await ctx.durable.deliveries.retry_delivery(delivery_id, now), Applied)
        return JSONResponse({"retried": retried, "next_cursor": next_cursor}, status_code=202)


class DeliveryOne(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, _, d = await Context.owned(request, Delivery)
        return JSONResponse(views.delivery(d, await ctx.store.deliveries.delivery_attempts(d.id)))


class RetryDelivery(HTTPEndpoint):
    async def post(self, request: Request) -> Response:
        ctx, client, d = await Context.owned(request, Delivery)
        await ctx.rate("send", client, "test, retry or recover requests")
        now = domain.now_ms()
        outcome = await ctx.durable.deliveries.retry_delivery(d.id, now)
        if isinstance(outcome, Busy):
            raise DeliveryInFlight(
                "An attempt of this delivery is being sent right now; retry once it has ended."
            )
        if isinstance(outcome, Missing):
            raise NotFound(f"No delivery {d.id}.")
        resent = replace(d, status=domain.DeliveryStatus.PENDING, next_attempt_at=now, series=d.attempts)
        return JSONResponse(views.delivery(resent), status_code=202)


routes = [
    Route("/v1/subscriptions", SubscriptionRoutes),
    Route("/v1/subscriptions/{sub_id}", SubscriptionOne),
    Route("/v1/subscriptions/{sub_id}/secret", SubscriptionSecret),
    Route("/v1/subscriptions/{sub_id}/rotate-secret", RotateSecret),
    Route("/v1/subscriptions/{sub_id}/test", TestSubscription),
    Route("/v1/subscriptions/{sub_id}/deliveries", SubscriptionDeliveries),
    Route("/v1/subscriptions/{sub_id}/recover", RecoverDeliveries),
    Route("/v1/deliveries/{delivery_id}", DeliveryOne),
    Route("/v1/deliveries/{delivery_id}/retry", RetryDelivery),
]
