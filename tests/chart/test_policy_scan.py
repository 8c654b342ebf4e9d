"""The rendered manifests, scanned by checkov (a policy scanner from PyPI), for every values file.

checkov brings ~70 packages and pins some below the project's own (packaging, python-dateutil), so it
lives in a venv of its own: `make scan-tools` makes `.scan/` (CI runs it before the tests). Without it
this test skips with one line. Every check the chart does not pass is accepted below with its reason,
and docs/deploy.md lists the same ids with the same reasons; any other failure fails the test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import helm_python as helm
import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHART = ROOT / "helm" / "hookbridge"
SCENARIOS = sorted(p.stem for p in (HERE / "values").glob("*.yaml"))

# check id -> (kinds it is accepted for, the reason; docs/deploy.md says the same).
ACCEPTED: dict[str, tuple[set[str], str]] = {
    "CKV_K8S_15": (
        {"Deployment", "StatefulSet", "Pod"},
        "pull policy IfNotPresent: images are pinned by digest",
    ),
    "CKV_K8S_35": (
        {"Deployment"},
        "settings are environment variables (12-factor); secrets come by secretKeyRef",
    ),
    "CKV_K8S_43": ({"Deployment", "StatefulSet", "Pod"}, "the digest is the operator's (image.digest)"),
    "CKV_K8S_8": ({"Pod"}, "the helm test pod runs once and exits: no liveness probe"),
    "CKV_K8S_9": ({"Pod"}, "the helm test pod runs once and exits: no readiness probe"),
    "CKV2_K8S_6": ({"Pod"}, "the helm test pod is short-lived; NetworkPolicies are opt-in"),
}


def checkov() -> str | None:
    local = ROOT / ".scan" / "bin" / "checkov"
    return str(local) if local.exists() else shutil.which("checkov")


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    binary = checkov()
    if binary is None:
        pytest.skip("checkov not installed (make scan-tools)")
    out = tmp_path_factory.mktemp("rendered")
    with helm.Chart.load(CHART) as chart:
        for scenario in SCENARIOS:
            values = yaml.safe_load((HERE / "values" / f"{scenario}.yaml").read_text()) or {}
            manifests = chart.render(values, name="hookbridge", namespace="apps", is_install=True)
            target = out / scenario
            target.mkdir()
            for path, text in manifests.items():
                if path.endswith(".yaml") and text.strip():
                    (target / path.replace("/", "_")).write_text(text)
    done = subprocess.run(
        [binary, "-d", str(out), "--framework", "kubernetes", "--quiet", "--compact", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert all(r["summary"]["parsing_errors"] == 0 for r in reports)
    assert sum(r["summary"]["passed"] for r in reports) > 500, "the scan checked next to nothing"
    return [
        {
            "id": f["check_id"],
            "kind": f["resource"].split(".")[0],
            "resource": f["resource"],
            "file": f["file_path"],
        }
        for r in reports
        for f in r["results"]["failed_checks"]
    ]


@pytest.mark.timeout(600)
def test_the_chart_passes_the_policy_scan_but_for_accepted_checks(findings: list[dict[str, str]]) -> None:
    unexpected = [f for f in findings if f["kind"] not in ACCEPTED.get(f["id"], (set(), ""))[0]]
    assert unexpected == [], "\n".join(f"{f['id']} {f['resource']} ({f['file']})" for f in unexpected)


def test_every_accepted_check_is_explained_in_the_docs() -> None:
    docs = (ROOT / "docs" / "deploy.md").read_text()
    for check in ACCEPTED:
        assert f"`{check}`" in docs, check
