"""The document as a TypeScript team uses it: ``openapi-typescript`` makes the types, and every request
example of the document compiles against them under ``tsc --strict``.

Node comes from the system (``.ci/run`` installs it where ``npx`` is missing); the two tools from the npm
registry through ``npx``, pinned to a major version so that npx's cache (``~/.npm/_npx``) serves every run
after the first (``--prefer-offline``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from service.api import models
from service.api.openapi import document
from service.vendors.registry import load_settings
from tests.conftest import base_env

NPX = shutil.which("npx")
pytestmark = pytest.mark.skipif(NPX is None, reason="npx (Node.js) is not installed")


def _npx(*args: str, cwd: Path) -> None:
    assert NPX is not None
    done = subprocess.run(
        [NPX, "--yes", "--prefer-offline", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _examples(doc: dict[str, Any]) -> str:
    """Each JSON request example of the document, typed as its operation's request body."""
    lines = ['import type { paths } from "./api";']
    for path, item in doc["paths"].items():
        for method, op in item.items():
            content = (
                op.get("requestBody", {}).get("content", {}).get("application/json", {})
                if method != "parameters"
                else {}
            )
            for name, example in content.get("examples", {}).items():
                # NonNullable: an optional body (the test event's) is typed `... | undefined`.
                request = f'NonNullable<paths["{path}"]["{method}"]["requestBody"]>'
                body = f'{request}["content"]["application/json"]'
                lines.append(
                    f"export const {op['operationId']}_{name}: {body} = {json.dumps(example['value'])};"
                )
    return "\n".join(lines) + "\n"


def test_the_documents_examples_compile_against_its_typescript_types(tmp_path: Path) -> None:
    doc = document(models.build(load_settings(base_env("redis://127.0.0.1:9"))))
    (tmp_path / "openapi.json").write_text(json.dumps(doc))
    examples = _examples(doc)
    assert examples.count("export const") >= 5
    (tmp_path / "examples.ts").write_text(examples)
    _npx("openapi-typescript@7", "openapi.json", "-o", "api.d.ts", cwd=tmp_path)
    _npx(
        "-p", "typescript@5", "tsc", "--strict", "--noEmit", "--target", "es2020", "examples.ts", cwd=tmp_path
    )
