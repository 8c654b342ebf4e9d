"""`hookbridge dev`, `demo` and the tests' stack point every installed vendor the simulator plays at it,
from one table (service/simulator/defaults.py): nothing to change there when a vendor is added."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import settings
from service.dev.stack import dev_environment
from service.simulator import SimulatorConfig, defaults
from service.vendors import registry
from service.vendors.registry import load_settings

ROOT = "http://127.0.0.1:8090"


def test_every_installed_simulated_vendor_is_pointed_at_the_simulator(tmp_path: Path) -> None:
    env = dev_environment({}, ROOT, "redis://127.0.0.1:6379/0", tmp_path)
    installed = registry.vendors()
    simulated = [name for name in installed if name in defaults.SIMULATED]
    assert "azure_di" in simulated
    assert {"textract", "google_docai"} <= set(simulated)
    for name in simulated:
        assert env[f"HOOKBRIDGE_{name.upper()}_BASE_URL"].startswith(ROOT), name
        if settings.is_secret(f"HOOKBRIDGE_{name.upper()}_API_KEY") and name not in (
            "textract",
            "google_docai",
        ):
            assert env[f"HOOKBRIDGE_{name.upper()}_API_KEY"], name  # the cloud ones sign with credentials
    # Textract's keys for AWS's chain (exported to the process), Document AI's key file (made here).
    assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
    assert Path(env["HOOKBRIDGE_GOOGLE_DOCAI_CREDENTIALS_FILE"]).is_file()
    # Azure's endpoint is the simulator's root (its SDK wants a host-only endpoint).
    assert env["HOOKBRIDGE_AZURE_DI_BASE_URL"] == ROOT
    # What the environment gives loads, and leaves no simulated vendor unconfigured.
    loaded = load_settings(env)
    assert all(not loaded.vendor(name).missing for name in simulated)


def test_a_variable_already_set_wins(tmp_path: Path) -> None:
    env = dev_environment(
        {"HOOKBRIDGE_AZURE_DI_BASE_URL": "https://mine.cognitiveservices.azure.com"},
        ROOT,
        "redis://r",
        tmp_path,
    )
    assert env["HOOKBRIDGE_AZURE_DI_BASE_URL"] == "https://mine.cognitiveservices.azure.com"


def test_only_installed_vendors_get_settings(tmp_path: Path) -> None:
    reach = defaults.Reach(SimulatorConfig(), ROOT, tmp_path)
    env = defaults.environment(["azure_di"], reach)
    assert set(env) == {"HOOKBRIDGE_AZURE_DI_BASE_URL", "HOOKBRIDGE_AZURE_DI_API_KEY"}
    assert defaults.environment(["acme"], reach) == {}


def test_the_demo_run_of_each_vendor_passes_its_options_model() -> None:
    for name, spec in registry.vendors().items():
        run = defaults.demo_run(name)
        spec.options.model_validate(run.get("options", {}))
        assert run.get("operation", spec.operations[0]) in spec.operations


def test_process_variables_only_for_vendors_pointed_at_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    vendor = defaults.SimulatedVendor(
        "acme", lambda r: {"HOOKBRIDGE_ACME_BASE_URL": r.root, "ACME_KEY": "k"}, process=("ACME_KEY",)
    )
    monkeypatch.setattr(defaults, "SIMULATED", {**defaults.SIMULATED, "acme": vendor})
    env = {"HOOKBRIDGE_ACME_BASE_URL": ROOT, "ACME_KEY": "k"}
    assert defaults.process_variables(["acme", "azure_di"], {}, env) == {"ACME_KEY": "k"}
    # The caller pointed acme elsewhere: its own keys stay.
    elsewhere = {"HOOKBRIDGE_ACME_BASE_URL": "https://acme.example"}
    assert defaults.process_variables(["acme"], elsewhere, env) == {}
