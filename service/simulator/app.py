"""The simulator's Starlette app: vendor mounts, the request log, injected faults and the ``/_sim`` routes.

Vendor routes (each prefix is the vendor's base URL):

- ``POST /nutrient/extraction/{parse|extract|classify|split}/async``
- ``GET|DELETE /nutrient/extraction/runs/{run_id}``, ``GET .../assets/result``, ``GET .../assets/zip``,
  ``POST .../cancel``
- ``POST /cloudsquid/api/projects/{project}/tables/{table_id}/files``, ``.../run``, ``.../extract``;
  ``GET .../run/{run_id}``
- ``POST /uptiq/extract``, ``GET /uptiq/document-extractions/{extraction_id}``
- ``POST /textract`` (AWS JSON 1.1, ``X-Amz-Target: Textract.*``; textract.py)
- ``POST /google_docai/v1/projects/{p}/locations/{l}/processors/{id}[/processorVersions/{v}]:batchProcess``,
  ``GET .../operations/{id}``, ``POST .../operations/{id}:cancel`` (google_docai.py)
- ``POST /token``: Google's OAuth token endpoint (oauth.py)
- ``/s3/...`` and ``/gcs/...``: the S3 and GCS emulators (storage.py), forwarded to their own loopback
  ports, which ``GET /_sim/storage`` lists; ``POST /_sim/google/service-account`` makes a trusted
  throwaway service-account key
- ``POST /documentintelligence/documentModels/{modelId}:analyze``, ``GET|DELETE
  .../documentModels/{modelId}/analyzeResults/{resultId}`` (``azure_di.py``; the endpoint is the root)
- ``POST /llamaparse/api/v2/parse``, ``.../parse/upload``, ``GET|DELETE .../parse/{id}``, ``POST
  .../parse/{id}/cancel``; presigned downloads at ``/llamaparse-storage/...`` (``llamaparse.py``)

Every vendor request takes a token from its vendor's bucket for the API key it presents (when that
vendor's ``*_rps`` is set); an empty bucket answers 429. Control routes, unauthenticated, never limited
and never faulted: ``GET|DELETE /_sim/requests`` (the last 100 000 vendor
requests, optionally ``?vendor=``), ``GET|PATCH /_sim/config``, ``GET /_sim/stats``, and ``GET /_sim/runs``
(every run with its status and, as Unix times, when it was created and when it ends or ended, optionally
``?vendor=``; the benchmarks measure from it how soon a finished run was called back).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.core.clock import SYSTEM, Clock

from . import azure_di, cloudsquid, google_docai, llamaparse, nutrient, oauth, textract, uptiq
from ._state import LogEntry, SimState, VendorStore, sim_state
from .config import VENDORS, SimulatorConfig
from .storage import Storage
from .storage import proxy as storage_proxy

_PROXIED = ["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"]

PREFIXES: dict[str, str] = {"nutrient": "/nutrient", "cloudsquid": "/cloudsquid/api", "uptiq": "/uptiq"}
PREFIXES.update({"textract": "/textract", "google_docai": "/google_docai"})
# Azure's endpoint is the simulator's root: its SDK parses the result id from a host-only endpoint.
PREFIXES.update({"azure_di": "/documentintelligence", "llamaparse": "/llamaparse"})
_DROP_DRAIN_TIMEOUT_S = 5.0


def _vendor_of(path: str) -> str | None:
    for vendor, prefix in PREFIXES.items():
        if path == prefix or path.startswith(prefix + "/"):
            return vendor
    return None


# The header each vendor takes its API key from: the rate limit is per key.
_KEY_HEADERS = {"nutrient": "authorization", "cloudsquid": "x-api-key", "uptiq": "x-api-key"}
_KEY_HEADERS.update({"azure_di": "ocp-apim-subscription-key", "llamaparse": "authorization"})
_KEY_HEADERS.update({"textract": "authorization", "google_docai": "authorization"})
# Vendors whose module answers its own 429s and injected 5xx in its documented shapes (Textract never
# answers 429: its limit is a 400; Document AI's is a google.rpc.Status).
_FAULT_RESPONSES = {"azure_di": azure_di.fault_response, "llamaparse": llamaparse.fault_response}
_FAULT_RESPONSES.update({"textract": textract.fault_response, "google_docai": google_docai.fault_response})


def _rate_key(vendor: str, headers: Headers) -> str:
    """The key a request is limited by; a SigV4 header changes on every request, its access key does not."""
    value = headers.get(_KEY_HEADERS[vendor], "")
    if vendor == "textract":
        return value.partition("Credential=")[2].partition("/")[0]
    return value


def _fault_response(vendor: str, status: int, state: SimState) -> Response:
    """A 429 (from the rate limit) or an injected 5xx, in the vendor's own error shape.

    Nutrient's 429 is documented ("rate limit exceeded for your subscription", NU-err) in its usual error
    body. Cloudsquid and Uptiq document no rate limit at all: their 429 bodies are a GUESS (Cloudsquid's
    ``Error`` schema ``{errorMessage}``, Uptiq's ``{status, message}``); check the vendor's API reference
    (Cloudsquid: the OpenAPI of each path; Uptiq: the Conventions page) before going live. No vendor
    documents ``Retry-After``, so none is sent.
    """
    if vendor in _FAULT_RESPONSES:
        return _FAULT_RESPONSES[vendor](status, state)
    message = (
        "rate limit exceeded for your subscription" if status == 429 else "backend temporarily unavailable"
    )
    if vendor == "nutrient":
        body: dict[str, Any] = {"status": status, "requestId": state.new_uuid(), "errorMessage": message}
        response: Response = JSONResponse(body, status_code=status)
    elif vendor == "uptiq":
        response = JSONResponse({"status": "error", "message": message}, status_code=status)
    elif status == 429:
        response = JSONResponse({"errorMessage": message}, status_code=status)
    else:
        # Cloudsquid documents no body for its 500.
        response = PlainTextResponse("Internal Server Error", status_code=status)
    return response


async def _drop_connection(receive: Receive) -> None:
    """Close the client's connection without sending a byte of response.

    ASGI has no "close" message, and uvicorn answers 500 for an app that returns without responding, so
    this reaches uvicorn's transport through its ``receive`` (a bound method of the request cycle), closes
    it, and waits for the disconnect so that uvicorn knows not to answer. Without a socket (an in-process
    ``httpx.ASGITransport``) it raises the error an httpx client would see for a dropped connection.
    """
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    close = getattr(transport, "close", None)
    if not callable(close):
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
    close()
    async with asyncio.timeout(_DROP_DRAIN_TIMEOUT_S):
        while (await receive())["type"] != "http.disconnect":
            pass


class VendorTrafficMiddleware:
    """Logs every vendor request on arrival, adds latency, applies the per-key rate limit, and injects
    faults drawn from the seeded RNG."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        vendor = _vendor_of(scope["path"]) if scope["type"] == "http" else None
        if vendor is None:
            await self.app(scope, receive, send)
            return
        state = scope["app"].state.sim
        assert isinstance(state, SimState)
        config = state.config
        entry = LogEntry(t=state.clock.time(), vendor=vendor, method=scope["method"], path=scope["path"])
        state.log.append(entry)

        # Both draws happen on every request so that the fault sequence depends only on the request count.
        latency_ms = state.fault_rng.uniform(*config.latency_ms)
        draw = state.fault_rng.random()
        if latency_ms > 0:
            await asyncio.sleep(latency_ms / 1000)
        key = _rate_key(vendor, Headers(scope=scope))
        if not state.admit(vendor, key):
            entry.fault, entry.status = "429", 429
            await _fault_response(vendor, 429, state)(scope, receive, send)
            return
        if vendor in config.vendors_faulty:
            if draw < config.rate_drop:
                entry.fault = "drop"
                await _drop_connection(receive)
                return
            if draw < config.rate_drop + config.rate_5xx:
                status = state.fault_rng.choice((500, 502, 503))
                entry.fault, entry.status = "5xx", status
                await _fault_response(vendor, status, state)(scope, receive, send)
                return

        async def logging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry.status = message["status"]
            await send(message)

        await self.app(scope, receive, logging_send)


async def _requests(request: Request) -> Response:
    state = sim_state(request)
    if request.method == "DELETE":
        state.log.clear()
        return Response(status_code=204)
    vendor = request.query_params.get("vendor")
    entries = [e.to_json() for e in state.log if vendor is None or e.vendor == vendor]
    return JSONResponse({"data": entries})


async def _config(request: Request) -> Response:
    state = sim_state(request)
    if request.method == "PATCH":
        try:
            changes = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse({"error": "body is not valid JSON"}, status_code=400)
        if not isinstance(changes, dict):
            return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
        try:
            state.config = state.config.patched(changes)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if "seed" in changes:
            state.reseed()
        if any(name.endswith(("_rps", "_burst")) for name in changes):
            state.buckets.clear()  # a new limit starts with full buckets
    return JSONResponse(state.config.to_json())


def _stores(app_state: Any) -> dict[str, VendorStore]:
    """Every vendor's store, kept on the app's state under the vendor's name."""
    return {vendor: getattr(app_state, vendor) for vendor in VENDORS}


async def _stats(request: Request) -> Response:
    app_state, now = request.app.state, sim_state(request).now()
    stores = _stores(app_state)
    return JSONResponse({vendor: stores[vendor].status_counts(now) for vendor in VENDORS})


async def _runs(request: Request) -> Response:
    state = sim_state(request)
    vendor = request.query_params.get("vendor")
    if vendor is not None and vendor not in VENDORS:
        return JSONResponse({"error": f"unknown vendor {vendor!r}; known: {', '.join(VENDORS)}"}, 400)
    now = state.now()
    # Monotonic instants become Unix times by the same offset that ``SimState.wall_iso`` uses.
    offset = state.clock.time() - now
    app_state = request.app.state
    stores = _stores(app_state)
    data = [
        {
            "id": run_id,
            "vendor": name,
            "created_t": created + offset,
            "finish_t": None if finish is None else finish + offset,
            "status": status,
        }
        for name in VENDORS
        if vendor is None or vendor == name
        for run_id, status, created, finish in stores[name].summaries(now)
    ]
    return JSONResponse({"data": data})


async def _storage(request: Request) -> Response:
    storage: Storage = request.app.state.storage
    await storage.ensure_started()
    return JSONResponse(storage.to_json())


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    storage: Storage = app.state.storage
    config: SimulatorConfig = app.state.sim.config
    if config.s3_port or config.gcs_port:
        await storage.ensure_started()
    try:
        yield
    finally:
        await storage.stop()


def create_app(config: SimulatorConfig, *, clock: Clock | None = None) -> Starlette:
    """The simulator app; ``clock`` replaces the system clock (tests pass a ``ManualClock``)."""
    control = [
        Route("/requests", _requests, methods=["GET", "DELETE"]),
        Route("/config", _config, methods=["GET", "PATCH"]),
        Route("/stats", _stats, methods=["GET"]),
        Route("/runs", _runs, methods=["GET"]),
        Route("/storage", _storage, methods=["GET"]),
        Route("/google/service-account", oauth.new_service_account, methods=["POST"]),
    ]
    app = Starlette(
        routes=[
            Mount(PREFIXES["nutrient"], routes=nutrient.routes()),
            Mount(PREFIXES["cloudsquid"], routes=cloudsquid.routes()),
            Mount(PREFIXES["uptiq"], routes=uptiq.routes()),
            Mount(PREFIXES["textract"], routes=textract.routes()),
            Route(PREFIXES["textract"], textract.dispatch, methods=["POST"]),
            Mount(PREFIXES["google_docai"], routes=google_docai.routes()),
            Route("/token", oauth.token, methods=["POST"]),
            Route("/s3/{path:path}", storage_proxy, methods=_PROXIED),
            Route("/gcs/{path:path}", storage_proxy, methods=_PROXIED),
            Mount(PREFIXES["azure_di"], routes=azure_di.routes()),
            Mount(PREFIXES["llamaparse"], routes=llamaparse.routes()),
            Mount(llamaparse.STORAGE_PREFIX, routes=llamaparse.storage_routes()),
            Mount("/_sim", routes=control),
        ],
        middleware=[Middleware(VendorTrafficMiddleware)],
        lifespan=_lifespan,
    )
    app.state.sim = SimState(config=config, clock=clock or SYSTEM)
    app.state.nutrient = nutrient.NutrientStore()
    app.state.cloudsquid = cloudsquid.CloudsquidStore()
    app.state.uptiq = uptiq.UptiqStore()
    app.state.textract = textract.TextractStore()
    app.state.google_docai = google_docai.DocaiStore()
    app.state.oauth = oauth.OAuthStore()
    if config.google_sa_key_file:
        app.state.oauth.trust_key_file(config.google_sa_key_file)
    app.state.storage = Storage(
        s3_port=config.s3_port,
        gcs_port=config.gcs_port,
        access_key=config.textract_access_key_id,
        secret_key=config.textract_secret_access_key,
        buckets=tuple(b.strip() for b in config.storage_buckets.split(",") if b.strip()),
    )
    app.state.azure_di = azure_di.AzureDiStore()
    app.state.llamaparse = llamaparse.LlamaParseStore()
    return app
