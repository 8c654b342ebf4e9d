"""Writes the `config` section of helm/hookbridge/values.schema.json from service/settings.py.

One source for the setting names: what `service.settings.describe()` lists (the names `load()` accepts),
less those the chart sets from other values (Redis, the worker's metrics address, the shutdown graces)
and the secrets (which go in the Secret). The schema then refuses any other key under `config`, so a
typo fails `helm install` instead of crash-looping the pods.

    python helm/generate_schema.py          # rewrite the schema
    python helm/generate_schema.py --check  # exit 1 when the committed schema is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "helm" / "hookbridge" / "values.schema.json"
sys.path.insert(0, str(ROOT))

from service import settings  # noqa: E402

# Set by the chart from redis.*, api.* and worker.*; a `config` key would fight them.
CHART_MANAGED = frozenset(
    {
        "REDIS_URL",
        "REDIS_SENTINELS",
        "REDIS_SENTINEL_MASTER",
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
# Secrets belong in the Secret, never in the ConfigMap: API keys, vendor keys, passwords, encryption keys.
_SECRET = re.compile(r"(^|_)(API_KEYS?|PASSWORD|ENCRYPTION_KEYS?|SECRET_KEYS?|TOKEN)$")


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def _parser(name: str) -> Any:
    table: dict[str, tuple[str, Any]] = dict(settings._PARSERS)
    for spec in settings._vendor_specs().values():
        table |= {f"{spec.name.upper()}_{k}": v for k, v in settings._vendor_parsers(spec).items()}
    entry = table.get(name)
    return entry[1] if entry else None


def config_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for full_name, default in settings.describe():
        name = full_name.removeprefix(settings.PREFIX)
        if name in CHART_MANAGED or is_secret(name):
            continue
        prop: dict[str, Any] = {
            "description": f"{full_name} (application default {default})",
            "type": ["string", "number", "boolean", "null"],
        }
        choices = getattr(_parser(name), "choices", None)
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
            "service/settings.py by helm/generate_schema.py: do not edit by hand."
        ),
        "properties": dict(sorted(properties.items())),
        "additionalProperties": False,
    }


def render() -> str:
    schema = json.loads(SCHEMA.read_text())
    schema["properties"]["config"] = config_schema()
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed schema is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if SCHEMA.read_text() != text:
            print(f"{SCHEMA} is out of date: run python helm/generate_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
