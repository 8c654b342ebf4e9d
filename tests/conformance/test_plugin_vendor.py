"""A fourth vendor from a separate package (tests/plugins/parrot), found through its entry point alone,
passes the same conformance suite against its own simulator; and it is nowhere once uninstalled."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from service.config import settings as settings_mod
from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.testing import VendorConformance
from service.vendors import registry
from service.vendors.registry import load_settings


class TestParrotPlugin(VendorConformance):
    vendor = "parrot"
    status_path = ("state",)
    poll_retry_after = True  # the plugin reads Retry-After on a poll (Protocol v2)

    @pytest.fixture(autouse=True)
    def _installed(self, parrot_plugin: Path) -> None:
        """Every test of this class runs with the plugin installed."""

    @pytest.fixture
    async def vendor_root(self, servers: Servers, parrot_plugin: Path) -> str:
        simulator = importlib.import_module("hookbridge_parrot.simulator")
        return await servers.start(simulator.create_app(key="parrot-test-key", region="us"), free_port())

    def env(self) -> dict[str, str]:
        # REGION is the plugin's own setting: the simulator refuses jobs sent without X-Region: us.
        return {"HOOKBRIDGE_PARROT_API_KEY": "parrot-test-key", "HOOKBRIDGE_PARROT_REGION": "us"}

    def test_the_plugin_declares_its_settings(self) -> None:
        names = dict(settings_mod.describe(registry.vendors()))
        assert names["HOOKBRIDGE_PARROT_REGION"] == "'eu'"
        assert "HOOKBRIDGE_PARROT_BASE_URL" in names
        with pytest.raises(settings_mod.SettingsError, match="HOOKBRIDGE_PARROT_REGION: must be eu or us"):
            load_settings({"HOOKBRIDGE_PARROT_REGION": "mars"})


def test_without_the_plugin_there_is_no_parrot() -> None:
    settings = load_settings({})
    assert "parrot" not in settings.vendors
    assert {"azure_di", "cloudsquid", "google_docai", "nutrient", "textract", "uptiq"} <= set(
        settings.vendors
    )
    with pytest.raises(settings_mod.SettingsError, match="HOOKBRIDGE_PARROT_REGION: unknown setting"):
        load_settings({"HOOKBRIDGE_PARROT_REGION": "eu"})
