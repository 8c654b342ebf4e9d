"""Writes what is generated from the settings table (`service.config.settings.table()`): the `config` section of
helm/hookbridge/values.schema.json, and the README's configuration table between its markers.

One source for the setting names, bounds and docs: the table `load()` reads. The schema lists those
settings less the ones the chart sets from other values (Redis, the worker's metrics address, the shutdown
graces) and the secrets (which go in the Secret), and refuses any other key under `config`, so a typo fails
`helm install` instead of crash-looping the pods.

    python helm/generate_schema.py          # rewrite both (`make schema`)
    python helm/generate_schema.py --check  # exit 1 when either committed file is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "helm" / "hookbridge" / "values.schema.json"
README = ROOT / "README.md"
BEGIN = "<!-- settings table: generated from service/config/settings.py by `make schema`; do not edit by hand -->"
END = "<!-- end of the settings table -->"
sys.path.insert(0, str(ROOT))

from service.config import settings  # noqa: E402
from service.vendors import registry  # noqa: E402

# Set by the chart from redis.*, api.* and worker.*; a `config` key would fight them.
CHART_MANAGED = frozenset(
    {
        "REDIS_URL",
        "REDIS_SENTINELS",
        "REDIS_SENTINEL_MASTER",
        "REDIS_CLUSTER_NODES",
        "REDIS_USERNAME",
        "REDIS_SENTINEL_USERNAME",
        "REDIS_TLS",
        "REDIS_SENTINEL_TLS",
        "REDIS_TLS_CA_FILE",
        "REDIS_TLS_VERIFY",
        "REDIS_EMBEDDED_DIR",
        "WORKER_METRICS_PORT",
        "WORKER_METRICS_HOST",
        "SHUTDOWN_GRACE_S",
    }
)


def is_secret(name: str) -> bool:
    return settings.is_secret(name)


def _own_vendors() -> dict[str, Any]:
    """hookbridge's own vendors: a plugin installed in this venv does not change the committed files."""
    return {
        name: spec
        for name, spec in registry.vendors().items()
        if getattr(spec.build, "__module__", "").startswith("service.")
    }


def config_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for row in settings.table(_own_vendors()):
        name = row.name.removeprefix(settings.PREFIX)
        if name in CHART_MANAGED or row.secret:
            continue
        prop: dict[str, Any] = {
            "description": (
                f"{row.name}: {row.setting.doc} (application default {settings.show(row.default)!r})"
            ),
            "type": ["string", "number", "boolean", "null"],
        }
        choices = getattr(row.setting.parse, "choices", None)
        if choices:
            prop = {
                "description": prop["description"],
                "enum": [*choices, *(c.upper() for c in choices), None],
            }
        properties[name] = prop
    return {
        "type": "object",
        "description": (
            "Non-secret settings, rendered as HOOKBRIDGE_<KEY> in the ConfigMap. Generated from "
            "service/config/settings.py by helm/generate_schema.py: do not edit by hand."
        ),
        "properties": dict(sorted(properties.items())),
        "additionalProperties": False,
    }


_KEY = {"type": "string", "pattern": "^([-._a-zA-Z0-9]+)?$"}
_VALUE = {"type": ["string", "number", "boolean", "null"]}


def _vendor_schema(description: str, settings: dict[str, Any] | None) -> dict[str, Any]:
    if settings is None:  # a plugin's: any upper-case name but the key, which is a secret
        own: dict[str, Any] = {
            "type": "object",
            "propertyNames": {"pattern": "^[A-Z][A-Z0-9_]{0,40}$", "not": {"const": "API_KEY"}},
            "additionalProperties": _VALUE,
        }
    else:
        own = {"type": "object", "properties": settings, "additionalProperties": False}
    return {
        "type": ["object", "null"],
        "description": description,
        "properties": {
            "apiKey": {"type": "string", "description": "put in the chart's Secret"},
            "existingSecret": {"type": "string", "description": "a Secret of yours holding the key"},
            "key": {**_KEY, "description": "the key in that Secret (default HOOKBRIDGE_<NAME>_API_KEY)"},
            "settings": {**own, "description": "HOOKBRIDGE_<NAME>_<SETTING>, in the ConfigMap"},
        },
        "additionalProperties": False,
    }


def vendors_schema() -> dict[str, Any]:
    """``vendors.<name>``: each own vendor with its non-secret settings, and any other (a plugin's)."""
    own = _own_vendors()
    properties: dict[str, Any] = {}
    for name, spec in own.items():
        settings_of: dict[str, Any] = {}
        head = f"{settings.PREFIX}{name.upper()}_"
        for row in settings.table({name: spec}):
            if row.owner != name or row.secret:
                continue
            setting = row.name.removeprefix(head)
            settings_of[setting] = {
                "description": f"{row.name}: {row.setting.doc} (default {settings.show(row.default)!r})",
                **_VALUE,
            }
        properties[name] = _vendor_schema(spec.description or name, dict(sorted(settings_of.items())))
    return {
        "type": "object",
        "description": (
            "Each vendor by name: its API key from a Secret, and its settings. Generated from "
            "service/config/settings.py by helm/generate_schema.py: do not edit by hand."
        ),
        "propertyNames": {"pattern": "^[a-z][a-z0-9_]{0,30}$"},
        "properties": properties,
        "additionalProperties": _vendor_schema("a vendor plugin's", None),
    }


def render() -> str:
    schema = json.loads(SCHEMA.read_text())
    schema["properties"]["config"] = config_schema()
    schema["properties"]["vendors"] = vendors_schema()
    return json.dumps(schema, indent=2) + "\n"


def render_readme() -> str:
    text = README.read_text()
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{README}: the settings table markers are missing")
    return head + BEGIN + "\n\n" + settings.markdown_table(_own_vendors()) + "\n" + END + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a committed file is stale")
    args = parser.parse_args(argv)
    outputs = {SCHEMA: render(), README: render_readme()}
    if args.check:
        stale = [path for path, text in outputs.items() if path.read_text() != text]
        for path in stale:
            print(f"{path} is out of date: run make schema (python helm/generate_schema.py)", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
