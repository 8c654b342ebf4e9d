"""The conformance suite for hookbridge's own vendors, each against the built-in simulator."""

from __future__ import annotations

import pytest

from service.testing import VendorConformance
from service.vendors.azure_di import AzureDiAdapter
from service.vendors.cloudsquid import CloudsquidAdapter
from service.vendors.nutrient import NutrientAdapter
from service.vendors.uptiq import UptiqAdapter


class TestNutrient(VendorConformance):
    vendor = "nutrient"
    base_path = "/nutrient"
    submit_idempotent = True
    delete_marker = "/extraction/runs/"


class TestCloudsquid(VendorConformance):
    vendor = "cloudsquid"
    base_path = "/cloudsquid/api"


class TestUptiq(VendorConformance):
    vendor = "uptiq"
    base_path = "/uptiq"
    status_path = ("extraction", "status")

    def run_body(self, filename: str) -> dict[str, object]:
        return {**super().run_body(filename), "options": {"documentType": "Invoice"}}


class TestAzureDi(VendorConformance):
    vendor = "azure_di"
    base_path = ""  # the resource endpoint is the simulator's root (its SDK needs a host-only endpoint)
    # Retry-After on a poll's 200: "NOT FOUND; the adapter should honour it if present" (next-vendors §1.4).
    poll_retry_after = True
    delete_marker = "/analyzeResults/"

    def env(self) -> dict[str, str]:
        return {"HOOKBRIDGE_AZURE_DI_API_KEY": "sim-azure-di-key"}

    def run_body(self, filename: str) -> dict[str, object]:
        return {
            **super().run_body(filename),
            "operation": "analyze",
            "options": {"model_id": "prebuilt-read"},
        }


@pytest.mark.parametrize(
    ("suite", "adapter"),
    [
        (TestNutrient, NutrientAdapter),
        (TestCloudsquid, CloudsquidAdapter),
        (TestUptiq, UptiqAdapter),
        (TestAzureDi, AzureDiAdapter),
    ],
)
def test_the_suites_idempotency_is_the_adapters(suite: type[VendorConformance], adapter: type) -> None:
    assert suite.submit_idempotent is adapter.submit_idempotent
