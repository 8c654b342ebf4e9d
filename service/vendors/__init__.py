"""Vendor adapters, one module per vendor behind the ``base.VendorAdapter`` protocol, registered by a
``base.VendorSpec`` under the entry point group ``hookbridge.vendors`` (``registry``)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING

import httpx

from service.vendors import registry, text
from service.vendors.base import Fetcher, VendorAdapter
from service.vendors.http import ANSWER_ENVELOPE_BYTES, Budget, Observer, make_client

if TYPE_CHECKING:
    from service.config.settings import Settings


def build_adapters(
    settings: Settings,
    budgets: Mapping[str, Budget],
    observe: Observer | None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    fetcher: Fetcher | None = None,
    kinds: Mapping[str, Mapping[str, Budget]] | None = None,
) -> tuple[list[httpx.AsyncClient], dict[str, VendorAdapter]]:
    """One client and adapter per registered vendor; the clients are the caller's to close. ``fetcher``
    fetches URLs outside a vendor's API (``service.delivery.fetch``: the worker builds it). ``kinds``:
    per vendor, the budget of each request kind its spec groups (``VendorSpec.budgets``)."""
    clients: list[httpx.AsyncClient] = []
    adapters: dict[str, VendorAdapter] = {}
    for name, vendor in settings.vendors.items():
        spec = registry.spec_of(vendor)
        if spec is None:
            continue
        headers = spec.auth_headers(vendor.api_key)
        # Whatever a vendor answers is scrubbed of every key we send, to any vendor, before it is kept
        # (an httpx.Auth registers what it learns, a token, itself).
        text.register([vendor.api_key, *headers.values()])
        try:
            auth = spec.auth(vendor.api_key, vendor.extra) if spec.auth is not None else None
        except Exception as exc:  # someone else's code: one clear line, not a traceback
            raise registry.PluginError(
                f"vendor plugin {name!r}: cannot build its auth: {type(exc).__name__}: {exc}"
            ) from None
        client = make_client(
            vendor.base_url,
            headers,
            timeout_s=settings.vendor_timeout_s,
            vendor=name,
            budget=budgets.get(name),
            observe=observe,
            transport=transport,
            max_answer_bytes=vendor.max_answer_bytes or settings.max_document_bytes + ANSWER_ENVELOPE_BYTES,
            auth=auth,
            kinds=(kinds or {}).get(name),
            throttled=spec.throttled,
        )
        clients.append(client)
        try:
            limits: dict[str, object] = {
                "max_asset_bytes": settings.max_document_bytes,
                # The most of one result an adapter writes to a ResultFile (VendorDefaults.max_answer_bytes).
                "max_answer_bytes": vendor.max_answer_bytes
                or settings.max_document_bytes + ANSWER_ENVELOPE_BYTES,
            }
            if fetcher is not None:
                limits["fetcher"] = fetcher
            adapter = spec.build(client, {**vendor.extra, **limits})
        except Exception as exc:  # someone else's code: one clear line, not a traceback
            raise registry.PluginError(
                f"vendor plugin {name!r}: cannot build its adapter: {type(exc).__name__}: {exc}"
            ) from None
        old = _without_call(adapter)
        if old:
            raise registry.PluginError(
                f"vendor plugin {name!r}: its adapter's {old} takes no `call`: it was written for the "
                "first vendor protocol; each method takes the step's call (service/vendors/base.py)"
            )
        adapters[name] = adapter
    return clients, adapters


def _without_call(adapter: VendorAdapter) -> str | None:
    """The first of the adapter's methods that takes no ``call`` (Protocol v2), if any: the worker passes
    it to every one, so an adapter of the first protocol is refused at start, not at its first run."""
    for method in ("submit", "poll", "fetch_result", "cancel", "delete"):
        bound = getattr(adapter, method, None)
        if bound is None and method == "delete":
            continue
        try:
            params = inspect.signature(bound).parameters  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        takes = "call" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        if not takes:
            return f"{method}()"
    return None
