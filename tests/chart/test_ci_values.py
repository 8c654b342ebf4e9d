"""The chart's ci/ values (what chart-testing, ``ct lint`` and ``ct install``, reads): each file lints
strictly (which checks it, merged over the defaults, against values.schema.json) and renders objects
that validate against their schemas, exactly as the scenarios under tests/chart/values/ do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.chart.test_helm_chart import CHART, CRD_SCHEMAS, KUBE_VERSIONS, NAMESPACE, render

CI = CHART / "ci"
CI_FILES = sorted(CI.glob("*-values.yaml"))


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def test_ct_finds_the_ci_values() -> None:
    # ct picks up ci/*-values.yaml only: a file named otherwise would be skipped silently.
    assert len(CI_FILES) >= 3
    assert sorted(CI.iterdir()) == CI_FILES


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.stem)
def test_ci_values_match_the_schema_lint_and_render_valid_objects(chart: helm.Chart, path: Path) -> None:
    values = yaml.safe_load(path.read_text())
    # helm lint checks the values merged over the defaults against values.schema.json.
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    for kube_version in KUBE_VERSIONS:
        release = render(chart, values, kube_version=kube_version)
        assert release.of_kind("Deployment"), "no workload rendered"
        for obj in release.objects:
            crd_schema = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
            if crd_schema is not None:
                jsonschema.Draft202012Validator(json.loads(crd_schema.read_text())).validate(obj)
            else:
                kubernetes_validate.validate(obj, kube_version, strict=True)
