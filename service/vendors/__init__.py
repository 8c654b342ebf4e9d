"""Vendor adapters, one module per vendor behind the ``base.VendorAdapter`` protocol."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from service.settings import Settings
from service.vendors.base import VendorAdapter
from service.vendors.cloudsquid import CloudsquidAdapter
from service.vendors.http import Budget, Observer, make_client
from service.vendors.nutrient import NutrientAdapter
from service.vendors.uptiq import UptiqAdapter


def build_adapters(
    settings: Settings,
    budgets: Mapping[str, Budget],
    observe: Observer | None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[list[httpx.AsyncClient], dict[str, VendorAdapter]]:
    """One client and adapter per vendor; the clients are the caller's to close."""
    clients: list[httpx.AsyncClient] = []
    adapters: dict[str, VendorAdapter] = {}

    def client(vendor: str, headers: dict[str, str]) -> httpx.AsyncClient:
        c = make_client(
            settings.vendor(vendor).base_url,
            headers,
            timeout_s=settings.vendor_timeout_s,
            vendor=vendor,
            budget=budgets.get(vendor),
            observe=observe,
            transport=transport,
        )
        clients.append(c)
        return c

    nutrient = settings.vendor("nutrient")
    adapters["nutrient"] = NutrientAdapter(
        client("nutrient", {"Authorization": f"Bearer {nutrient.api_key}"}),
        max_asset_bytes=settings.max_document_bytes,
    )
    cloudsquid = settings.vendor("cloudsquid")
    adapters["cloudsquid"] = CloudsquidAdapter(
        client("cloudsquid", {"X-API-Key": cloudsquid.api_key}),
        project=cloudsquid.project,
        table_id=cloudsquid.table_id,
    )
    uptiq = settings.vendor("uptiq")
    adapters["uptiq"] = UptiqAdapter(client("uptiq", {"X-Api-Key": uptiq.api_key}))
    return clients, adapters
