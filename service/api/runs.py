"""``/v1/runs``: submit, read, list, cancel, result, events."""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service import domain, lifecycle, trail
from service.api.context import Context
from service.api.validation import choice_param, idempotency_key, is_id, limit_param, run_request
from service.domain import TERMINAL, Conflict, Gone, InvalidInput, NotFound, RateLimited
from service.settings import Settings


async def _own_run(ctx: Context, client: str, run_id: str) -> dict[str, Any]:
    run = await ctx.store.get_run(run_id) if is_id("run", run_id) else None
    if run is None or run["client"] != client:
        raise NotFound(f"No run {run_id[:40]}.")
    return run


def _can_cancel(settings: Settings, vendor: str) -> bool:
    configured = settings.vendors.get(vendor)
    return configured is not None and configured.supports_cancel


def _accepted(run: dict[str, Any], *, replayed: bool = False) -> Response:
    headers = {"Location": f"/v1/runs/{run['id']}"}
    if replayed:
        headers["Idempotency-Replayed"] = "true"
    return JSONResponse(lifecycle.public(run), status_code=202, headers=headers)


async def create_run(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    # A client over its rate costs one Redis call, not a 50 MB upload; a submit is counted only once it
    # has passed validation and is not a replay (bad input and replays change nothing).
    await _submit_rate(ctx, client, take=False)
    key = idempotency_key(request)
    record = None
    if key is not None:
        # Answer a replay before reading a possibly large body a second time into Redis.
        record = await ctx.store.idempotency_record(client, key)
    req = await run_request(request, ctx.settings)
    if req.subscription_ids:
        subs = await ctx.store.get_subscriptions(req.subscription_ids)
        unknown = [
            sid
            for sid, sub in zip(req.subscription_ids, subs, strict=True)
            if not sub or sub["client"] != client
        ]
        if unknown:
            raise InvalidInput(
                "Unknown subscriptions.",
                errors=[
                    {"field": "subscription_ids", "message": f"no subscription {sid}"} for sid in unknown
                ],
            )
    fingerprint = req.fingerprint()
    if key is not None and record is not None:
        return await _replay(ctx, record, fingerprint)
    await _submit_rate(ctx, client, take=True)  # a replay is not a new submit
    now = domain.now_ms()
    run = lifecycle.new_run(
        run_id=domain.new_id("run"),
        client=client,
        vendor=req.vendor,
        operation=req.operation,
        document=req.document,
        options=req.options,
        metadata=req.metadata,
        subscription_ids=req.subscription_ids,
        zero_retention=req.zero_retention,
        now_ms=now,
    )
    existing = await ctx.store.create_run(run, req.content, (key, fingerprint) if key is not None else None)
    if existing is not None:
        return await _replay(ctx, existing, fingerprint)
    ctx.log.info("run accepted", run_id=run["id"], vendor=run["vendor"])
    return _accepted(run)


async def _submit_rate(ctx: Context, client: str, *, take: bool) -> None:
    settings = ctx.settings
    wait_s = await ctx.store.rate_limit(
        "submit", client, settings.submit_rate_per_s, settings.submit_burst, take=take
    )
    if wait_s > 0:
        raise RateLimited(
            f"More than {settings.submit_rate_per_s:g} submits per second (burst {settings.submit_burst}) "
            "for this client (HOOKBRIDGE_SUBMIT_RATE_PER_S); retry after the time in Retry-After.",
            retry_after=max(1, math.ceil(wait_s)),
        )


async def _replay(ctx: Context, record: str, fingerprint: str) -> Response:
    stored_fingerprint, _, run_id = record.partition(" ")
    if stored_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used with a different request.", code="idempotency_key_reused"
        )
    run = await ctx.store.get_run(run_id)
    if run is None:
        raise Gone("The run for this Idempotency-Key is past retention.", code="result_gone")
    return _accepted(run, replayed=True)


async def get_run(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    run = await _own_run(ctx, client, request.path_params["run_id"])
    return JSONResponse({**lifecycle.public(run), **trail.public(run)})  # the trail only here


async def list_runs(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    limit = limit_param(request)
    status = choice_param(request, "status", domain.RUN_STATUSES)
    vendor = choice_param(request, "vendor", tuple(ctx.settings.vendors))
    cursor = request.query_params.get("cursor")
    try:
        page = await ctx.store.list_runs(client, limit=limit, cursor=cursor, status=status, vendor=vendor)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(
            "The cursor is not one this API gave out.", errors=[{"field": "cursor", "message": "invalid"}]
        ) from None
    return JSONResponse({"data": [lifecycle.public(r) for r in page.data], "next_cursor": page.next_cursor})


async def cancel_run(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    run_id = request.path_params["run_id"]
    for _ in range(5):
        run = await _own_run(ctx, client, run_id)
        if run["status"] in TERMINAL:
            if run["status"] == domain.CANCELED:
                return JSONResponse(lifecycle.public(run))  # canceling twice is not an error
            raise Conflict(f"The run has already ended ({run['status']}).", code="run_not_cancelable")
        change = lifecycle.canceled(
            run,
            domain.now_ms(),
            settings=ctx.settings,
            vendor_can_cancel=_can_cancel(ctx.settings, run["vendor"]),
        )
        outcome, _, _ = await ctx.store.transition(change)
        if outcome == "ok":
            ctx.log.info("run canceled", run_id=run_id, vendor=run["vendor"])
            return JSONResponse(lifecycle.public(change.run))
        if outcome == "missing":
            break
    raise Conflict("The run is changing too fast to cancel; try again.", code="conflict")


async def get_result(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    run = await _own_run(ctx, client, request.path_params["run_id"])
    if run.get("zero_retention"):
        raise Gone("The run used zero retention: its result went only to the callback.", code="result_gone")
    if run["status"] != domain.SUCCEEDED:
        detail = (
            "The run has no result yet."
            if run["status"] not in TERMINAL
            else f"The run {run['status']}; it has no result."
        )
        raise NotFound(detail, code="result_not_ready")
    raw = await ctx.store.get_result(run["id"])
    if raw is None:
        raise Gone("The result is past retention.", code="result_gone")
    # A file result (Nutrient split's zip) is served as the file; anything else is the vendor's JSON.
    media_type = run.get("_result_type") or "application/json"
    headers = (
        {"Content-Disposition": f'attachment; filename="{run["id"]}.zip"'}
        if media_type == "application/zip"
        else None
    )
    return Response(raw, media_type=media_type, headers=headers)


async def run_events(request: Request) -> Response:
    ctx = Context.of(request)
    client = ctx.keys.authenticate(request)
    run = await _own_run(ctx, client, request.path_params["run_id"])
    events = [
        {"id": event_id, "type": body["type"], "created_at": body["timestamp"], "data": body["data"]}
        for event_id, body in await ctx.store.run_events(run["id"])
    ]
    return JSONResponse({"data": events, "next_cursor": None})


routes = [
    Route("/v1/runs", create_run, methods=["POST"]),
    Route("/v1/runs", list_runs, methods=["GET"]),
    Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
    Route("/v1/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
    Route("/v1/runs/{run_id}/result", get_result, methods=["GET"]),
    Route("/v1/runs/{run_id}/events", run_events, methods=["GET"]),
]
