"""The chart's dashboard and alerts, checked against the metrics the service really exports.

Every PromQL expression in the Grafana dashboard and in the PrometheusRule is parsed with
``promql-parser`` (the Python binding of the Rust PromQL parser GreptimeDB uses), and every metric it
names must be exported by ``/metrics`` of the API or of the worker after a real run and a real delivery
(real Redis, the vendor simulator, a real worker and receiver). The per-client gauges are checked
against states made through the API: a receiver that keeps failing, a subscription its owner disabled
and one that hookbridge disabled after a 410, a vendor paused after a 429.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from service.observability import metrics
from service.store import keys
from tests.chart.test_helm_chart import CHART, load_values, render
from tests.conftest import ReceiverFactory, StackFactory, eventually

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def monitored(chart: helm.Chart) -> dict[str, Any]:
    """The keda-servicemonitor scenario turns the dashboard and the rules on."""
    release = render(chart, load_values("keda-servicemonitor"))
    rules = release.of_kind("PrometheusRule")
    dashboards = [c for c in release.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    assert len(rules) == 1 and len(dashboards) == 1
    return {"rules": rules[0], "dashboard": dashboards[0]}


def alerts(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def dashboard_json(configmap: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(configmap["data"]["hookbridge.json"])
    return loaded


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects, from the parser's syntax tree."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__":
                    names.add(matcher.value)
            return
        for attr in ("expr", "lhs", "rhs", "param", "vector_selector"):
            child = getattr(node, attr, None)
            if child is not None and not isinstance(child, (str, int, float)):
                walk(child)
        for arg in getattr(node, "args", None) or []:
            walk(arg)

    walk(promql_parser.parse(expr))
    return names


def test_the_parser_refuses_bad_promql() -> None:
    """Guards the checks below against a parser that accepts anything."""
    for bad in ("sum by (client) (rate(x[5m])", "rate(x)", "histogram_quantile(0.99, )", "x >"):
        with pytest.raises(ValueError):
            promql_parser.parse(bad)
    assert metric_names('sum(rate(a_total{x="1"}[5m])) / on() b > 3') == {"a_total", "b"}


def test_dashboard_configmap_is_for_the_grafana_sidecar(monitored: dict[str, Any]) -> None:
    configmap = monitored["dashboard"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = dashboard_json(configmap)
    assert dashboard["uid"] == "hookbridge"
    titles = [p["title"] for p in dashboard["panels"]]
    assert len(titles) == len(set(titles)) >= 10
    exprs = dashboard_exprs(dashboard)
    assert len(exprs) >= len(titles)
    for expr in exprs:
        promql_parser.parse(expr)  # raises on a syntax error


def test_dashboard_label_is_configurable_and_off_by_default(chart: helm.Chart) -> None:
    assert not render(chart, {}).of_kind("PrometheusRule")
    assert not [
        c for c in render(chart, {}).of_kind("ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ]
    on = render(chart, {"monitoring": {"dashboard": {"enabled": True, "labels": {"dash": "yes"}}}})
    (configmap,) = [c for c in on.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    assert configmap["metadata"]["labels"]["dash"] == "yes"


def test_every_alert_has_a_runbook_section_and_parses(monitored: dict[str, Any]) -> None:
    rules = alerts(monitored["rules"])
    names = {r["alert"] for r in rules}
    assert names == {
        "HookbridgeCallbacksFailing",
        "HookbridgeOldestPendingDelivery",
        "HookbridgeVendorPaused",
        "HookbridgePollLatenessHigh",
        "HookbridgeSubscriptionAutoDisabled",
        "HookbridgeRedisUnreachable",
        "HookbridgeNoWorkerAlive",
        "HookbridgeOutboxStranded",
        "HookbridgeApiErrors",
        "HookbridgeApiLatencyHigh",
        "HookbridgeFailedRunsSpike",
        "HookbridgeRunTimeoutsSpike",
    }
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith(("## ", "### "))
    }
    for rule in rules:
        promql_parser.parse(rule["expr"])
        url = rule["annotations"]["runbook_url"]
        # The repository's own docs, relative by default: no guessed host that may not exist.
        assert url.split("#", 1)[0] == "docs/operations.md", url
        assert (ROOT / url.split("#", 1)[0]).is_file()
        assert url.split("#", 1)[1] in headings, f"{rule['alert']}: no section {url} in docs/operations.md"
        assert rule["labels"]["severity"] and rule["annotations"]["summary"]


def test_runbook_links_follow_a_published_base(chart: helm.Chart) -> None:
    base = "https://git.example.org/platform/hookbridge/blob/main/docs/operations.md"
    (rule,) = render(chart, {"monitoring": {"rules": {"enabled": True, "runbookBaseUrl": base}}}).of_kind(
        "PrometheusRule"
    )
    urls = [r["annotations"]["runbook_url"] for r in alerts(rule)]
    assert urls and all(u.startswith(base + "#hookbridge") for u in urls)


PROMTOOL = shutil.which("promtool")
PROMTOOL_TESTS = Path(__file__).resolve().parent / "promtool" / "alerts_test.yaml"


@pytest.mark.skipif(PROMTOOL is None, reason="no promtool (apt-get install prometheus)")
def test_promtool_unit_tests_cover_every_alert(chart: helm.Chart, tmp_path: Path) -> None:
    """``promtool test rules`` on the rules the chart renders with its defaults: each alert fires on the
    series that should wake someone (with its labels and annotations) and stays quiet on a near miss."""
    assert PROMTOOL is not None
    (rule,) = render(chart, {"monitoring": {"rules": {"enabled": True}}}).of_kind("PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(PROMTOOL_TESTS, tmp_path / "alerts_test.yaml")
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    done = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", PROMTOOL_TESTS.read_text()))
    assert tested >= {
        "HookbridgeNoWorkerAlive",
        "HookbridgeOutboxStranded",
        "HookbridgeApiErrors",
        "HookbridgeApiLatencyHigh",
        "HookbridgeFailedRunsSpike",
        "HookbridgeRunTimeoutsSpike",
    }


def test_alert_thresholds_come_from_values(chart: helm.Chart) -> None:
    values = {
        "monitoring": {
            "rules": {
                "enabled": True,
                "callbacksFailing": {"ratio": 0.25, "for": "3m", "severity": "page"},
                "oldestPendingDelivery": {"minutes": 7, "severity": "warning"},
                "vendorPaused": {"minutes": 11, "severity": "warning"},
                "pollLatenessP99": {"seconds": 13, "for": "4m", "severity": "warning"},
                "redisUnreachable": {"for": "90s", "severity": "critical"},
            }
        }
    }
    (rule,) = render(chart, values).of_kind("PrometheusRule")
    by_name = {r["alert"]: r for r in alerts(rule)}

    def threshold(name: str) -> float:
        expr = promql_parser.parse(by_name[name]["expr"])
        assert isinstance(expr, promql_parser.BinaryExpr)
        return float(expr.rhs.val)

    assert threshold("HookbridgeCallbacksFailing") == 0.25
    assert by_name["HookbridgeCallbacksFailing"]["for"] == "3m"
    assert by_name["HookbridgeCallbacksFailing"]["labels"]["severity"] == "page"
    assert threshold("HookbridgeOldestPendingDelivery") == 7 * 60
    assert by_name["HookbridgeVendorPaused"]["for"] == "11m"
    assert threshold("HookbridgePollLatenessHigh") == 13
    assert by_name["HookbridgeRedisUnreachable"]["for"] == "90s"


def exported_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def known(name: str, exported: set[str]) -> bool:
    return name in exported or any(
        name.endswith(suffix) and name[: -len(suffix)] + "_count" in exported for suffix in HISTOGRAM_SUFFIXES
    )


async def test_every_expression_names_only_exported_metrics(
    monitored: dict[str, Any], make_stack: StackFactory, make_receiver: ReceiverFactory
) -> None:
    receiver = await make_receiver()
    stack = await make_stack()
    await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient")
    await stack.wait_status(run["id"], "succeeded")
    await eventually(lambda: _ready(receiver.events("run.succeeded")), what="the callback")
    assert stack.worker is not None
    await stack.worker._observe(int(time.time() * 1000))  # what the heartbeat does every 5 s

    assert (await stack.api.get("/readyz")).status_code == 200  # as the kubelet's readiness probe does
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=stack.worker.health_app()), base_url="http://worker"
    ) as worker:

        async def delivered() -> set[str] | None:
            names = exported_names((await worker.get("/metrics")).text)
            return names if "hookbridge_deliveries_total" in names else None

        exported = await eventually(delivered, what="delivery metrics")
    exported |= exported_names((await stack.api.get("/metrics")).text)

    exprs = [r["expr"] for r in alerts(monitored["rules"])]
    exprs += dashboard_exprs(dashboard_json(monitored["dashboard"]))
    referenced = {name for expr in exprs for name in metric_names(expr)}
    assert referenced, "no metric found in the expressions"
    missing = {name for name in referenced if not known(name, exported)}
    assert not missing, f"expressions name metrics that /metrics does not export: {sorted(missing)}"
    # Histograms are referenced by their series, never by the bare family name.
    assert not referenced & {"hookbridge_poll_lateness_seconds", "hookbridge_delivery_latency_seconds"}


async def _ready(value: object) -> object:
    return value


def sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


async def test_per_client_metrics_after_real_work(
    make_stack: StackFactory, make_receiver: ReceiverFactory
) -> None:
    """alice's receiver keeps failing, bob's answers 410 once; alice disables one subscription herself."""
    failing, gone, fine = await make_receiver(), await make_receiver(), await make_receiver()
    failing.answers = [500] * 1000
    gone.answers = [410]
    stack = await make_stack(HOOKBRIDGE_RETRY_SCHEDULE="100ms,30s,30s")
    await stack.subscribe(failing.url)
    owned = await stack.subscribe(fine.url)
    patched = await stack.api.patch(f"/v1/subscriptions/{owned['id']}", json={"disabled": True})
    assert patched.status_code == 200, patched.text
    bob_sub = await stack.bob.post("/v1/subscriptions", json={"url": gone.url})
    assert bob_sub.status_code == 201
    await stack.submit("nutrient")
    bob_run = await stack.bob.post(
        "/v1/runs",
        json={
            "vendor": "nutrient",
            "document": {
                "content_base64": "JVBERi0xLjQgYm9i",
                "filename": "b.pdf",
                "media_type": "application/pdf",
            },
        },
    )
    assert bob_run.status_code == 202
    assert stack.worker is not None
    worker = stack.worker

    async def scraped() -> str | None:
        await worker._observe(int(time.time() * 1000))
        text = metrics.render().decode()
        alice_retries = (
            sample(text, "hookbridge_delivery_attempts_total", outcome="retry", client="alice") or 0
        )
        bob_gone = sample(text, "hookbridge_deliveries_total", outcome="gone", client="bob") or 0
        auto = sample(text, "hookbridge_subscriptions_disabled", client="bob", reason="auto") or 0
        return text if alice_retries >= 1 and bob_gone >= 1 and auto >= 1 else None

    text = await eventually(scraped, timeout=30, what="alice's retries and bob's 410")
    assert (
        sample(text, "hookbridge_runs_total", vendor="nutrient", status="succeeded", client="alice") or 0
    ) >= 1
    assert (
        sample(text, "hookbridge_runs_total", vendor="nutrient", status="succeeded", client="bob") or 0
    ) >= 1
    # alice's failing delivery is pending, so her oldest pending delivery has an age; nobody else's.
    assert (sample(text, "hookbridge_oldest_pending_delivery_seconds", client="alice") or 0) > 0
    assert sample(text, "hookbridge_oldest_pending_delivery_seconds", client="bob") == 0
    assert sample(text, "hookbridge_oldest_pending_delivery_seconds", client="other") == 0
    assert sample(text, "hookbridge_subscriptions_disabled", client="alice", reason="owner") == 1
    assert sample(text, "hookbridge_subscriptions_disabled", client="alice", reason="auto") == 0
    assert sample(text, "hookbridge_subscriptions_disabled", client="bob", reason="owner") == 0
    assert sample(text, "hookbridge_redis_up") == 1
    # No run or subscription id ever becomes a label.
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            for value in s.labels.values():
                assert not value.startswith(("run_", "sub_", "dlv_", "evt_")), (s.name, s.labels)


def test_unknown_clients_share_one_label() -> None:
    metrics.set_clients(["alice", "bob"])
    assert metrics.client_label("alice") == "alice"
    assert metrics.client_label("mallory") == metrics.OTHER_CLIENT == "other"
    assert metrics.client_label(None) == "other"
    assert metrics.client_label("") == "other"


async def test_vendor_pause_is_exported_from_the_shared_pause(make_stack: StackFactory) -> None:
    """A 429 recorded in Redis (as any worker's budget writes it) shows as paused on every worker."""
    stack = await make_stack()
    assert stack.worker is not None
    now = int(time.time() * 1000)
    await stack.worker.store.limits.pause_limited("uptiq", now, 60_000, 1000, 120_000, None)
    await stack.worker._observe(now)
    text = metrics.render().decode()
    assert sample(text, "hookbridge_vendor_paused", vendor="uptiq") == 1
    assert 59 <= (sample(text, "hookbridge_vendor_pause_remaining_seconds", vendor="uptiq") or 0) <= 60
    assert sample(text, "hookbridge_vendor_paused", vendor="nutrient") == 0
    await stack.worker.store.redis.delete(keys.vendor_pause("uptiq"))
    await stack.worker._observe(now)
    assert sample(metrics.render().decode(), "hookbridge_vendor_paused", vendor="uptiq") == 0


async def test_a_malformed_delivery_does_not_break_the_sample(make_stack: StackFactory) -> None:
    """A record the sample cannot read is skipped; the others still count."""
    stack = await make_stack(worker=True)
    assert stack.worker is not None
    now = int(time.time() * 1000)
    r = stack.worker.store.redis
    await r.hset(
        keys.delivery("dlv_bad"), mapping={"client": "alice", "created": "soon", "status": "pending"}
    )
    await r.hset(
        keys.delivery("dlv_old"), mapping={"client": "bob", "created": now - 90_000, "status": "pending"}
    )
    for dlv_id in ("dlv_bad", "dlv_old"):
        await r.zadd(keys.due_deliveries(keys.shard_of(dlv_id)), {dlv_id: now + 60_000})
    await stack.worker._observe(now)
    text = metrics.render().decode()
    assert sample(text, "hookbridge_oldest_pending_delivery_seconds", client="alice") == 0
    assert sample(text, "hookbridge_oldest_pending_delivery_seconds", client="bob") == 90


async def test_redis_down_is_exported(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    assert (await stack.api.get("/readyz")).status_code == 200
    assert sample(metrics.render().decode(), "hookbridge_redis_up") == 1
    down = await make_stack(worker=False, HOOKBRIDGE_REDIS_URL="redis://127.0.0.1:9/0")
    assert (await down.api.get("/readyz")).status_code == 503
    assert sample(metrics.render().decode(), "hookbridge_redis_up") == 0


@pytest.mark.parametrize("monitor", [False, True])
def test_split_workers_scale_each_on_its_own_queues(chart: helm.Chart, monitor: bool) -> None:
    values = load_values("worker-split")
    values["serviceMonitor"] = {"enabled": monitor}
    release = render(chart, values)
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in release.of_kind("ScaledObject")}
    assert (
        set(scaled)
        == set(release.workers)
        == {"hb-hookbridge-worker-runs", "hb-hookbridge-worker-deliveries"}
    )
    for name, obj in scaled.items():
        (trigger,) = obj["spec"]["triggers"]
        query = trigger["metadata"]["query"]
        assert metric_names(query) == {"hookbridge_ready_jobs"}
        matchers = {
            (m.name, str(m.op), m.value) for m in _selector(promql_parser.parse(query)).matchers.matchers
        }
        queue = [m for m in matchers if m[0] == "queue"]
        assert len(queue) == 1, query
        _, op, value = queue[0]
        assert value == "deliveries"
        assert ("!=" in op or "NotEqual" in op) == name.endswith("-runs"), (name, op)
    for deployment in (release.get("Deployment", n) for n in release.workers):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        role = {e["name"]: e.get("value") for e in container["env"]}["HOOKBRIDGE_WORKER_ROLE"]
        assert deployment["metadata"]["name"].endswith(f"-{role}")
        assert deployment["spec"]["selector"]["matchLabels"]["hookbridge.io/worker-role"] == role
    pdbs = sorted(p["metadata"]["name"] for p in release.of_kind("PodDisruptionBudget"))
    assert pdbs == sorted(["hb-hookbridge-api", *release.workers])


def _selector(node: Any) -> Any:
    while not isinstance(node, promql_parser.VectorSelector):
        node = node.expr
    return node


def test_split_refuses_a_role_in_config(chart: helm.Chart) -> None:
    values = load_values("worker-split")
    values["config"] = {"WORKER_ROLE": "runs"}
    with pytest.raises(Exception, match=r"worker\.split sets each worker Deployment"):
        render(chart, values)


async def test_a_delivery_parked_behind_its_subscriptions_limit_still_counts_as_pending(
    make_stack: StackFactory,
) -> None:
    """A subscription at its in-flight limit parks its surplus out of the due set: the oldest pending
    delivery may be there, and the gauge must still see it."""
    stack = await make_stack(worker=True)
    assert stack.worker is not None
    now = int(time.time() * 1000)
    r = stack.worker.store.redis
    await r.zadd(keys.client_subs("alice"), {"sub_x": now})
    await r.hset(
        keys.delivery("dlv_parked"),
        mapping={"client": "alice", "created": now - 120_000, "status": "pending"},
    )
    await r.zadd(keys.sub_parked("sub_x"), {"dlv_parked": now - 120_000})
    await stack.worker._observe(now)
    text = metrics.render().decode()
    assert sample(text, "hookbridge_oldest_pending_delivery_seconds", client="alice") == 120


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, "2xx"),
        (204, "2xx"),
        (301, "3xx"),
        (404, "4xx"),
        (499, "4xx"),
        (503, "5xx"),
        (0, "5xx"),
        (700, "5xx"),
    ],
)
def test_status_class(status: int, expected: str) -> None:
    assert metrics.status_class(status) == expected


async def test_operator_metrics_are_exported_with_bounded_labels(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    await stack.api.get("/v1/runs/run_01M8T97W20N73P4R43T4DBAFSD")  # a raw id: counted under its template
    text = (await stack.api.get("/metrics")).text
    for name in (
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_info",
        "python_gc_objects_collected_total",
    ):
        assert sample(text, name) is not None, name
    assert sample(text, "hookbridge_build_info", version=metrics.__version__) == 1
    routes = {
        s.labels["route"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "hookbridge_api_request_duration_seconds_count"
    }
    assert "/v1/runs/{run_id}" in routes and not [r for r in routes if "run_01" in r]
