"""The conformance suite for hookbridge's three own vendors, each against the built-in simulator."""

from __future__ import annotations

import pytest

from service.vendors.cloudsquid import CloudsquidAdapter
from service.vendors.nutrient import NutrientAdapter
from service.vendors.uptiq import UptiqAdapter
from tests.conformance.suite import VendorConformance


class TestNutrient(VendorConformance):
    vendor = "nutrient"
    base_path = "/nutrient"
    submit_idempotent = True


class TestCloudsquid(VendorConformance):
    vendor = "cloudsquid"
    base_path = "/cloudsquid/api"


class TestUptiq(VendorConformance):
    vendor = "uptiq"
    base_path = "/uptiq"

    def run_body(self, filename: str) -> dict[str, object]:
        return {**super().run_body(filename), "options": {"documentType": "Invoice"}}


@pytest.mark.parametrize(
    ("suite", "adapter"),
    [(TestNutrient, NutrientAdapter), (TestCloudsquid, CloudsquidAdapter), (TestUptiq, UptiqAdapter)],
)
def test_the_suites_idempotency_is_the_adapters(suite: type[VendorConformance], adapter: type) -> None:
    assert suite.submit_idempotent is adapter.submit_idempotent
