"""What a kubelet does to start a container, without a cluster: the argv and the environment.

- argv: the container's ``command`` (else the image's ENTRYPOINT) followed by its ``args`` (else the image's
  CMD), with ``$(VAR)`` references expanded.
- environment, in kubelet's order (later wins): the image's ENV, the service-link variables of every
  Service in the namespace unless the pod sets ``enableServiceLinks: false``, then ``envFrom`` (ConfigMaps
  and Secrets, with their prefix), then ``env`` (values with ``$(VAR)`` expansion, ``secretKeyRef`` and
  ``configMapKeyRef``; a missing required reference is CreateContainerConfigError).
- Secret and ConfigMap volumes are written out to a local directory; paths under their mount points in
  argv or environment are rewritten to it (the one liberty taken: no mount namespace here).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class CreateContainerConfigError(Exception):
    """What the kubelet reports when a referenced ConfigMap, Secret or key is missing."""


@dataclass(frozen=True)
class Image:
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]


def image_from_dockerfile(path: Path = ROOT / "Dockerfile") -> Image:
    """ENTRYPOINT, CMD and ENV of the Dockerfile's final stage (exec forms only, as ours uses)."""
    text = path.read_text()
    final = text[text.rindex("\nFROM ") :]
    final = re.sub(r"\\\n\s*", " ", final)
    entry = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", final, re.M)
    cmd = re.search(r"^CMD\s+(\[.*\])\s*$", final, re.M)
    env: dict[str, str] = {}
    for line in re.findall(r"^ENV\s+(.*)$", final, re.M):
        for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', line):
            env[key] = value.strip('"')
    return Image(json.loads(entry.group(1)) if entry else [], json.loads(cmd.group(1)) if cmd else [], env)


@dataclass
class Cluster:
    """The objects a namespace holds: what the chart rendered plus what the operator made beforehand."""

    namespace: str
    objects: list[dict[str, Any]]
    external_secrets: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> key -> text

    def secret(self, name: str) -> dict[str, str] | None:
        for obj in self.objects:
            if obj["kind"] == "Secret" and obj["metadata"]["name"] == name:
                data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
                return data | dict(obj.get("stringData") or {})
        return self.external_secrets.get(name)

    def config_map(self, name: str) -> dict[str, str] | None:
        for obj in self.objects:
            if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == name:
                return dict(obj.get("data") or {})
        return None

    def service_link_env(self) -> dict[str, str]:
        """The variables kubelet injects for each Service with a cluster IP (pkg/kubelet/envvars)."""
        services = [o for o in self.objects if o["kind"] == "Service"]
        env: dict[str, str] = {}
        # The API server's own Service exists in every cluster (its links appear in every namespace).
        kubernetes = {
            "metadata": {"name": "kubernetes"},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
        }
        for index, service in enumerate([kubernetes, *services]):
            spec = service["spec"]
            if spec.get("clusterIP") == "None" or spec.get("type") == "ExternalName":
                continue
            ip = str(ipaddress.ip_address("10.96.0.1") + index)
            prefix = service["metadata"]["name"].upper().replace("-", "_")
            ports = spec["ports"]
            env[f"{prefix}_SERVICE_HOST"] = ip
            env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
            for port in ports:
                if port.get("name"):
                    env[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
            first = ports[0]
            env[f"{prefix}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{ip}:{first['port']}"
            for port in ports:
                proto = port.get("protocol", "TCP")
                base = f"{prefix}_PORT_{port['port']}_{proto}"
                env[base] = f"{proto.lower()}://{ip}:{port['port']}"
                env[f"{base}_PROTO"] = proto.lower()
                env[f"{base}_PORT"] = str(port["port"])
                env[f"{base}_ADDR"] = ip
        return env


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined name is replaced, an undefined one kept, $$ escapes."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REF.sub(sub, text)


@dataclass
class Process:
    argv: list[str]
    env: dict[str, str]
    files: dict[str, str]  # mount path -> local directory


def assemble(
    pod: dict[str, Any], container: dict[str, Any], cluster: Cluster, image: Image, files_root: Path
) -> Process:
    env: dict[str, str] = dict(image.env)
    if pod.get("enableServiceLinks", True):
        env |= cluster.service_link_env()
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            ref, data = source["configMapRef"], cluster.config_map(source["configMapRef"]["name"])
        else:
            ref, data = source["secretRef"], cluster.secret(source["secretRef"]["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise CreateContainerConfigError(f"envFrom: {ref['name']} not found")
        env |= {prefix + k: v for k, v in data.items()}
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = expand(str(entry["value"]), env)
            continue
        source = entry.get("valueFrom", {})
        if "secretKeyRef" in source:
            ref, data = source["secretKeyRef"], cluster.secret(source["secretKeyRef"]["name"])
        elif "configMapKeyRef" in source:
            ref, data = source["configMapKeyRef"], cluster.config_map(source["configMapKeyRef"]["name"])
        else:
            raise CreateContainerConfigError(f"env {name}: unsupported source {source}")
        if data is None or ref["key"] not in data:
            if ref.get("optional"):
                continue
            raise CreateContainerConfigError(f"env {name}: {ref['name']}/{ref['key']} not found")
        env[name] = data[ref["key"]]

    files = _write_volumes(pod, container, cluster, files_root)
    command = container.get("command") or image.entrypoint
    args = container.get("args") if "args" in container else ([] if container.get("command") else image.cmd)
    argv = [expand(a, env) for a in [*command, *args]]
    for mount, local in files.items():
        argv = [a.replace(mount, local, 1) if a.startswith(mount) else a for a in argv]
        env = {k: v.replace(mount, local, 1) if v.startswith(mount) else v for k, v in env.items()}
    return Process(argv, env, files)


def _write_volumes(
    pod: dict[str, Any], container: dict[str, Any], cluster: Cluster, root: Path
) -> dict[str, str]:
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    files: dict[str, str] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "secret" in volume:
            source, data = volume["secret"], cluster.secret(volume["secret"]["secretName"])
        elif "configMap" in volume:
            source, data = volume["configMap"], cluster.config_map(volume["configMap"]["name"])
        else:
            continue  # emptyDir and the like: nothing to carry over
        if data is None:
            raise CreateContainerConfigError(f"volume {mount['name']}: its source is missing")
        local = root / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            if item["key"] not in data:
                raise CreateContainerConfigError(f"volume {mount['name']}: key {item['key']} missing")
            (local / item["path"]).write_text(data[item["key"]])
        files[mount["mountPath"]] = str(local)
    return files
