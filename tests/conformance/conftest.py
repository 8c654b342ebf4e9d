"""The test plugin (tests/plugins/parrot) installed as a real package, kept out of every other test.

``pip install --target`` puts it, with its entry point, into a directory of this session's own; only the
tests that ask for :func:`parrot_plugin` see that directory on ``sys.path``, so the registry (which reads
the entry points of ``sys.path``) finds a fourth vendor there and nowhere else: the venv, the other tests'
settings and the production image never hold it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PLUGIN_SOURCE = Path(__file__).parent.parent / "plugins" / "parrot"


def _can_build_offline() -> bool:
    """Whether the venv's setuptools can build a wheel (it can by itself from 70.1, else with wheel)."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    if importlib.util.find_spec("wheel") is not None:
        return True
    from importlib.metadata import version

    major, minor, *_ = (int(p) if p.isdigit() else 0 for p in [*version("setuptools").split("."), "0"])
    return (major, minor) >= (70, 1)


@pytest.fixture(scope="session")
def parrot_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("parrot")
    source = work / "src"
    target = work / "site"
    # Built from a copy, so that the build leaves nothing in the source tree.
    shutil.copytree(PLUGIN_SOURCE, source)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    if _can_build_offline():
        command.append("--no-build-isolation")  # build with the venv's own setuptools
    result = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert list(target.glob("hookbridge_parrot-*.dist-info/entry_points.txt")), list(target.iterdir())
    return target


@pytest.fixture
def parrot_plugin(parrot_installed: Path) -> Iterator[Path]:
    sys.path.insert(0, str(parrot_installed))
    try:
        yield parrot_installed
    finally:
        sys.path.remove(str(parrot_installed))
        for name in [
            m for m in sys.modules if m == "hookbridge_parrot" or m.startswith("hookbridge_parrot.")
        ]:
            del sys.modules[name]
