"""``/v1/runs``: submit, read, list, cancel, result, events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.api import views
from service.api.body import Submission, bad_cursor, idempotency_key, query, small_body, submission
from service.api.context import Context, annotate
from service.api.models import METADATA_KEY, METADATA_PREFIX, Page
from service.api.problems import (
    Conflict,
    IdempotencyKeyReused,
    ResultGone,
    ResultNotReady,
    RunNotCancelable,
    RunNotSucceeded,
    ValidationFailed,
)
from service.api.views import JSONResponse
from service.config.settings import Settings
from service.core import domain, lifecycle, trail
from service.core.domain import TERMINAL
from service.core.records import Run
from service.observability import tracing
from service.observability.metrics import count_run_end
from service.store import Applied, Missing, OverRate


def _accepted(run: Run, *, replayed: bool = False) -> Response:
    headers = {"Location": f"/v1/runs/{run.id}"}
    if replayed:
        headers["Idempotency-Replayed"] = "true"
    return JSONResponse(views.run(run), status_code=202, headers=headers)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(at: datetime | None) -> int | None:
    """The first whole millisecond at or after ``at`` (the index's scores are ms): exact, no float."""
    if at is None:
        return None
    return -(-((at - _EPOCH) // timedelta(microseconds=1)) // 1000)


def metadata_filters(request: Request, settings: Settings) -> list[tuple[str, str]]:
    """The ``metadata.KEY=VALUE`` parameters, checked as a run's metadata is (key, value size, count)."""
    pairs: list[tuple[str, str]] = []
    errors: list[dict[str, str]] = []
    for name, value in request.query_params.multi_items():
        if not name.startswith(METADATA_PREFIX):
            continue
        key = name[len(METADATA_PREFIX) :]
        if not METADATA_KEY.fullmatch(key):
            errors.append({"field": name, "message": "a key is 1 to 40 letters, digits, '_', '-', '.', ':'"})
        elif len(value.encode()) > settings.max_metadata_value_bytes:
            limit = settings.max_metadata_value_bytes
            errors.append({"field": name, "message": f"a value takes at most {limit} bytes of UTF-8"})
        else:
            pairs.append((key, value))
    if len(pairs) > settings.max_metadata_pairs:
        errors.append(
            {"field": "metadata", "message": f"at most {settings.max_metadata_pairs} metadata filters"}
        )
    if errors:
        raise ValidationFailed("The query has invalid parameters.", errors)
    return pairs


class RunRoutes(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, client = Context.authenticated(request)
        metadata = metadata_filters(request, ctx.settings)
        q = query(request, ctx.models.run_page, skip=METADATA_PREFIX)
        try:
            page = await ctx.store.runs.list_runs(
                client,
                limit=q.limit,
                cursor=q.cursor,
                status=q.status,
                vendor=q.vendor,
                created_after_ms=_ms(q.created_after),
                created_before_ms=_ms(q.created_before),
                metadata=metadata,
            )
        except (ValueError, UnicodeDecodeError):
            raise bad_cursor() from None
        return JSONResponse(views.page([views.run(r) for r in page.data], page.next_cursor))

    async def post(self, request: Request) -> Response:
        ctx, client = Context.authenticated(request)
        # A client over its rate costs one Redis call, not a 50 MB upload: a body that may be large is
        # refused before it is read. The submit is counted by the run's creation, in the same step, once
        # it has passed validation and is not a replay (bad input and replays change nothing).
        if not small_body(request):
            await ctx.rate("submit", client, "submits", take=False)
        key = idempotency_key(request)
        # Answer a replay before reading a possibly large body a second time into Redis.
        record = await ctx.store.runs.idempotency_record(client, key) if key is not None else None
        sub = await submission(request, ctx.settings, ctx.models)
        await _check_subscriptions(ctx, client, sub.request.subscription_ids)
        # What makes a retry "the same request": only an Idempotency-Key needs it.
        fingerprint = sub.fingerprint() if key is not None else ""
        if record is not None:
            return await _replay(ctx, record, fingerprint)
        run = _new_run(ctx.store.runs.new_run_id(client, key), client, sub)
        try:
            existing = await ctx.durable.runs.create_run(
                run, sub.content, (key, fingerprint) if key is not None else None, rate=ctx.submit_rate
            )
        except OverRate as over:
            raise ctx.over_rate(over.wait_s, "submits") from None
        if existing is not None:
            return await _replay(ctx, existing, fingerprint)
        annotate(request, run_id=run.id, vendor=run.vendor)  # on the request's log line
        return _accepted(run)


def _new_run(run_id: str, client: str, sub: Submission) -> Run:
    req = sub.request
    return lifecycle.new_run(
        run_id=run_id,
        client=client,
        vendor=req.vendor,
        operation=req.operation,
        document=sub.document,
        options=sub.options,
        metadata=req.metadata,
        subscription_ids=list(dict.fromkeys(req.subscription_ids)),
        zero_retention=req.zero_retention,
        now_ms=domain.now_ms(),
        traceparent=tracing.current_traceparent(),
    )


async def _check_subscriptions(ctx: Context, client: str, ids: list[str]) -> None:
    subs = await ctx.store.subscriptions.get_subscriptions(ids) if ids else []
    unknown = [
        {
            "field": f"subscription_ids.{i}",
            "pointer": f"/subscription_ids/{i}",
            "message": f"no subscription {sid}",
        }
        for i, (sid, sub) in enumerate(zip(ids, subs, strict=True))
        if not sub or sub.client != client
    ]
    if unknown:
        raise ValidationFailed("Unknown subscriptions.", unknown)


async def _replay(ctx: Context, record: str, fingerprint: str) -> Response:
    stored_fingerprint, _, run_id = record.partition(" ")
    if stored_fingerprint != fingerprint:
        raise IdempotencyKeyReused("This Idempotency-Key was used with a different request.")
    run = await ctx.store.runs.get_run(run_id)
    if run is None:
        raise ResultGone("The run for this Idempotency-Key is past retention.")
    return _accepted(run, replayed=True)


class RunOne(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        _, _, run = await Context.owned(request, Run)
        return JSONResponse({**views.run(run), **trail.public(run)})  # the trail only here


class CancelRun(HTTPEndpoint):
    async def post(self, request: Request) -> Response:
        for _ in range(5):
            ctx, _, run = await Context.owned(request, Run)
            if run.status == domain.CANCELED:
                return JSONResponse(views.run(run))  # canceling twice is not an error
            if run.status in TERMINAL:
                raise RunNotCancelable(f"The run has already ended ({run.status}).")
            vendor = ctx.settings.vendors.get(run.vendor)
            change = lifecycle.canceled(
                run,
                domain.now_ms(),
                settings=ctx.settings,
                vendor_can_cancel=vendor is not None and vendor.supports_cancel,
            )
            outcome = await ctx.durable.runs.transition(change)
            if isinstance(outcome, Applied):
                if outcome.ended:
                    count_run_end(run.vendor, change.run.status, run.client)
                ctx.log.info("run canceled", run_id=run.id, vendor=run.vendor)
                return JSONResponse(views.run(change.run))
            if isinstance(outcome, Missing):
                break
        raise Conflict("The run is changing too fast to cancel; try again.")


class RunResult(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, _, run = await Context.owned(request, Run)
        if run.zero_retention:
            raise ResultGone("The run used zero retention: its result went only to the callback.")
        if run.terminal and run.status != domain.SUCCEEDED:
            raise RunNotSucceeded(f"The run {run.status}; it has no result, and never will.")
        if run.status != domain.SUCCEEDED:
            raise ResultNotReady("The run has not ended yet; ask again once it has.")
        raw = await ctx.store.runs.get_result(run)
        if raw is None:
            raise ResultGone("The result is past retention.")
        # A file result (Nutrient split's zip) is served as the file; anything else is the vendor's JSON.
        media_type = run.result_type or "application/json"
        headers = (
            {"Content-Disposition": f'attachment; filename="{run.id}.zip"'}
            if media_type == "application/zip"
            else None
        )
        return Response(raw, media_type=media_type, headers=headers)


class RunDeliveries(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, _, run = await Context.owned(request, Run)
        q = query(request, Page)
        try:
            page = await ctx.store.deliveries.run_deliveries(run.id, limit=q.limit, cursor=q.cursor)
        except (ValueError, UnicodeDecodeError):
            raise bad_cursor() from None
        return JSONResponse(views.page([views.delivery(d) for d in page.data], page.next_cursor))


class RunEvents(HTTPEndpoint):
    async def get(self, request: Request) -> Response:
        ctx, _, run = await Context.owned(request, Run)
        events = [
            {"id": event_id, "type": body["type"], "created_at": body["timestamp"], "data": body["data"]}
            for event_id, body in await ctx.store.runs.run_events(run)
        ]
        return JSONResponse(views.page(events, None))


routes = [
    Route("/v1/runs", RunRoutes),
    Route("/v1/runs/{run_id}", RunOne),
    Route("/v1/runs/{run_id}/cancel", CancelRun),
    Route("/v1/runs/{run_id}/result", RunResult),
    Route("/v1/runs/{run_id}/events", RunEvents),
    Route("/v1/runs/{run_id}/deliveries", RunDeliveries),
]
