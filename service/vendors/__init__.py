"""Vendor adapters, one module per vendor behind the ``base.VendorAdapter`` protocol, registered by a
``base.VendorSpec`` under the entry point group ``hookbridge.vendors`` (``registry``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import httpx

from service.vendors import registry, text
from service.vendors.base import Fetcher, VendorAdapter
from service.vendors.http import ANSWER_ENVELOPE_BYTES, Budget, Observer, make_client

if TYPE_CHECKING:
    from service.settings import Settings


def build_adapters(
    settings: Settings,
    budgets: Mapping[str, Budget],
    observe: Observer | None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    fetcher: Fetcher | None = None,
) -> tuple[list[httpx.AsyncClient], dict[str, VendorAdapter]]:
    """One client and adapter per registered vendor; the clients are the caller's to close. ``fetcher``
    fetches URLs outside a vendor's API (``service.delivery.fetch``: the worker builds it)."""
    clients: list[httpx.AsyncClient] = []
    adapters: dict[str, VendorAdapter] = {}
    for name, vendor in settings.vendors.items():
        spec = vendor.spec
        if spec is None:
            continue
        auth = spec.auth_headers(vendor.api_key)
        # Whatever a vendor answers is scrubbed of every key we send, to any vendor, before it is kept.
        text.register([vendor.api_key, *auth.values()])
        client = make_client(
            vendor.base_url,
            auth,
            timeout_s=settings.vendor_timeout_s,
            vendor=name,
            budget=budgets.get(name),
            observe=observe,
            transport=transport,
            max_answer_bytes=settings.max_document_bytes + ANSWER_ENVELOPE_BYTES,
        )
        clients.append(client)
        try:
            limits: dict[str, object] = {"max_asset_bytes": settings.max_document_bytes}
            if fetcher is not None:
                limits["fetcher"] = fetcher
            adapters[name] = spec.build(client, {**vendor.extra, **limits})
        except Exception as exc:  # someone else's code: one clear line, not a traceback
            raise registry.PluginError(
                f"vendor plugin {name!r}: cannot build its adapter: {type(exc).__name__}: {exc}"
            ) from None
    return clients, adapters
