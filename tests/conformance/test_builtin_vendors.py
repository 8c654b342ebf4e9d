"""The conformance suite for hookbridge's three own vendors, each against the built-in simulator."""

from __future__ import annotations

from tests.conformance.suite import VendorConformance


class TestNutrient(VendorConformance):
    vendor = "nutrient"
    base_path = "/nutrient"


class TestCloudsquid(VendorConformance):
    vendor = "cloudsquid"
    base_path = "/cloudsquid/api"


class TestUptiq(VendorConformance):
    vendor = "uptiq"
    base_path = "/uptiq"

    def run_body(self, filename: str) -> dict[str, object]:
        return {**super().run_body(filename), "options": {"documentType": "Invoice"}}
