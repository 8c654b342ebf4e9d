"""The chart turns traces on as docs/operations.md says: the OTEL_* variables given in ``extraEnv`` reach
the API and every worker Deployment (one, or two with ``worker.split``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.chart.test_helm_chart import CHART, render

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_values() -> dict[str, Any]:
    """The values block of the "Traces" section, as a reader copies it."""
    section = OPERATIONS.read_text().split("\n## Traces\n", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    values = yaml.safe_load(block.group(1))
    assert isinstance(values, dict)
    return values


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.mark.parametrize("split", [False, True])
def test_documented_otel_values_reach_every_process(chart: helm.Chart, split: bool) -> None:
    values = documented_values()
    values["worker"]["split"] = split
    deployments = render(chart, values).of_kind("Deployment")
    assert len(deployments) == (3 if split else 2)
    for deployment in deployments:
        env = {
            e["name"]: e.get("value")
            for c in deployment["spec"]["template"]["spec"]["containers"]
            for e in c.get("env", [])
        }
        name = deployment["metadata"]["name"]
        assert env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").endswith(":4318"), name
        if not name.endswith("-api"):
            assert env.get("OTEL_TRACES_SAMPLER") == "parentbased_traceidratio", name


COLLECTOR = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}


@pytest.mark.parametrize("peers", [[], [COLLECTOR]])
def test_the_network_policy_lets_both_roles_reach_the_collector(chart: helm.Chart, peers: list[Any]) -> None:
    values = {"networkPolicy": {"enabled": True, "egress": {"otlp": {"to": peers}}}}
    policies = render(chart, values).of_kind("NetworkPolicy")
    roles = [p for p in policies if p["metadata"]["name"].endswith(("-api", "-worker"))]
    assert len(roles) == 2
    for policy in roles:
        rules = [
            r for r in policy["spec"]["egress"] if {"port": 4318, "protocol": "TCP"} in r.get("ports", [])
        ]
        if peers:
            assert [r["to"] for r in rules] == [peers], policy["metadata"]["name"]
        else:
            assert rules == [], "no collector named, no rule"
