"""The conformance kit is shipped (service.testing, also hookbridge.testing): a plugin's tests run it from
the plugin's own directory, under the plugin's own pytest configuration (asyncio strict), with hookbridge's
``tests/`` unimportable, the fixtures coming from the kit's ``pytest11`` entry point alone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "hookbridge-llamaparse"

# Blocks ``tests`` (hookbridge's test package) for the whole child, then runs pytest as a plugin's CI would.
_CHILD = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "tests" or name.startswith("tests."):
            raise ModuleNotFoundError("blocked: " + name, name=name)
sys.meta_path.insert(0, Block())
import pytest
code = pytest.main(["-p", "no:cacheprovider", "tests/test_llamaparse_conformance.py",
                    "-k", "registered or succeeded"])
assert not [m for m in sys.modules if m == "tests" or m.startswith("tests.")]
sys.exit(code)
"""


def test_a_plugin_runs_the_kit_from_its_own_directory_without_hookbridges_tests() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], cwd=PLUGIN, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout[-2000:]
    header = done.stdout[:2000]
    assert f"rootdir: {PLUGIN}" in header, header
    assert re.search(r"asyncio: mode=(Mode\.)?strict", header, re.I), header
    assert re.search(r"plugins: .*\bhookbridge-", header), header  # the kit's pytest11 entry point


def test_the_kit_imports_nothing_of_the_projects_tests() -> None:
    kit = [*(ROOT / "service" / "testing").glob("*.py"), *(ROOT / "hookbridge").glob("*.py")]
    assert kit
    for path in kit:
        text = path.read_text()
        assert not re.search(r"^\s*(from|import)\s+tests\b", text, re.M), path


def test_hookbridge_testing_is_the_kit() -> None:
    import hookbridge.testing
    import service.testing

    assert hookbridge.testing.VendorConformance is service.testing.VendorConformance
    assert set(hookbridge.testing.__all__) == set(service.testing.__all__)
