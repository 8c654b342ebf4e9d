"""The code's shape in figures (docs/architecture.md); run from the repository root.

    python -m tools.code_figures            # this checkout
    python -m tools.code_figures --json     # the same, as JSON

It reads the code and runs nothing of it. Figures:

- the size (lines, methods) of the classes the core redesign shrank: the store's facade and the worker's step;
- the largest function of ``service/`` and radon's worst cyclomatic complexity;
- the places each run and delivery status is spelled as a literal outside the enums of ``domain``
  (vendor adapters and simulators excluded: there the same words are the vendors' own; a keyword
  argument ``vendor_status=`` is a vendor's word too);
- ``ContextVar``s under ``service/worker`` and ``service/vendors`` (channels across the vendor seam);
- Lua scripts that build a key from data (a key builder call or an ``'hb:' ..`` concatenation);
- class names defined more than once under ``service/``;
- the import graph's circles and upward arrows (``tests/unit/test_layers.py``'s own reading).
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import re
from pathlib import Path
from typing import Any

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "service"
RUN_STATUSES = ("queued", "submitted", "running", "succeeded", "failed", "canceled")
DELIVERY_STATUSES = ("pending", "succeeded", "failed")
VENDOR_WORDS = ("vendors", "simulator")  # a vendor's own status words are not ours
TEST_KIT = "testing"  # the shipped conformance kit reads the API's answers like any client
_KEY_FROM_DATA = re.compile(r"\bk_[a-z_]+\(|['\"]hb:[^'\"]*['\"]\s*\.\.")


def _python_files() -> list[Path]:
    return sorted(p for p in SERVICE.rglob("*.py") if "__pycache__" not in p.parts)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def class_size(name: str) -> dict[str, Any] | None:
    for path in _python_files():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef) and node.name == name:
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                return {"file": str(path.relative_to(ROOT)), "lines": lines, "methods": len(methods)}
    return None


def largest_function() -> dict[str, Any]:
    best: dict[str, Any] = {"lines": 0}
    for path in _python_files():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > best["lines"]:
                    best = {"function": f"{path.relative_to(ROOT)}:{node.name}", "lines": lines}
    return best


def worst_complexity() -> dict[str, Any]:
    worst: dict[str, Any] = {"complexity": 0}
    for path in _python_files():
        for block in cc_visit(path.read_text()):
            if block.complexity > worst["complexity"]:
                name = getattr(block, "fullname", block.name)
                worst = {"function": f"{path.relative_to(ROOT)}:{name}", "complexity": block.complexity}
    return worst


def status_spellings() -> dict[str, int]:
    """Literal spellings of each status outside the enums (Python string constants, Lua quoted words)."""
    counts: collections.Counter[str] = collections.Counter()
    words = set(RUN_STATUSES) | set(DELIVERY_STATUSES)
    for path in _python_files():
        rel = path.relative_to(SERVICE).parts
        if rel[0] in (*VENDOR_WORDS, TEST_KIT) or rel[-1] == "domain.py":
            continue
        seen_vendor: set[int] = set()
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.keyword) and node.arg == "vendor_status":
                seen_vendor.add(id(node.value))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words:
                if id(node) not in seen_vendor:
                    counts[node.value] += 1
    for path in sorted((SERVICE / "store" / "lua").glob("*.lua")):
        for word in words:
            counts[word] += len(re.findall(rf"['\"]{word}['\"]", path.read_text()))
    return {word: counts[word] for word in sorted(words)}


def context_vars() -> list[str]:
    found = []
    for path in _python_files():
        if path.relative_to(SERVICE).parts[0] not in ("worker", "vendors"):
            continue
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "ContextVar"
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def scripts_building_keys() -> list[str]:
    lua = SERVICE / "store" / "lua"
    return sorted(p.name for p in lua.glob("*.lua") if _KEY_FROM_DATA.search(p.read_text()))


def scripts_without_shebang() -> list[str]:
    lua = SERVICE / "store" / "lua"
    return sorted(
        p.name
        for p in lua.glob("*.lua")
        if not p.name.startswith("_") and not p.read_text().startswith("#!lua")
    )


def classes_defined_twice() -> dict[str, list[str]]:
    where: dict[str, list[str]] = collections.defaultdict(list)
    for path in _python_files():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(ROOT)))
    return {name: files for name, files in sorted(where.items()) if len(files) > 1}


def import_graph() -> dict[str, Any]:
    from tests.unit import test_layers as layers

    edges = layers.import_graph(ROOT)
    return {
        "circles": layers.cycles(edges),
        "upward arrows": sorted(layers.upward(edges)),
        "top-level modules": sorted(
            p.stem for p in SERVICE.glob("*.py") if p.stem not in ("__init__", "__main__")
        ),
    }


def figures() -> dict[str, Any]:
    return {
        "Store": class_size("Store"),
        "RunStepper": class_size("RunStepper"),
        "largest function": largest_function(),
        "worst complexity (radon)": worst_complexity(),
        "status spellings outside the enums": status_spellings(),
        "ContextVars in worker/ and vendors/": context_vars(),
        "scripts building a key from data": scripts_building_keys(),
        "scripts without #!lua": scripts_without_shebang(),
        "class names defined twice": classes_defined_twice(),
        "import graph": import_graph(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = figures()
    if args.json:
        print(json.dumps(found, indent=2))
        return
    for name, value in found.items():
        if isinstance(value, dict) and name == "class names defined twice":
            print(f"{name}: {len(value)}")
            for cls, files in value.items():
                print(f"    {cls}: {', '.join(files)}")
        elif isinstance(value, list):
            print(f"{name}: {len(value)} {value}")
        else:
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
