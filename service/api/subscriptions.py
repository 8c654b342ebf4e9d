"""``/v1/subscriptions`` and ``/v1/deliveries``: where callbacks go, and what happened to them."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service import domain
from service.api.context import Context
from service.api.validation import (
    check_metadata,
    choice_param,
    event_types,
    is_id,
    json_object,
    limit_param,
    timestamp,
)
from service.delivery.signing import new_secret
from service.delivery.urlsafety import UnsafeURL
from service.domain import Conflict, HookbridgeError, InvalidInput, NotFound, RateLimited, ValidationErrors
from service.records import (
    SUBSCRIPTION_HASH,
    Delivery,
    Event,
    Subscription,
    public_delivery,
    public_subscription,
    replace,
)
from service.store import OWNER_DISABLED, SecretUnavailable

_SUB_FIELDS = {
    "url",
    "event_types",
    "description",
    "metadata",
    "disabled",
    "max_in_flight",
    "rate_limit_per_s",
}
DELIVERY_STATUSES = ("pending", "succeeded", "failed")


def _with(sub: Subscription, fields: dict[str, str]) -> tuple[Subscription, list[str]]:
    """``sub`` with the stored ``fields`` (hash names, from :func:`_fields`) written over it, and the names
    of the record fields they changed."""
    changed = [name for name, stored in SUBSCRIPTION_HASH.items() if stored in fields]
    return Subscription.from_hash({**sub.to_hash(), **fields}), changed


class SecretsUnavailable(HookbridgeError):
    status, code, title = 503, "unavailable", "Service unavailable"


def _secrets(ctx: Context, sub: Subscription) -> list[list[Any]]:
    """The subscription's secrets, opened; a sealed value whose key is not configured is the operator's
    fault, not the tenant's: 503, with the key id in the log only."""
    try:
        return ctx.store.open_secrets(sub)
    except SecretUnavailable as exc:
        ctx.log.error("subscription secret cannot be decrypted", subscription_id=sub.id, error=str(exc))
        raise SecretsUnavailable(
            "This subscription's secret cannot be read with the keys the service holds; try again later."
        ) from None


async def _send_rate(ctx: Context, client: str) -> None:
    """Sends on demand (test, retry, recover) are outbound requests a tenant can aim at any URL it
    registers: they share a per-client rate, the same as submits (``SUBMIT_RATE_PER_S``, ``SUBMIT_BURST``)
    on a limiter of their own."""
    settings = ctx.settings
    wait_s = await ctx.store.rate_limit("send", client, settings.submit_rate_per_s, settings.submit_burst)
    if wait_s > 0:
        raise RateLimited(
            f"More than {settings.submit_rate_per_s:g} test, retry or recover requests per second for this "
            "client; retry after the time in Retry-After.",
            retry_after=max(1, math.ceil(wait_s)),
        )


async def _own_sub(ctx: Context, client: str, sub_id: str) -> Subscription:
    sub = await ctx.store.get_subscription(sub_id) if is_id("sub", sub_id) else None
    if sub is None or sub.client != client:
        raise NotFound(f"No subscription {sub_id[:40]}.")
    return sub


async def _fields(ctx: Context, body: dict[str, Any], *, creating: bool) -> dict[str, str]:
    errors = ValidationErrors()
    for name in sorted(set(body) - _SUB_FIELDS):
        errors.add(name, "unknown field")
    if creating and "disabled" in body:
        errors.add("disabled", "create the subscription, then PATCH it")
    out: dict[str, str] = {}
    if "url" in body or creating:
        await _url_field(ctx, body.get("url"), out, errors)
    if "event_types" in body:
        types = event_types(body["event_types"], errors)
        out["event_types"] = json.dumps(types) if types else ""
    _text_fields(ctx, body, out, errors)
    if "disabled" in body and not creating:
        _disabled_field(body["disabled"], out, errors)
    _limit_fields(body, out, errors)
    errors.raise_if_any()
    return out


async def _url_field(ctx: Context, url: Any, out: dict[str, str], errors: ValidationErrors) -> None:
    if not isinstance(url, str) or not url or len(url) > 2048:
        errors.add("url", "required: an http(s) URL of at most 2048 characters")
        return
    try:
        await ctx.url_policy.check(url)
    except UnsafeURL as exc:
        raise InvalidInput(
            f"This URL cannot receive callbacks: {exc}", code="callback_url_not_allowed"
        ) from None
    except ValueError:  # e.g. UnicodeError from the resolver: an empty or too long label
        raise InvalidInput(
            "This URL cannot receive callbacks: its host is not a valid name.",
            code="callback_url_not_allowed",
        ) from None
    out["url"] = url


def _text_fields(ctx: Context, body: dict[str, Any], out: dict[str, str], errors: ValidationErrors) -> None:
    """description and metadata."""
    if "description" in body:
        desc = body["description"]
        if desc is not None and (not isinstance(desc, str) or len(desc) > 500):
            errors.add("description", "a string of at most 500 characters")
        else:
            out["description"] = desc or ""
    if "metadata" in body:
        meta = body["metadata"]
        if not isinstance(meta, dict):
            errors.add("metadata", "must be an object of strings")
        else:
            check_metadata(meta, ctx.settings, errors)
            out["metadata"] = json.dumps(meta)


def _disabled_field(disabled: Any, out: dict[str, str], errors: ValidationErrors) -> None:
    if not isinstance(disabled, bool):
        errors.add("disabled", "true or false")
    elif disabled:
        out.update(disabled="1", disabled_reason=OWNER_DISABLED)
    else:
        out.update(disabled="0", disabled_reason="", failing_since="", consecutive_failures="0")


def _limit_fields(body: dict[str, Any], out: dict[str, str], errors: ValidationErrors) -> None:
    """max_in_flight and rate_limit_per_s: a bound, or null for the default."""
    if "max_in_flight" in body:
        value = body["max_in_flight"]
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1000
        ):
            errors.add("max_in_flight", "a whole number from 1 to 1000, or null for the default")
        else:
            out["max_in_flight"] = "" if value is None else str(value)
    if "rate_limit_per_s" in body:
        value = body["rate_limit_per_s"]
        if value is not None and (
            not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 10000
        ):
            errors.add("rate_limit_per_s", "a number above 0 and at most 10000, or null for no limit")
        else:
            out["rate_per_s"] = "" if value is None else str(float(value))


async def create_subscription(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    body = await json_object(request, ctx.settings)
    fields = await _fields(ctx, body, creating=True)
    now = domain.now_ms()
    secret = new_secret()
    sub_id = domain.new_id("sub")
    new = Subscription(
        id=sub_id,
        client=client,
        url="",
        secrets=ctx.store.seal_secrets(sub_id, [[secret, None]]),
        created_at=now,
        updated_at=now,
    )
    sub, _ = _with(new, fields)
    quota = ctx.settings.max_subscriptions_per_client
    if not await ctx.store.create_subscription(sub, max_count=quota):
        raise Conflict(
            f"This client already has {quota} subscriptions (HOOKBRIDGE_MAX_SUBSCRIPTIONS_PER_CLIENT); "
            "delete one first.",
            code="quota_exceeded",
            quota=quota,
        )
    ctx.log.info("subscription created", subscription_id=sub.id)
    return JSONResponse(
        {**public_subscription(sub), "secret": secret},
        status_code=201,
        headers={"Location": f"/v1/subscriptions/{sub.id}"},
    )


async def list_subscriptions(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    try:
        page = await ctx.store.list_subscriptions(
            client, limit=limit_param(request), cursor=request.query_params.get("cursor")
        )
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(
            "The cursor is not one this API gave out.", errors=[{"field": "cursor", "message": "invalid"}]
        ) from None
    return JSONResponse(
        {"data": [public_subscription(s) for s in page.data], "next_cursor": page.next_cursor}
    )


async def get_subscription(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    return JSONResponse(public_subscription(await _own_sub(ctx, client, request.path_params["sub_id"])))


async def patch_subscription(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    sub = await _own_sub(ctx, client, request.path_params["sub_id"])
    fields = await _fields(ctx, await json_object(request, ctx.settings), creating=False)
    if fields:
        fields["updated"] = str(domain.now_ms())
        if not ctx.store.secret_box.current(sub.secrets):
            # Any write seals a secret stored plain (or under a key no longer first): the lazy migration.
            with contextlib.suppress(SecretUnavailable):
                fields["secrets"] = ctx.store.seal_secrets(sub.id, ctx.store.open_secrets(sub))
        sub, changed = _with(sub, fields)
        await ctx.store.update_subscription(sub, changed)
    return JSONResponse(public_subscription(sub))


async def delete_subscription(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    sub = await _own_sub(ctx, client, request.path_params["sub_id"])
    await ctx.store.delete_subscription(sub.id, client)
    return Response(status_code=204)


async def get_secret(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    sub = await _own_sub(ctx, client, request.path_params["sub_id"])
    return JSONResponse({"secret": _secrets(ctx, sub)[0][0]})


async def rotate_secret(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    sub = await _own_sub(ctx, client, request.path_params["sub_id"])
    now = domain.now_ms()
    old = [[s, exp] for s, exp in _secrets(ctx, sub) if exp is None or exp > now]
    expires = now + int(ctx.settings.secret_rotation_overlap_s * 1000)
    secret = new_secret()
    # The new secret signs first; the old ones keep signing beside it until the overlap ends.
    secrets = [[secret, None], *[[s, min(exp or expires, expires)] for s, exp in old]]
    sub = replace(sub, secrets=ctx.store.seal_secrets(sub.id, secrets), updated_at=now)
    await ctx.store.update_subscription(sub, ["secrets", "updated_at"])
    return JSONResponse({**public_subscription(sub), "secret": secret})


async def test_subscription(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    sub = await _own_sub(ctx, client, request.path_params["sub_id"])
    await _send_rate(ctx, client)
    now = domain.now_ms()
    event_id = domain.new_id("evt")
    body = {
        "type": domain.EVENT_TEST,
        "timestamp": domain.rfc3339(now),
        "data": {"subscription_id": sub.id, "message": "This is a test event from hookbridge."},
    }
    event = Event(
        id=event_id, type=domain.EVENT_TEST, created=now, body=json.dumps(body, separators=(",", ":"))
    )
    created = await ctx.store.emit_test_event(client, sub.id, event, now)
    if not created:
        raise Conflict("The subscription is disabled; enable it to test it.", code="subscription_disabled")
    return JSONResponse({"event_id": event_id}, status_code=202)


async def list_deliveries(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    sub = await _own_sub(ctx, client, request.path_params["sub_id"])
    status = choice_param(request, "status", DELIVERY_STATUSES)
    try:
        page = await ctx.store.list_deliveries(
            sub.id, limit=limit_param(request), cursor=request.query_params.get("cursor"), status=status
        )
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(
            "The cursor is not one this API gave out.", errors=[{"field": "cursor", "message": "invalid"}]
        ) from None
    return JSONResponse({"data": [public_delivery(d) for d in page.data], "next_cursor": page.next_cursor})


async def _own_delivery(ctx: Context, client: str, delivery_id: str) -> Delivery:
    d = await ctx.store.get_delivery(delivery_id) if is_id("dlv", delivery_id) else None
    if d is None or d.client != client:
        raise NotFound(f"No delivery {delivery_id[:40]}.")
    return d


async def get_delivery(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    d = await _own_delivery(ctx, client, request.path_params["delivery_id"])
    attempts = [a.public() for a in await ctx.store.delivery_attempts(d.id)]
    return JSONResponse({**public_delivery(d), "attempt_log": attempts})


async def retry_delivery(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    d = await _own_delivery(ctx, client, request.path_params["delivery_id"])
    await _send_rate(ctx, client)
    if not await ctx.store.retry_delivery(d.id, domain.now_ms()):
        raise Conflict("The delivery is already pending.", code="delivery_pending")
    return JSONResponse(public_delivery(replace(d, status="pending")), status_code=202)


async def recover(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    sub = await _own_sub(ctx, client, request.path_params["sub_id"])
    body = await json_object(request, ctx.settings)
    extra = set(body) - {"since"}
    if extra:
        raise InvalidInput(
            "Unknown fields.", errors=[{"field": f, "message": "unknown field"} for f in sorted(extra)]
        )
    since = timestamp(body.get("since"), "since")
    await _send_rate(ctx, client)
    now = domain.now_ms()
    retried = 0
    for delivery_id in await ctx.store.failed_deliveries_since(sub.id, since):
        retried += await ctx.store.retry_delivery(delivery_id, now)
    return JSONResponse({"retried": retried}, status_code=202)


routes = [
    Route("/v1/subscriptions", create_subscription, methods=["POST"]),
    Route("/v1/subscriptions", list_subscriptions, methods=["GET"]),
    Route("/v1/subscriptions/{sub_id}", get_subscription, methods=["GET"]),
    Route("/v1/subscriptions/{sub_id}", patch_subscription, methods=["PATCH"]),
    Route("/v1/subscriptions/{sub_id}", delete_subscription, methods=["DELETE"]),
    Route("/v1/subscriptions/{sub_id}/secret", get_secret, methods=["GET"]),
    Route("/v1/subscriptions/{sub_id}/rotate-secret", rotate_secret, methods=["POST"]),
    Route("/v1/subscriptions/{sub_id}/test", test_subscription, methods=["POST"]),
    Route("/v1/subscriptions/{sub_id}/deliveries", list_deliveries, methods=["GET"]),
    Route("/v1/subscriptions/{sub_id}/recover", recover, methods=["POST"]),
    Route("/v1/deliveries/{delivery_id}", get_delivery, methods=["GET"]),
    Route("/v1/deliveries/{delivery_id}/retry", retry_delivery, methods=["POST"]),
]
