"""Render helm/hookbridge offline and check what comes out.

Rendering uses helm-python-sdk, which links Helm's Go SDK (v4) as a shared library: no helm
binary, no cluster. Core objects are validated with kubernetes-validate's bundled schemas (strict:
unknown fields fail); the KEDA ScaledObject and the ServiceMonitor against the hand-written
schemas in crd-schemas/.
"""

from __future__ import annotations

import base64
import http.server
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python import _native as helm_native

from service.vendors import registry
from service.vendors.registry import load_settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "hookbridge"
HERE = Path(__file__).resolve().parent
VALUES = HERE / "values"
CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): HERE / "crd-schemas" / "scaledobject-keda-v1alpha1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): HERE
    / "crd-schemas"
    / "servicemonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): HERE
    / "crd-schemas"
    / "prometheusrule-monitoring-v1.json",
}
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas bundled.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())
RELEASE, NAMESPACE = "hb", "apps"
PREFIX = f"{RELEASE}-hookbridge"
SCENARIOS = sorted(p.stem for p in VALUES.glob("*.yaml"))
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "helm.sh/chart",
)
# The vendors' keys, HOOKBRIDGE_<NAME>_API_KEY, for every installed vendor (vendors.<name> in the values).
VENDOR_KEYS = {f"HOOKBRIDGE_{name.upper()}_API_KEY": name for name in registry.vendors()}
SECRET_ENV = {
    "HOOKBRIDGE_API_KEYS",
    *VENDOR_KEYS,
    "HOOKBRIDGE_REDIS_URL",
    "HOOKBRIDGE_REDIS_PASSWORD",
    "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD",
    "HOOKBRIDGE_SECRET_KEYS",
}


@dataclass(frozen=True)
class Release:
    values: dict[str, Any]
    objects: list[dict[str, Any]]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
        return found[0]

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] in kinds]

    def has(self, kind: str, name: str) -> bool:
        return any(o["kind"] == kind and o["metadata"]["name"] == name for o in self.objects)

    @property
    def config(self) -> dict[str, str]:
        data: dict[str, str] = self.get("ConfigMap", f"{PREFIX}-config")["data"]
        return data

    @property
    def workers(self) -> list[str]:
        """The worker Deployments: one, or one per role with worker.split."""
        if self.values["worker"]["split"]:
            return [f"{PREFIX}-worker-runs", f"{PREFIX}-worker-deliveries"]
        return [f"{PREFIX}-worker"]

    def container(self, workload: str) -> dict[str, Any]:
        kind = "StatefulSet" if workload.endswith("-redis") else "Deployment"
        containers: list[dict[str, Any]] = self.get(kind, workload)["spec"]["template"]["spec"]["containers"]
        assert len(containers) == 1, workload
        return containers[0]


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render_manifests(
    chart: helm.Chart,
    values: dict[str, Any] | None = None,
    *,
    name: str = RELEASE,
    namespace: str = NAMESPACE,
    kube_version: str | None = None,
) -> dict[str, str]:
    """helm template, offline. helm-python-sdk's render() takes no kube version; its native call does
    (Helm's --kube-version), which .Capabilities.KubeVersion then reports."""
    if kube_version is None:
        return chart.render(values or {}, name=name, namespace=namespace, is_install=True)
    opts = {"name": name, "namespace": namespace, "is_install": True, "kube_version": kube_version}
    rendered = helm_native.call_string(
        "helm_render", chart._raw(), json.dumps(values or {}), json.dumps(opts)
    )
    manifests: dict[str, str] = json.loads(rendered)
    return manifests


def render(
    chart: helm.Chart, values: dict[str, Any] | None = None, *, kube_version: str | None = None
) -> Release:
    manifests = render_manifests(chart, values, kube_version=kube_version)
    objects = [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    return Release(values=chart.merge_values(values or {}), objects=objects)


def load_values(scenario: str) -> dict[str, Any]:
    loaded = yaml.safe_load((VALUES / f"{scenario}.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module", params=SCENARIOS)
def release(request: pytest.FixtureRequest, chart: helm.Chart) -> Release:
    return render(chart, load_values(request.param))


def workloads(release: Release) -> list[dict[str, Any]]:
    return release.of_kind("Deployment", "StatefulSet")


def hookbridge_deployments(release: Release) -> list[dict[str, Any]]:
    return [d for d in release.of_kind("Deployment") if d["metadata"]["name"].startswith(PREFIX)]


def pod_specs(release: Release) -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every pod the release runs: workloads and the test pod."""
    specs = [(w["metadata"]["name"], w["spec"]["template"]["spec"]) for w in workloads(release)]
    specs += [(p["metadata"]["name"], p["spec"]) for p in release.of_kind("Pod")]
    return specs


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# --- schema validity ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_object_validates_against_its_schema(
    chart: helm.Chart, scenario: str, kube_version: str
) -> None:
    release = render(chart, load_values(scenario), kube_version=kube_version)
    for obj in release.objects:
        crd_schema = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        if crd_schema is not None:
            jsonschema.Draft202012Validator(json.loads(crd_schema.read_text())).validate(obj)
        else:
            # Raises SchemaNotFoundError for a kind it does not know: no object goes unchecked.
            kubernetes_validate.validate(obj, kube_version, strict=True)


def test_validators_reject_a_broken_object(chart: helm.Chart) -> None:
    """Guards the test above against a validator that passes everything."""
    objects = render(chart, load_values("keda-servicemonitor")).objects
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    with pytest.raises(jsonschema.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[0], strict=True)
    for obj in objects:
        schema_path = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        if schema_path is not None:
            del obj["spec"][next(iter(obj["spec"]))]
            obj["spec"]["typo"] = 1
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.Draft202012Validator(json.loads(schema_path.read_text())).validate(obj)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chart_lints_without_errors(scenario: str) -> None:
    report = helm.lint(CHART, load_values(scenario), strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_values_file_matches_its_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((CHART / "values.yaml").read_text()))
    assert schema["additionalProperties"] is False
    for key in ("image", "redis", "secret", "existingSecret", "api", "worker", "keda", "networkPolicy"):
        assert schema["properties"][key]["additionalProperties"] is False, key


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"api": {"replicas": "two"}}, "/api/replicas"),
        ({"worker": {"metricsPort": 70000}}, "/worker/metricsPort"),
        ({"replicas": 2}, "additional properties 'replicas'"),
        ({"api": {"replica": 2}}, "additional properties 'replica'"),
        ({"config": {"REDIS_URL": "redis://r:6379"}}, "REDIS_URL"),
        ({"config": {"API_KEYS": "a:b"}}, "API_KEYS"),
        ({"config": {"log_level": "INFO"}}, "log_level"),
        ({"config": {"LOG_FORMAT": "xml"}}, "/config/LOG_FORMAT"),
        ({"redis": {"mode": "clustered"}}, "/redis/mode"),
        ({"redis": {"mode": "cluster", "cluster": {"nodes": ["redis-cluster"]}}}, "/redis/cluster/nodes/0"),
        ({"redis": {"cluster": {"seeds": ["r:6379"]}}}, "additional properties 'seeds'"),
        ({"redis": {"mode": "url", "url": "redis://:hunter2@redis:6379/0"}}, "/redis/url"),
        ({"api": {"resources": {"requests": {"cpu": "lots"}}}}, "/api/resources/requests/cpu"),
        ({"worker": {"resources": {"requests": {"memory": None}}}}, "/worker/resources/requests"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        # A password in the ConfigMap, by userinfo or by query parameter.
        ({"redis": {"mode": "url", "url": "redis://r:6379/0?password=hunter2"}}, "/redis/url"),
        ({"redis": {"mode": "url", "url": "rediss://r:6379/0?db=1&Password=hunter2"}}, "/redis/url"),
        ({"redis": {"mode": "url", "url": "redis://default:hunter2@r:6379/0"}}, "/redis/url"),
        # Every setting is listed (generated from service/config/settings.py); a typo is refused at install.
        ({"config": {"RETRY_SCHEDUL": "5s"}}, "additional properties 'RETRY_SCHEDUL'"),
        ({"config": {"NUTRIENT_MAX_RSP": 5}}, "additional properties 'NUTRIENT_MAX_RSP'"),
        ({"config": {"REDIS_PASSWORD": "x"}}, "REDIS_PASSWORD"),
        ({"config": {"WORKER_METRICS_HOST": "::"}}, "WORKER_METRICS_HOST"),
        ({"config": {"WORKER_ROLE": "everything"}}, "/config/WORKER_ROLE"),
        # Vendors: names as the registry takes them; each own vendor's settings listed, its key not there.
        ({"vendors": {"Azure": {}}}, "Azure"),
        ({"vendors": {"azure_di": {"settings": {"BASE_ULR": "https://x"}}}}, "BASE_ULR"),
        ({"vendors": {"azure_di": {"settings": {"API_KEY": "k"}}}}, "API_KEY"),
        ({"vendors": {"acme": {"settings": {"API_KEY": "k"}}}}, "invalid propertyName 'API_KEY'"),
        ({"vendors": {"acme": {"settings": {"lower": 1}}}}, "invalid propertyName 'lower'"),
        ({"vendors": {"azure_di": {"apikey": "k"}}}, "apikey"),
        ({"secret": {"nutrientApiKey": "k"}}, "nutrientApiKey"),  # now vendors.nutrient.apiKey
        # Probes and securityContext have real shapes.
        ({"api": {"livenessProbe": {"httpGet": {"port": "http", "path": "healthz"}}}}, "/api/livenessProbe"),
        ({"worker": {"startupProbe": {"exec": {"command": ["true"]}}}}, "/worker/startupProbe"),
        (
            {"api": {"readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSecond": 5}}},
            "periodSecond",
        ),
        ({"securityContext": {"runAsNonroot": True}}, "runAsNonroot"),
        ({"podSecurityContext": {"runAsUser": "root"}}, "/podSecurityContext/runAsUser"),
        ({"keda": {"minReplicaCount": -1}}, "/keda/minReplicaCount"),
        ({"networkPolicy": {"egress": {"dns": {"enabled": True, "to": [{"ipblock": {}}]}}}}, "ipblock"),
    ],
)
def test_schema_rejects_bad_values(chart: helm.Chart, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(message)):
        chart.validate_schema(values)
    with pytest.raises(helm.HelmValuesError):  # an install validates the same way
        render(chart, values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"mode": "url"}}, "redis.mode=url needs"),
        ({"redis": {"mode": "sentinel", "sentinel": {"hosts": []}}}, "redis.mode=sentinel needs"),
        (
            {"redis": {"mode": "cluster", "cluster": {"nodes": []}}},
            "redis.mode=cluster needs redis.cluster.nodes",
        ),
        (
            {"redis": {"mode": "cluster", "url": "redis://r:6379"}},
            "redis.mode=cluster: hookbridge takes exactly one of",
        ),
        (
            {"redis": {"mode": "cluster"}, "secret": {"redisUrl": "redis://:p@r:6379"}},
            "redis.mode=cluster: hookbridge takes exactly one of",
        ),
        (
            {"redis": {"mode": "cluster"}, "secret": {"redisSentinelPassword": "x"}},
            "Sentinel credentials or TLS",
        ),
        # hookbridge ignores the Sentinels when HOOKBRIDGE_REDIS_URL is set.
        ({"redis": {"url": "redis://r:6379"}}, "hookbridge uses Sentinel only while"),
        ({"secret": {"redisUrl": "redis://:p@r:6379"}}, "hookbridge uses Sentinel only while"),
        (
            {"redis": {"mode": "url", "url": "redis://r:6379"}, "secret": {"redisUrl": "redis://:p@r"}},
            "set the Redis URL once",
        ),
        ({"redis": {"embedded": {"enabled": True}, "url": "redis://r:6379"}}, "embedded"),
        (
            {"worker": {"shutdownGraceSeconds": 40}},
            "worker.terminationGracePeriodSeconds (40) must be at least",
        ),
        ({"keda": {"enabled": True}}, "keda.enabled needs keda.prometheus.serverAddress"),
        # Shutdown margins, for both roles: preStop + grace + 5 s must fit in the termination grace.
        (
            {
                "api": {
                    "preStopSleepSeconds": 5,
                    "shutdownGraceSeconds": 25,
                    "terminationGracePeriodSeconds": 30,
                }
            },
            "api.terminationGracePeriodSeconds (30) must be at least api.preStopSleepSeconds (5) + "
            "api.shutdownGraceSeconds (25) + a 5s margin = 35",
        ),
        (
            {
                "api": {
                    "preStopSleepSeconds": 0,
                    "shutdownGraceSeconds": 30,
                    "terminationGracePeriodSeconds": 30,
                }
            },
            "api.terminationGracePeriodSeconds (30) must be at least",
        ),
        (
            {"worker": {"shutdownGraceSeconds": 25, "terminationGracePeriodSeconds": 29}},
            "worker.terminationGracePeriodSeconds (29) must be at least",
        ),
        # KEDA: at 0 replicas no pod exports the metric; `service` exists only on ServiceMonitor scrapes.
        (
            {
                "keda": {
                    "enabled": True,
                    "minReplicaCount": 0,
                    "prometheus": {"serverAddress": "http://p:9090"},
                }
            },
            "keda.minReplicaCount must be 1 or more",
        ),
        (
            {
                "keda": {
                    "enabled": True,
                    "prometheus": {
                        "serverAddress": "http://p:9090",
                        "query": 'sum(hookbridge_ready_jobs{service="hb-hookbridge-worker-metrics"})',
                    },
                }
            },
            "filters on the label `service` or `endpoint`",
        ),
        (
            {
                "keda": {
                    "enabled": True,
                    "prometheus": {
                        "serverAddress": "http://p:9090",
                        "query": 'max(hookbridge_ready_jobs{namespace="apps",endpoint="metrics"})',
                    },
                }
            },
            "filters on the label `service` or `endpoint`",
        ),
        # PDBs that could never allow an eviction.
        (
            {"api": {"autoscaling": {"enabled": False}, "replicas": 2, "pdb": {"minAvailable": 2}}},
            "api.pdb.minAvailable (2) must be below the role's replica count (2)",
        ),
        (
            {"api": {"autoscaling": {"minReplicas": 2}, "pdb": {"minAvailable": 3}}},
            "api.pdb.minAvailable (3) must be below the role's replica count (2)",
        ),
        (
            {"worker": {"replicas": 1, "pdb": {"minAvailable": 1}}},
            "worker.pdb.minAvailable (1) must be below",
        ),
        ({"worker": {"pdb": {"minAvailable": "100%"}}}, "worker.pdb.minAvailable 100% blocks every eviction"),
        (
            {
                "keda": {
                    "enabled": True,
                    "minReplicaCount": 2,
                    "prometheus": {"serverAddress": "http://p:9090"},
                },
                "worker": {"pdb": {"minAvailable": 2}},
            },
            "worker.pdb.minAvailable (2) must be below the role's replica count (2)",
        ),
        # Redis credentials that cannot apply.
        (
            {"redis": {"mode": "url", "url": "redis://r:6379", "tls": {"enabled": True}}},
            "redis.tls.enabled is for the master found through Sentinel or a cluster's nodes",
        ),
        (
            {"redis": {"mode": "url", "url": "redis://r:6379"}, "secret": {"redisSentinelPassword": "x"}},
            "Sentinel credentials or TLS",
        ),
        (
            {"redis": {"embedded": {"enabled": True}}, "secret": {"redisPassword": "x"}},
            "the embedded Redis has no password",
        ),
        # A vendor setting in two places, or a key the chart cannot store.
        (
            {
                "config": {"AZURE_DI_BASE_URL": "https://a"},
                "vendors": {"azure_di": {"settings": {"BASE_URL": "https://b"}}},
            },
            "HOOKBRIDGE_AZURE_DI_BASE_URL is set twice",
        ),
        (
            {"vendors": {"azure_di": {"apiKey": "k", "existingSecret": "mine"}}},
            "vendors.azure_di.apiKey goes into the chart's Secret",
        ),
        (
            {
                "existingSecret": {"name": "all", "keys": {"apiKeys": "a"}},
                "vendors": {"azure_di": {"apiKey": "k"}},
            },
            "vendors.azure_di.apiKey goes into the chart's Secret",
        ),
    ],
)
def test_chart_refuses_inconsistent_values(chart: helm.Chart, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(chart, values)


# --- pods --------------------------------------------------------------------------------------


def test_every_container_has_probes_and_resources(release: Release) -> None:
    for workload in workloads(release):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert container.get("livenessProbe"), where
            assert container.get("readinessProbe"), where
    for name, pod in pod_specs(release):
        for container in pod["containers"] + pod.get("initContainers", []):
            resources = container["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys(), name
            assert "memory" in resources["limits"], name


def test_probes_hit_the_documented_endpoints(release: Release) -> None:
    api = release.container(f"{PREFIX}-api")
    (http_port,) = api["ports"]
    assert (http_port["name"], http_port["containerPort"]) == ("http", 8080)
    assert api["args"] == ["api", "--host", "0.0.0.0", "--port", "8080"]
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}

    for name in release.workers:
        worker = release.container(name)
        (metrics_port,) = worker["ports"]
        assert metrics_port["name"] == "metrics"
        assert str(metrics_port["containerPort"]) == release.config["HOOKBRIDGE_WORKER_METRICS_PORT"]
        assert worker["args"] == ["worker"]
        for probe in ("livenessProbe", "readinessProbe"):
            assert worker[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_pods_run_locked_down(release: Release) -> None:
    for name, pod in pod_specs(release):
        pod_context = pod["securityContext"]
        assert pod_context["runAsNonRoot"] is True, name
        assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert "emptyDir" in volumes[mounts["/tmp"]], name
            if not name.endswith("-redis"):
                assert pod_context["runAsUser"] == context["runAsUser"] == 10001, name


def test_pod_templates_carry_config_checksums(release: Release) -> None:
    for deployment in hookbridge_deployments(release):
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        for key in ("checksum/config", "checksum/secret"):
            assert re.fullmatch(r"[0-9a-f]{64}", annotations[key]), key


def test_checksums_follow_config_and_secret_changes(chart: helm.Chart) -> None:
    def checksums(values: dict[str, Any]) -> dict[str, str]:
        release = render(chart, values)
        (api,) = [d for d in release.of_kind("Deployment") if d["metadata"]["name"] == f"{PREFIX}-api"]
        annotations: dict[str, str] = api["spec"]["template"]["metadata"]["annotations"]
        return {k: v for k, v in annotations.items() if k.startswith("checksum/")}

    base = checksums({"secret": {"apiKeys": "a:one"}})
    config_changed = checksums({"secret": {"apiKeys": "a:one"}, "config": {"LOG_LEVEL": "DEBUG"}})
    secret_changed = checksums({"secret": {"apiKeys": "a:two"}})
    assert config_changed["checksum/config"] != base["checksum/config"]
    assert config_changed["checksum/secret"] == base["checksum/secret"]
    assert secret_changed["checksum/secret"] != base["checksum/secret"]
    assert secret_changed["checksum/config"] == base["checksum/config"]


def test_each_role_outlives_its_own_shutdown_grace_with_a_margin(release: Release) -> None:
    """Kubernetes counts terminationGracePeriodSeconds from the start of preStop: the preStop sleep, the
    process's own grace and a margin for its exit must all fit, for the api and for the worker."""
    assert "HOOKBRIDGE_SHUTDOWN_GRACE_S" not in release.config, "each role sets its own"
    for name in [f"{PREFIX}-api", *release.workers]:
        role = "api" if name.endswith("-api") else "worker"
        pod = release.get("Deployment", name)["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        grace = float(env_of(container)["HOOKBRIDGE_SHUTDOWN_GRACE_S"]["value"])
        assert grace == release.values[role]["shutdownGraceSeconds"], role
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        sleep = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
        assert pre_stop == [] or pre_stop[:1] == ["sleep"], role
        assert sleep + grace + 5 <= pod["terminationGracePeriodSeconds"], role


def test_the_api_grace_is_its_own_value(chart: helm.Chart) -> None:
    release = render(chart, {"api": {"shutdownGraceSeconds": 7}, "worker": {"shutdownGraceSeconds": 21}})
    assert env_of(release.container(f"{PREFIX}-api"))["HOOKBRIDGE_SHUTDOWN_GRACE_S"]["value"] == "7"
    assert env_of(release.container(f"{PREFIX}-worker"))["HOOKBRIDGE_SHUTDOWN_GRACE_S"]["value"] == "21"


# --- labels and selectors ----------------------------------------------------------------------


def test_objects_carry_the_standard_labels(release: Release) -> None:
    for obj in release.objects:
        labels = obj["metadata"]["labels"]
        for label in STANDARD_LABELS:
            assert labels.get(label), f"{obj['kind']}/{obj['metadata']['name']} lacks {label}"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert obj["metadata"]["namespace"] == NAMESPACE


def test_selectors_match_their_pods(release: Release) -> None:
    pods = {w["metadata"]["name"]: w["spec"]["template"]["metadata"]["labels"] for w in workloads(release)}
    for workload in workloads(release):
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selects(selector, pods[workload["metadata"]["name"]])
        # No workload's selector may also catch another's pods.
        others = [n for n, labels in pods.items() if n != workload["metadata"]["name"]]
        assert not any(selects(selector, pods[n]) for n in others)
    # Each Service selects one workload, except the worker's metrics Service: every worker Deployment.
    expected_workers = release.workers
    for service in release.of_kind("Service"):
        matched = [n for n, labels in pods.items() if selects(service["spec"]["selector"], labels)]
        if service["metadata"]["name"] == f"{PREFIX}-worker-metrics":
            assert matched == expected_workers
        else:
            assert len(matched) == 1, service["metadata"]["name"]
        for workload in matched:
            container_ports = {p["name"] for p in release.container(workload)["ports"]}
            for port in service["spec"]["ports"]:
                assert port["targetPort"] in container_ports
    for pdb in release.of_kind("PodDisruptionBudget"):
        matched = [n for n, labels in pods.items() if selects(pdb["spec"]["selector"]["matchLabels"], labels)]
        assert matched == [pdb["metadata"]["name"]]
    for policy in release.of_kind("NetworkPolicy"):
        selector = policy["spec"]["podSelector"]["matchLabels"]
        name = policy["metadata"]["name"]
        expected = expected_workers if name == f"{PREFIX}-worker" else [name]
        assert [n for n, labels in pods.items() if selects(selector, labels)] == expected


def test_scalers_target_existing_deployments(release: Release) -> None:
    values = release.values
    hpas = release.of_kind("HorizontalPodAutoscaler")
    assert bool(hpas) == values["api"]["autoscaling"]["enabled"]
    for hpa in hpas:
        target = release.get("Deployment", hpa["spec"]["scaleTargetRef"]["name"])
        assert "replicas" not in target["spec"], "the HPA owns the replica count"
        assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    api = release.get("Deployment", f"{PREFIX}-api")
    if not hpas:
        assert api["spec"]["replicas"] == values["api"]["replicas"]

    scaled_objects = release.of_kind("ScaledObject")
    assert bool(scaled_objects) == values["keda"]["enabled"]
    workers = [release.get("Deployment", name) for name in release.workers]
    if scaled_objects:
        targets = sorted(s["spec"]["scaleTargetRef"]["name"] for s in scaled_objects)
        assert targets == sorted(release.workers), "one ScaledObject per worker Deployment"
    for worker in workers:
        assert ("replicas" in worker["spec"]) != bool(scaled_objects), "KEDA owns the replica count"
    for scaled in scaled_objects:
        (trigger,) = scaled["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        assert "hookbridge_ready_jobs" in trigger["metadata"]["query"]
        assert f'namespace="{NAMESPACE}"' in trigger["metadata"]["query"]
    if not scaled_objects:
        for worker in workers:
            assert worker["spec"]["replicas"] == values["worker"]["replicas"]


def test_service_monitors_scrape_api_and_worker_metrics(release: Release) -> None:
    monitors = release.of_kind("ServiceMonitor")
    if not release.values["serviceMonitor"]["enabled"]:
        assert monitors == []
        return
    scraped = set()
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        services = [
            s
            for s in release.of_kind("Service")
            if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert len(services) == 1
        assert endpoint["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
        scraped.add(services[0]["metadata"]["name"])
    assert scraped == {f"{PREFIX}-api", f"{PREFIX}-worker-metrics"}


# --- configuration and secrets -----------------------------------------------------------------


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def test_config_map_holds_only_prefixed_non_secret_settings(release: Release) -> None:
    config = release.config
    assert all(key.startswith("HOOKBRIDGE_") for key in config)
    assert config["HOOKBRIDGE_LOG_FORMAT"] == "json"
    assert not (SECRET_ENV - {"HOOKBRIDGE_REDIS_URL"}) & config.keys()
    for value in config.values():
        assert not re.search(r"e\+\d\d$", value), f"a number rendered as a float: {value}"
        assert not re.match(r"rediss?://[^/@]*:[^/@]+@", value), "a Redis password in the ConfigMap"
    for deployment in hookbridge_deployments(release):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["envFrom"] == [{"configMapRef": {"name": f"{PREFIX}-config"}}]


def test_redis_settings_follow_the_mode(release: Release) -> None:
    config, redis = release.config, release.values["redis"]
    env = env_of(release.container(f"{PREFIX}-api"))
    if redis["embedded"]["enabled"]:
        service = release.get("Service", f"{PREFIX}-redis")
        assert config["HOOKBRIDGE_REDIS_URL"] == f"redis://{service['metadata']['name']}:6379/0"
        assert "HOOKBRIDGE_REDIS_SENTINELS" not in config
        statefulset = release.get("StatefulSet", f"{PREFIX}-redis")
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        assert container["image"].startswith("redis:7.2")
        assert container["image"].endswith("-alpine")
        args = " ".join(container["args"])
        assert "--appendonly yes" in args
        assert "--appendfsync everysec" in args
        has_pvc = bool(statefulset["spec"].get("volumeClaimTemplates"))
        assert has_pvc == redis["embedded"]["persistence"]["enabled"]
    elif redis["mode"] == "sentinel":
        assert config["HOOKBRIDGE_REDIS_SENTINELS"] == ",".join(redis["sentinel"]["hosts"])
        assert config["HOOKBRIDGE_REDIS_SENTINEL_MASTER"] == redis["sentinel"]["master"]
        assert "HOOKBRIDGE_REDIS_URL" not in config | env
        assert "HOOKBRIDGE_REDIS_CLUSTER_NODES" not in config
    elif redis["mode"] == "cluster":
        assert config["HOOKBRIDGE_REDIS_CLUSTER_NODES"] == ",".join(redis["cluster"]["nodes"])
        assert not {"HOOKBRIDGE_REDIS_URL", "HOOKBRIDGE_REDIS_SENTINELS"} & set(config | env)
        assert ("HOOKBRIDGE_REDIS_TLS" in config) == redis["tls"]["enabled"]
    else:
        assert ("HOOKBRIDGE_REDIS_URL" in config) != ("HOOKBRIDGE_REDIS_URL" in env)
        assert "HOOKBRIDGE_REDIS_SENTINELS" not in config
    assert not ("HOOKBRIDGE_REDIS_URL" in config and "HOOKBRIDGE_REDIS_URL" in env)
    if not redis["embedded"]["enabled"]:
        assert not release.has("StatefulSet", f"{PREFIX}-redis")


def test_secret_wiring(release: Release) -> None:
    existing = release.values["existingSecret"]
    secrets = release.of_kind("Secret")
    containers = [release.container(d["metadata"]["name"]) for d in hookbridge_deployments(release)]
    envs = [{k: v for k, v in env_of(c).items() if k in SECRET_ENV} for c in containers]
    assert envs[0] == envs[1], "the api and the worker read the same secrets"
    refs = {name: e["valueFrom"]["secretKeyRef"] for name, e in envs[0].items() if name in SECRET_ENV}
    if existing["name"]:
        assert secrets == [], "no chart Secret next to an existing one"
        vendors = release.values.get("vendors") or {}
        expected = {
            "HOOKBRIDGE_API_KEYS": existing["keys"]["apiKeys"],
            **{
                f"HOOKBRIDGE_{name.upper()}_API_KEY": (v or {}).get(
                    "key", f"HOOKBRIDGE_{name.upper()}_API_KEY"
                )
                for name, v in vendors.items()
            },
            "HOOKBRIDGE_REDIS_URL": existing["keys"]["redisUrl"],
            "HOOKBRIDGE_REDIS_PASSWORD": existing["keys"]["redisPassword"],
            "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD": existing["keys"]["redisSentinelPassword"],
            "HOOKBRIDGE_SECRET_KEYS": existing["keys"]["secretKeys"],
        }
        assert {name: ref["key"] for name, ref in refs.items()} == {k: v for k, v in expected.items() if v}
        for name, ref in refs.items():
            own = (vendors.get(VENDOR_KEYS.get(name, "")) or {}).get("existingSecret")
            assert ref["name"] == (own or existing["name"]), name
            required = own or name in {
                "HOOKBRIDGE_API_KEYS",
                "HOOKBRIDGE_REDIS_URL",
                "HOOKBRIDGE_REDIS_PASSWORD",
                "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD",
            }
            assert ref.get("optional", False) is (not required), name
    else:
        (secret,) = secrets
        data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
        assert data.keys() == refs.keys(), "every Secret key is read, and every read key exists"
        for name, ref in refs.items():
            assert ref["name"] == secret["metadata"]["name"]
            assert ref["key"] == name
        given = release.values["secret"]
        assert data.get("HOOKBRIDGE_API_KEYS", "") == given["apiKeys"]
        assert data.get("HOOKBRIDGE_REDIS_URL", "") == given["redisUrl"]
        for name, vendor in (release.values.get("vendors") or {}).items():
            assert data.get(f"HOOKBRIDGE_{name.upper()}_API_KEY", "") == (vendor or {}).get("apiKey", "")


def test_a_redis_password_stays_in_the_secret(chart: helm.Chart) -> None:
    url = "redis://:p4ssw0rd@redis-master.data.svc:6379/2"
    release = render(chart, {"redis": {"mode": "url"}, "secret": {"redisUrl": url}})
    assert "HOOKBRIDGE_REDIS_URL" not in release.config
    secret = release.get("Secret", f"{PREFIX}-secret")
    assert base64.b64decode(secret["data"]["HOOKBRIDGE_REDIS_URL"]).decode() == url
    ref = env_of(release.container(f"{PREFIX}-worker"))["HOOKBRIDGE_REDIS_URL"]["valueFrom"]
    assert ref["secretKeyRef"] == {"name": f"{PREFIX}-secret", "key": "HOOKBRIDGE_REDIS_URL"}


def test_numbers_in_config_render_as_written(chart: helm.Chart) -> None:
    config = render(chart, load_values("sentinel")).config
    assert config["HOOKBRIDGE_NUTRIENT_MAX_RPS"] == "5"
    assert config["HOOKBRIDGE_UPTIQ_POLL_INITIAL_S"] == "2.5"
    assert config["HOOKBRIDGE_WORKER_CONCURRENCY"] == "32"
    assert config["HOOKBRIDGE_MAX_DOCUMENT_BYTES"] == "52428800"


def test_the_application_accepts_the_rendered_environment(release: Release) -> None:
    """The pods' environment, as service.config.settings reads it: no unknown name, no bad value."""

    env = dict(release.config)
    stand_ins = {
        "HOOKBRIDGE_API_KEYS": "billing:s3cr3t",
        "HOOKBRIDGE_REDIS_URL": "redis://:p4ssw0rd@redis:6379/0",
    }
    secrets = {s["metadata"]["name"]: s for s in release.of_kind("Secret")}
    roles = []
    for worker in release.workers:
        env = dict(release.config)
        for name, entry in env_of(release.container(worker)).items():
            if "value" in entry:
                env[name] = entry["value"]
                continue
            ref = entry["valueFrom"]["secretKeyRef"]
            if ref["name"] in secrets:
                env[name] = base64.b64decode(secrets[ref["name"]]["data"][ref["key"]]).decode()
            else:  # an existingSecret: its content is the operator's
                env[name] = stand_ins.get(name, "vendor-key")
        loaded = load_settings(env)
        assert loaded.worker_metrics_port == release.values["worker"]["metricsPort"]
        assert loaded.shutdown_grace_s == release.values["worker"]["shutdownGraceSeconds"]
        assert loaded.log_format == "json"
        assert loaded.redis_url is not None or loaded.redis_sentinels or loaded.redis_cluster_nodes
        if (
            release.values["redis"]["mode"] == "cluster"
            and not release.values["redis"]["embedded"]["enabled"]
        ):
            hosts = [f"{h}:{p}" for h, p in loaded.redis_cluster_nodes]
            assert hosts == release.values["redis"]["cluster"]["nodes"]
            assert loaded.redis.tls == release.values["redis"]["tls"]["enabled"]
        roles.append(loaded.worker_role)
    assert roles == (["runs", "deliveries"] if release.values["worker"]["split"] else ["all"])


def test_image_reference(chart: helm.Chart) -> None:
    default = render(chart).container(f"{PREFIX}-api")["image"]
    assert default == f"hookbridge:{chart.metadata['appVersion']}"
    pinned = render(chart, load_values("existing-secret")).container(f"{PREFIX}-worker")["image"]
    assert re.fullmatch(r"registry\.example\.com/platform/hookbridge:0\.1\.0@sha256:[0-9a-f]{64}", pinned)


def test_network_policies_allow_what_hookbridge_needs(chart: helm.Chart) -> None:
    release = render(chart, load_values("keda-servicemonitor"))
    api = release.get("NetworkPolicy", f"{PREFIX}-api")
    (ingress,) = api["spec"]["ingress"]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    peers = ingress["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}} in peers
    # Prometheus scrapes the api's /metrics on the same port.
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in peers
    assert any(
        p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "test"
        for p in peers
    )
    egress = api["spec"]["egress"]
    ports = [p["port"] for rule in egress for p in rule.get("ports", [])]
    assert 53 in ports and 6380 in ports
    # The api calls no vendor and no receiver: DNS and Redis only.
    assert not [
        peer
        for rule in egress
        for peer in rule.get("to", [])
        if "ipBlock" in peer and "/0" in peer["ipBlock"]["cidr"]
    ]

    worker = release.get("NetworkPolicy", f"{PREFIX}-worker")["spec"]["egress"]
    # No rule opens every port to everywhere: each rule that reaches the internet names its ports.
    for rule in worker:
        wide = [
            p for p in rule.get("to", []) if "ipBlock" in p and p["ipBlock"]["cidr"] in ("0.0.0.0/0", "::/0")
        ]
        if wide or "to" not in rule:
            assert rule.get("ports"), rule
    (internet,) = [
        r for r in worker if any(p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0" for p in r.get("to", []))
    ]
    assert [p["port"] for p in internet["ports"]] == [443]
    blocks = {p["ipBlock"]["cidr"]: p["ipBlock"]["except"] for p in internet["to"]}
    assert set(blocks) == {"0.0.0.0/0", "::/0"}, "IPv4 and IPv6"
    for cluster_range in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"):
        assert cluster_range in blocks["0.0.0.0/0"]
    assert "fc00::/7" in blocks["::/0"] and "fe80::/10" in blocks["::/0"]
    assert all(":" not in e for e in blocks["0.0.0.0/0"]) and all(":" in e for e in blocks["::/0"])
    (dns,) = [r for r in worker if {"port": 53, "protocol": "UDP"} in r.get("ports", [])]
    assert dns["to"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]

    embedded = render(chart, load_values("embedded-redis"))
    redis_policy = embedded.get("NetworkPolicy", f"{PREFIX}-redis")
    components = {
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for peer in redis_policy["spec"]["ingress"][0]["from"]
    }
    assert components == {"api", "worker"}


# --- helm test ---------------------------------------------------------------------------------


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path in ("/healthz", "/readyz") else 404)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_helm_test_pod_checks_the_api_with_the_hookbridge_image(chart: helm.Chart) -> None:
    release = render(chart)
    (pod,) = release.of_kind("Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == release.container(f"{PREFIX}-api")["image"]
    assert container["command"][:2] == ["python", "-c"]
    script = container["command"][2]
    service = release.get("Service", f"{PREFIX}-api")
    base = f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert base in script

    # Run the script itself against a local stand-in for the api.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        local = script.replace(base, f"http://127.0.0.1:{server.server_address[1]}")
        done = subprocess.run([sys.executable, "-c", local], capture_output=True, text=True, timeout=20)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["/healthz", "200", "/readyz", "200"]


# --- docs --------------------------------------------------------------------------------------


def test_production_values_in_the_docs_render(chart: helm.Chart) -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    match = re.search(r"```yaml\n# values-production\.yaml\n(.*?)```", text, re.S)
    assert match, "docs/deploy.md lost its production values block"
    production = yaml.safe_load(match.group(1))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", production["image"]["digest"]), "production pins a digest"
    release = render(chart, production)
    assert release.container(f"{PREFIX}-api")["image"].endswith(production["image"]["digest"])
    for obj in release.objects:
        crd_schema = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        if crd_schema is None:
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)


# --- platform findings (issue 12) ----------------------------------------------------------------


def test_service_links_are_off_in_every_pod(release: Release) -> None:
    """With release `hookbridge` the Services hookbridge-api and hookbridge-worker-metrics would inject
    HOOKBRIDGE_API_SERVICE_HOST and more into every pod of the namespace."""
    for name, pod in pod_specs(release):
        assert pod["enableServiceLinks"] is False, name


def test_keda_default_query_needs_no_service_monitor(chart: helm.Chart) -> None:
    values = {"keda": {"enabled": True, "prometheus": {"serverAddress": "http://prometheus:9090"}}}
    release = render(chart, values)
    (scaled,) = release.of_kind("ScaledObject")
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert "service=" not in query and "endpoint=" not in query
    pattern = re.search(r'pod=~"([^"]+)"', query)
    assert pattern, query
    worker = release.get("Deployment", f"{PREFIX}-worker")["metadata"]["name"]
    # A worker pod's name is <deployment>-<replicaset hash>-<pod hash>; the api's must not match.
    assert re.fullmatch(pattern.group(1), f"{worker}-7d9f8b6c5-x2x4z")
    assert not re.fullmatch(pattern.group(1), f"{PREFIX}-api-7d9f8b6c5-x2x4z")
    # The pods carry the annotations a Prometheus without the operator discovers them by.
    annotations = release.get("Deployment", f"{PREFIX}-worker")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9090"
    # With a ServiceMonitor, the precise `service` label is used, and the annotations are not needed.
    with_monitor = render(chart, {**values, "serviceMonitor": {"enabled": True}})
    (scaled,) = with_monitor.of_kind("ScaledObject")
    assert f'service="{PREFIX}-worker-metrics"' in scaled["spec"]["triggers"][0]["metadata"]["query"]
    pod = with_monitor.get("Deployment", f"{PREFIX}-worker")["spec"]["template"]["metadata"]
    assert "prometheus.io/scrape" not in pod["annotations"]


@pytest.mark.parametrize(
    ("kube_version", "expected"), [("1.25.0", None), ("1.27.0", "AlwaysAllow"), ("1.31.0", "AlwaysAllow")]
)
def test_pdbs_let_unhealthy_pods_be_evicted(
    chart: helm.Chart, kube_version: str, expected: str | None
) -> None:
    """Every pod unready (a Redis incident) must not block a node drain, where the field exists."""
    release = render(chart, {}, kube_version=kube_version)
    pdbs = release.of_kind("PodDisruptionBudget")
    assert len(pdbs) == 2
    for pdb in pdbs:
        assert pdb["spec"].get("unhealthyPodEvictionPolicy") == expected


def test_tmp_holds_the_uploads_in_flight(chart: helm.Chart) -> None:
    """Multipart files over 1 MiB spool to /tmp: the volume is sized from MAX_DOCUMENT_BYTES times the
    uploads in flight (on 9efe3c0 a fixed 64Mi against 50 MiB documents: two uploads evicted the pod)."""

    def tmp_bytes(values: dict[str, Any]) -> int:
        api = render(chart, values).get("Deployment", f"{PREFIX}-api")["spec"]["template"]["spec"]
        (tmp,) = [v for v in api["volumes"] if v["name"] == "tmp"]
        size = tmp["emptyDir"]["sizeLimit"]
        assert size.endswith("Mi"), size
        return int(size[:-2]) * 1024 * 1024

    default = tmp_bytes({})
    assert default >= 52428800 * 10
    assert (
        tmp_bytes({"config": {"MAX_DOCUMENT_BYTES": 10 * 1024 * 1024}, "api": {"uploadsInFlight": 3}})
        >= 30 * 1024 * 1024
    )
    assert tmp_bytes({"config": {"MAX_DOCUMENT_BYTES": "104857600"}}) >= 104857600 * 10
    # An explicit size still wins.
    release = render(chart, {"tmpVolume": {"sizeLimit": "2Gi"}})
    (tmp,) = [
        v
        for v in release.get("Deployment", f"{PREFIX}-api")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "tmp"
    ]
    assert tmp["emptyDir"]["sizeLimit"] == "2Gi"


def test_redis_auth_values_reach_the_pods_without_the_configmap(chart: helm.Chart) -> None:
    release = render(chart, load_values("sentinel-auth"))
    config = release.config
    assert config["HOOKBRIDGE_REDIS_USERNAME"] == "hookbridge"
    for secret in ("HOOKBRIDGE_REDIS_PASSWORD", "HOOKBRIDGE_REDIS_SENTINEL_PASSWORD"):
        assert secret not in config
        ref = env_of(release.container(f"{PREFIX}-worker"))[secret]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": f"{PREFIX}-secret", "key": secret}
    assert all("pa55word" not in v for v in config.values())

    tls = render(chart, load_values("sentinel-tls"))
    assert (
        tls.config["HOOKBRIDGE_REDIS_TLS"] == "true" and tls.config["HOOKBRIDGE_REDIS_SENTINEL_TLS"] == "true"
    )
    ca_file = tls.config["HOOKBRIDGE_REDIS_TLS_CA_FILE"]
    for role in ("api", "worker"):
        pod = tls.get("Deployment", f"{PREFIX}-{role}")["spec"]["template"]["spec"]
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "redis-ca"]
        assert ca_file.startswith(mount["mountPath"] + "/") and mount["readOnly"] is True
        (volume,) = [v for v in pod["volumes"] if v["name"] == "redis-ca"]
        assert volume["secret"] == {"secretName": "redis-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}


def test_the_committed_schema_lists_every_setting() -> None:
    """values.schema.json's config section is generated from service/config/settings.py; out of date fails."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "helm" / "generate_schema.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    from service.config import settings

    config = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    assert config["additionalProperties"] is False
    names = {name.removeprefix("HOOKBRIDGE_") for name, _ in settings.describe(registry.vendors())}
    assert set(config["properties"]) < names
    for key in yaml.safe_load((CHART / "values.yaml").read_text())["config"]:
        assert key in config["properties"], key
    vendors = json.loads((CHART / "values.schema.json").read_text())["properties"]["vendors"]
    own = {n for n, s in registry.vendors().items() if s.build.__module__.startswith("service.")}
    assert set(vendors["properties"]) == own
    for name in own:
        listed = set(vendors["properties"][name]["properties"]["settings"]["properties"])
        head = f"HOOKBRIDGE_{name.upper()}_"
        # The secrets go in the Secret, not in the settings (a key, a credentials file's name too).
        own_settings = [n for n, _ in settings.describe(registry.vendors()) if n.startswith(head)]
        expected = {n.removeprefix(head) for n in own_settings if not settings.is_secret(n)}
        assert listed == expected, name


def test_vendors_generically(chart: helm.Chart, tmp_path: Path) -> None:
    """vendors.<name>: any installed vendor's key from the chart's Secret, the release's existingSecret
    or a Secret of its own, and its settings in the ConfigMap; the application loads what the pods get."""

    release = render(
        chart,
        {
            "secret": {"apiKeys": "a:b"},
            "vendors": {
                "azure_di": {
                    "apiKey": "azk",
                    "settings": {"BASE_URL": "https://r.cognitiveservices.azure.com"},
                },
                "uptiq": {"existingSecret": "uptiq-keys", "key": "token", "settings": {"MAX_RPS": 3}},
                "nutrient": None,
            },
        },
    )
    assert release.config["HOOKBRIDGE_AZURE_DI_BASE_URL"] == "https://r.cognitiveservices.azure.com"
    assert release.config["HOOKBRIDGE_UPTIQ_MAX_RPS"] == "3"
    env = env_of(release.container(f"{PREFIX}-worker"))
    assert env["HOOKBRIDGE_AZURE_DI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{PREFIX}-secret",
        "key": "HOOKBRIDGE_AZURE_DI_API_KEY",
    }
    assert env["HOOKBRIDGE_UPTIQ_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "uptiq-keys",
        "key": "token",
    }
    assert "HOOKBRIDGE_NUTRIENT_API_KEY" not in env
    (secret,) = release.of_kind("Secret")
    assert base64.b64decode(secret["data"]["HOOKBRIDGE_AZURE_DI_API_KEY"]).decode() == "azk"
    assert "HOOKBRIDGE_UPTIQ_API_KEY" not in secret["data"]
    annotations = release.get("Deployment", f"{PREFIX}-api")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/vendor-secrets" in annotations
    loaded = load_settings(
        {**release.config, "HOOKBRIDGE_API_KEYS": "a:b", "HOOKBRIDGE_AZURE_DI_API_KEY": "azk"}
    )
    assert loaded.vendor("azure_di").base_url == "https://r.cognitiveservices.azure.com"
    assert loaded.vendor("azure_di").missing == ()

    # With secretsAsFiles a vendor's own Secret is a volume of its own.
    files = render(
        chart,
        {
            "secret": {"apiKeys": "a:b"},
            "secretsAsFiles": True,
            "vendors": {"azure_di": {"existingSecret": "az", "key": "k"}, "nutrient": {"apiKey": "nk"}},
        },
    )
    pod = files.get("Deployment", f"{PREFIX}-worker")["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    assert env["HOOKBRIDGE_AZURE_DI_API_KEY_FILE"]["value"] == "/etc/hookbridge/vendor-secrets/azure_di/k"
    assert (
        env["HOOKBRIDGE_NUTRIENT_API_KEY_FILE"]["value"]
        == "/etc/hookbridge/secrets/HOOKBRIDGE_NUTRIENT_API_KEY"
    )
    assert {"name": "vendor-azure-di", "secret": {"secretName": "az"}} in pod["volumes"]
    mount = {
        "name": "vendor-azure-di",
        "mountPath": "/etc/hookbridge/vendor-secrets/azure_di",
        "readOnly": True,
    }
    assert mount in pod["containers"][0]["volumeMounts"]


def test_a_plugin_vendor_is_configured_as_any_other(chart: helm.Chart) -> None:
    """LlamaParse, a distribution of its own that the image installs (plugins/hookbridge-llamaparse): the
    chart knows it by nothing but its name under vendors, as it would a third party's plugin; its key from
    the chart's Secret, its settings in the ConfigMap, loaded by the application as the pods get them."""

    assert "llamaparse" in registry.vendors()  # installed beside hookbridge (make venv, the image)
    release = render(
        chart,
        {
            "secret": {"apiKeys": "a:b"},
            "vendors": {"llamaparse": {"apiKey": "llx-k", "settings": {"SUBMIT_MAX_RPS": 2}}},
        },
    )
    assert release.config["HOOKBRIDGE_LLAMAPARSE_SUBMIT_MAX_RPS"] == "2"
    env = env_of(release.container(f"{PREFIX}-worker"))
    assert env["HOOKBRIDGE_LLAMAPARSE_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{PREFIX}-secret",
        "key": "HOOKBRIDGE_LLAMAPARSE_API_KEY",
    }
    (secret,) = release.of_kind("Secret")
    assert base64.b64decode(secret["data"]["HOOKBRIDGE_LLAMAPARSE_API_KEY"]).decode() == "llx-k"
    loaded = load_settings(
        {**release.config, "HOOKBRIDGE_API_KEYS": "a:b", "HOOKBRIDGE_LLAMAPARSE_API_KEY": "llx-k"}
    )
    assert loaded.vendor("llamaparse").api_key == "llx-k" and loaded.vendor("llamaparse").missing == ()


def test_secret_keys_go_to_the_secret_never_the_config_map(chart: helm.Chart) -> None:
    key = "k1:" + base64.b64encode(b"0" * 32).decode()
    release = render(chart, {"secret": {"secretKeys": key}})
    (secret,) = release.of_kind("Secret")
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    assert data["HOOKBRIDGE_SECRET_KEYS"] == key
    for config_map in release.of_kind("ConfigMap"):
        assert key not in yaml.safe_dump(config_map)
        assert "HOOKBRIDGE_SECRET_KEYS" not in (config_map.get("data") or {})


def test_secrets_as_files_mount_the_secret_and_name_each_file(chart: helm.Chart, tmp_path: Path) -> None:
    """secretsAsFiles: the Secret is a read-only volume and each secret setting is HOOKBRIDGE_<X>_FILE;
    the settings loader reads those files as the values (service/config/settings.py)."""

    values = {
        "secret": {"apiKeys": "app:from-a-file"},
        "vendors": {"nutrient": {"apiKey": "nk"}},
        "secretsAsFiles": True,
    }
    release = render(chart, values)
    (secret,) = release.of_kind("Secret")
    for role in ("api", "worker"):
        pod = release.get("Deployment", f"{PREFIX}-{role}")["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert "HOOKBRIDGE_API_KEYS" not in env and "HOOKBRIDGE_NUTRIENT_API_KEY" not in env
        assert env["HOOKBRIDGE_API_KEYS_FILE"]["value"] == "/etc/hookbridge/secrets/HOOKBRIDGE_API_KEYS"
        assert not any(e.get("valueFrom", {}).get("secretKeyRef") for e in container["env"])
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "secrets"]
        assert mount == {"name": "secrets", "mountPath": "/etc/hookbridge/secrets", "readOnly": True}
        (volume,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    # What the volume would hold, read by the loader through the _FILE variables the pod gets.
    files = {}
    for key, encoded in secret["data"].items():
        (tmp_path / key).write_bytes(base64.b64decode(encoded))
        files[f"{key}_FILE"] = str(tmp_path / key)
    loaded = load_settings(files)
    assert loaded.api_keys == (("app", "from-a-file"),) and loaded.vendor("nutrient").api_key == "nk"
    # Off by default: secretKeyRef as before.
    pod = render(chart, {"secret": {"apiKeys": "a:b"}}).get("Deployment", f"{PREFIX}-api")["spec"]["template"]
    assert "HOOKBRIDGE_API_KEYS" in {e["name"] for e in pod["spec"]["containers"][0]["env"]}


def test_cloud_identities_need_no_static_keys_and_a_key_file_can_be_mounted(chart: helm.Chart) -> None:
    """Textract and Document AI (docs/vendors.md): IRSA's and GKE workload identity's annotations on the
    service account both roles run as; the static-key alternative's Secret-backed variables and key file
    on the worker only; the cloud settings in the ConfigMap, none of them a secret."""
    release = render(chart, load_values("cloud-identity"))
    (account,) = release.of_kind("ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/hookbridge",
        "iam.gke.io/gcp-service-account": "hookbridge@example-project.iam.gserviceaccount.com",
    }
    for role in ("api", "worker"):
        pod = release.get("Deployment", f"{PREFIX}-{role}")["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == account["metadata"]["name"]
    worker = release.get("Deployment", f"{PREFIX}-worker")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in worker["containers"][0]["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "hookbridge-aws",
        "key": "secret-access-key",
    }
    assert env["HOOKBRIDGE_GOOGLE_DOCAI_CREDENTIALS_FILE"]["value"] == "/etc/hookbridge/google/key.json"
    (mount,) = [m for m in worker["containers"][0]["volumeMounts"] if m["name"] == "google-key"]
    assert mount["mountPath"] == "/etc/hookbridge/google" and mount["readOnly"] is True
    (volume,) = [v for v in worker["volumes"] if v["name"] == "google-key"]
    assert volume["secret"]["secretName"] == "hookbridge-google"
    (config,) = [c for c in release.of_kind("ConfigMap") if "HOOKBRIDGE_TEXTRACT_REGION" in c.get("data", {})]
    assert config["data"]["HOOKBRIDGE_TEXTRACT_S3_BUCKET"] == "hookbridge-staging"
    assert config["data"]["HOOKBRIDGE_GOOGLE_DOCAI_LOCATION"] == "eu"
