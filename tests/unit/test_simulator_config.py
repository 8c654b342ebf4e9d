"""SimulatorConfig: environment parsing, validation, PATCH coercion."""

from __future__ import annotations

import dataclasses

import pytest

import service.simulator.config as module
from service.simulator import SimulatorConfig
from service.simulator.config import env_var


def test_defaults() -> None:
    config = SimulatorConfig.from_env({})
    assert config == SimulatorConfig()
    assert config.duration_s == (1.0, 3.0)
    assert config.vendors_faulty == frozenset({"nutrient", "cloudsquid", "uptiq", "azure_di", "llamaparse"})
    assert config.uptiq_early_404_s == 1.0
    assert (config.nutrient_rps, config.cloudsquid_rps, config.uptiq_rps) == (0, 0, 0)  # no limit
    assert config.nutrient_credits is None
    assert config.nutrient_max_processing_s == 900
    assert (config.nutrient_api_key, config.cloudsquid_api_key, config.uptiq_api_key) == (
        "sim-nutrient-key",
        "sim-cloudsquid-key",
        "sim-uptiq-key",
    )


def test_every_variable_is_read() -> None:
    config = SimulatorConfig.from_env(
        {
            "HOOKBRIDGE_SIM_SEED": "42",
            "HOOKBRIDGE_SIM_LATENCY_MS": "5, 20",
            "HOOKBRIDGE_SIM_DURATION_S": "0.1,0.2",
            "HOOKBRIDGE_SIM_RATE_5XX": "0.2",
            "HOOKBRIDGE_SIM_RATE_DROP": "0.05",
            "HOOKBRIDGE_SIM_VENDORS_FAULTY": "nutrient, Uptiq",
            "HOOKBRIDGE_SIM_CLOUDSQUID_LEGACY": "true",
            "HOOKBRIDGE_SIM_UPTIQ_EARLY_404_S": "2.5",
            "HOOKBRIDGE_SIM_UPTIQ_STUCK": "1",
            "HOOKBRIDGE_SIM_NUTRIENT_CREDITS": "100",
            "HOOKBRIDGE_SIM_NUTRIENT_MAX_PROCESSING_S": "30",
            "HOOKBRIDGE_SIM_NUTRIENT_RETENTION_S": "60",
            "HOOKBRIDGE_SIM_NUTRIENT_RATE_ENQUEUE_FAIL": "0.5",
            "HOOKBRIDGE_SIM_NUTRIENT_API_KEY": "n",
            "HOOKBRIDGE_SIM_CLOUDSQUID_API_KEY": "c",
            "HOOKBRIDGE_SIM_UPTIQ_API_KEY": "u",
            "HOOKBRIDGE_SIM_NUTRIENT_RPS": "2",
            "HOOKBRIDGE_SIM_NUTRIENT_BURST": "4",
            "HOOKBRIDGE_SIM_CLOUDSQUID_RPS": "3.5",
            "HOOKBRIDGE_SIM_CLOUDSQUID_BURST": "1",
            "HOOKBRIDGE_SIM_UPTIQ_RPS": "0.5",
            "HOOKBRIDGE_SIM_UPTIQ_BURST": "2",
        }
    )
    assert config == SimulatorConfig(
        seed=42,
        latency_ms=(5.0, 20.0),
        duration_s=(0.1, 0.2),
        rate_5xx=0.2,
        rate_drop=0.05,
        vendors_faulty=frozenset({"nutrient", "uptiq"}),
        cloudsquid_legacy_shape=True,
        uptiq_early_404_s=2.5,
        uptiq_stuck=True,
        nutrient_credits=100.0,
        nutrient_max_processing_s=30.0,
        nutrient_retention_s=60.0,
        nutrient_rate_enqueue_fail=0.5,
        nutrient_api_key="n",
        cloudsquid_api_key="c",
        uptiq_api_key="u",
        nutrient_rps=2.0,
        nutrient_burst=4,
        cloudsquid_rps=3.5,
        cloudsquid_burst=1,
        uptiq_rps=0.5,
        uptiq_burst=2,
    )


def test_every_field_has_a_documented_variable() -> None:
    assert module.__doc__ is not None
    for field in dataclasses.fields(SimulatorConfig):
        assert f"``{env_var(field.name)}`` -> ``{field.name}``" in module.__doc__


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("HOOKBRIDGE_SIM_SEED", "x"),
        ("HOOKBRIDGE_SIM_LATENCY_MS", "1,2,3"),
        ("HOOKBRIDGE_SIM_DURATION_S", "3,1"),
        ("HOOKBRIDGE_SIM_DURATION_S", "-1,1"),
        ("HOOKBRIDGE_SIM_RATE_5XX", "1.5"),
        ("HOOKBRIDGE_SIM_RATE_5XX", "abc"),
        ("HOOKBRIDGE_SIM_RATE_DROP", "nan"),
        ("HOOKBRIDGE_SIM_NUTRIENT_RPS", "-1"),
        ("HOOKBRIDGE_SIM_NUTRIENT_RPS", "inf"),
        ("HOOKBRIDGE_SIM_UPTIQ_BURST", "0"),
        ("HOOKBRIDGE_SIM_CLOUDSQUID_BURST", "1.5"),
        ("HOOKBRIDGE_SIM_VENDORS_FAULTY", "nutrient,textract"),
        ("HOOKBRIDGE_SIM_CLOUDSQUID_LEGACY", "maybe"),
        ("HOOKBRIDGE_SIM_UPTIQ_EARLY_404_S", "-1"),
        ("HOOKBRIDGE_SIM_NUTRIENT_CREDITS", "-5"),
        ("HOOKBRIDGE_SIM_NUTRIENT_MAX_PROCESSING_S", "inf"),
        ("HOOKBRIDGE_SIM_NUTRIENT_API_KEY", ""),
    ],
)
def test_bad_value_names_the_variable(var: str, value: str) -> None:
    with pytest.raises(ValueError, match=var):
        SimulatorConfig.from_env({var: value})


def test_fault_rates_must_fit_one_draw() -> None:
    with pytest.raises(ValueError, match="must not exceed 1"):
        SimulatorConfig.from_env({"HOOKBRIDGE_SIM_RATE_DROP": "0.6", "HOOKBRIDGE_SIM_RATE_5XX": "0.6"})


def test_patched_coerces_json_values() -> None:
    config = SimulatorConfig().patched(
        {
            "duration_s": [0.1, 0.2],
            "latency_ms": "1,2",
            "vendors_faulty": ["uptiq"],
            "nutrient_rps": 5,
            "uptiq_burst": 3,
            "nutrient_credits": 5,
            "cloudsquid_legacy_shape": True,
            "seed": 7,
        }
    )
    assert config.duration_s == (0.1, 0.2)
    assert config.latency_ms == (1.0, 2.0)
    assert config.vendors_faulty == frozenset({"uptiq"})
    assert (config.nutrient_rps, config.uptiq_burst) == (5.0, 3)
    assert config.nutrient_credits == 5.0
    assert config.cloudsquid_legacy_shape is True
    assert config.seed == 7


@pytest.mark.parametrize(
    "changes",
    [
        {"no_such_knob": 1},
        {"rate_5xx": 2},
        {"rate_429": 0.5},  # gone: 429s come from the per-key buckets
        {"nutrient_burst": 2.5},
        {"seed": "x"},
        {"seed": 1.5},
        {"uptiq_stuck": 1},
        {"duration_s": [1]},
        {"vendors_faulty": ["aws"]},
        {"nutrient_api_key": 5},
    ],
)
def test_patched_rejects_bad_values(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SimulatorConfig().patched(changes)


def test_to_json_round_trips_through_patched() -> None:
    config = SimulatorConfig(duration_s=(0.5, 1.0), vendors_faulty=frozenset({"nutrient"}))
    assert SimulatorConfig().patched(config.to_json()) == config
