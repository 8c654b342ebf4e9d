"""The import graph of service/: no cycle, and every arrow points down the layers.

Every import statement counts, the ones under ``if TYPE_CHECKING:`` and inside functions included: a type
import is a dependency a reader has to follow too, and it turns into a runtime cycle the day someone
needs the name at run time.

The graph is read with ``ast`` in a child process: CPython 3.11.7's ``ast.parse`` of the larger modules
fails inside pytest ("recursion depth mismatch", see test_layout.py).
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A room is a top-level package (or module) of service/. A room may import its own modules and rooms of a
# lower layer, never one of its own layer or above (docs/architecture.md draws them).
LAYERS: dict[str, int] = {
    "service": 0,  # the package itself: __version__
    # Statuses, records, public shapes, the lifecycle's transitions, the trail, and the decisions: pure.
    "core": 1,
    "config": 2,  # every setting declared once
    "observability": 3,  # logs, metrics, traces
    "store": 4,  # every Redis key and atomic change
    "vendors": 5,  # the vendor protocol and its adapters
    "serving": 5,  # uvicorn as hookbridge runs it
    "console": 5,  # the console's static files
    "delivery": 6,  # signing and sending one callback
    "worker": 7,  # claim, call, decide, apply
    "api": 7,  # the REST API
    "simulator": 8,  # the vendors' simulators
    "dev": 9,  # dev and demo: everything in one process
    # The conformance kit (fixtures over the API, the worker, the simulator and the dev servers): nothing
    # in the service imports it; tests and vendor plugins do.
    "testing": 10,
    "cli": 10,  # the composition root
    "__main__": 11,
}

Edge = tuple[str, str]


def import_graph(root: Path) -> list[Edge]:
    """Module -> module edges in ``root/service`` (``service.store.codec`` -> ``service.core.records``)."""
    service = root / "service"
    modules: dict[str, Path] = {}
    for path in service.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    edges: set[Edge] = set()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                # ``from service.store import keys`` imports the module keys; ``import Store``, the package.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("service") and target != name:
                    edges.add((name, target))
    return sorted(edges)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def upward(edges: list[Edge]) -> set[Edge]:
    """Room -> room arrows to the same layer or above."""
    return {(room(a), room(b)) for a, b in edges if room(a) != room(b) and LAYERS[room(b)] >= LAYERS[room(a)]}


@functools.cache
def _service_graph() -> list[Edge]:
    code = "from tests.unit.test_layers import ROOT, import_graph as g, json; print(json.dumps(g(ROOT)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return [(a, b) for a, b in json.loads(out.stdout)]


def test_no_module_imports_itself_back_through_others() -> None:
    assert cycles(_service_graph()) == []


def test_no_room_imports_itself_back() -> None:
    rooms = {(room(a), room(b)) for a, b in _service_graph() if room(a) != room(b)}
    assert cycles(sorted(rooms)) == []


def test_every_arrow_points_down_the_layers() -> None:
    edges = _service_graph()
    assert {room(m) for edge in edges for m in edge} <= set(LAYERS), "place the new module in LAYERS"
    assert upward(edges) == set()


def test_the_graph_sees_type_imports_and_the_checks_see_a_circle() -> None:
    edges = _service_graph()
    # tracing's only import of records is under TYPE_CHECKING.
    assert ("service.observability.tracing", "service.core.records") in edges
    # The circle this test was written against: logs -> tracing -> store -> codec -> logs.
    circle = [
        ("service.observability.logs", "service.observability.tracing"),
        ("service.observability.tracing", "service.store"),
        ("service.store", "service.store.codec"),
        ("service.store.codec", "service.observability.logs"),
    ]
    assert cycles([*edges, *circle]) != []
    assert ("observability", "store") in upward(circle)
