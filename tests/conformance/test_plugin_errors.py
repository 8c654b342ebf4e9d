"""A vendor plugin that cannot be used stops hookbridge at start with one clear line (exit 2, as a bad
setting does), never a traceback or a crash loop of half-started processes."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from service.vendors import registry
from service.vendors.base import VendorSpec
from service.vendors.nutrient import SPEC as NUTRIENT
from service.vendors.registry import load_settings

ROOT = Path(__file__).parent.parent.parent
GROUP = registry.GROUP


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=GROUP)


def test_the_builtins_come_from_hookbridge_own_entry_points() -> None:
    from importlib.metadata import entry_points

    own = {ep.name: ep.value for ep in entry_points(group=GROUP) if ep.dist and ep.dist.name == "hookbridge"}
    assert own == {
        "nutrient": "service.vendors.nutrient:SPEC",
        "cloudsquid": "service.vendors.cloudsquid:SPEC",
        "uptiq": "service.vendors.uptiq:SPEC",
        "azure_di": "service.vendors.azure_di:SPEC",
        "textract": "service.vendors.textract:SPEC",
        "google_docai": "service.vendors.google_docai:SPEC",
    }
    # hookbridge's own first, in their declared order, then the other distributions' by name.
    assert {"azure_di", "cloudsquid", "google_docai", "nutrient", "textract", "uptiq", "llamaparse"} <= set(
        registry.vendors()
    )


def test_llamaparse_comes_from_its_own_distribution() -> None:
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=GROUP) if ep.name == "llamaparse"]
    assert len(found) == 1 and found[0].dist is not None
    assert found[0].dist.name == "hookbridge-llamaparse" and found[0].value == "hookbridge_llamaparse:SPEC"
    assert registry.vendors()["llamaparse"].operations == ("parse",)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_ep("ghost", "no_such_module_anywhere:SPEC"), "cannot be loaded: ModuleNotFoundError"),
        (_ep("ghost", "service.vendors.nutrient:NO_SUCH"), "cannot be loaded: AttributeError"),
        (_ep("ghost", "service.vendors.nutrient:NutrientAdapter"), "not a service.vendors.base.VendorSpec"),
        (
            _ep("ghost", "service.vendors.nutrient:SPEC"),
            "the spec is named 'nutrient' but registered as 'ghost'",
        ),
        (_ep("Bad-Name", "service.vendors.nutrient:SPEC"), "the name must be"),
        (_ep("sim", "service.vendors.nutrient:SPEC"), "and not 'sim'"),
    ],
)
def test_a_broken_plugin_is_named_in_one_line(entry: EntryPoint, message: str) -> None:
    with pytest.raises(registry.PluginError) as caught:
        registry.discover([entry])
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert f"vendor plugin {entry.name!r}" in text


def test_a_spec_that_does_not_hold_together_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import service.vendors.nutrient as nutrient

    broken: VendorSpec = dataclasses.replace(NUTRIENT, operations=())
    monkeypatch.setattr(nutrient, "SPEC", broken)
    with pytest.raises(registry.PluginError, match="operations must be a non-empty tuple"):
        registry.discover([_ep("nutrient", "service.vendors.nutrient:SPEC")])
    monkeypatch.setattr(nutrient, "SPEC", dataclasses.replace(NUTRIENT, defaults="fast"))
    with pytest.raises(registry.PluginError, match="defaults must be a VendorDefaults"):
        registry.discover([_ep("nutrient", "service.vendors.nutrient:SPEC")])


def test_a_duplicate_name_names_both_registrations() -> None:
    with pytest.raises(registry.PluginError, match="registered twice") as caught:
        registry.discover(
            [_ep("nutrient", "service.vendors.nutrient:SPEC"), _ep("nutrient", "acme_nutrient:SPEC")]
        )
    assert "service.vendors.nutrient:SPEC" in str(caught.value) and "acme_nutrient:SPEC" in str(caught.value)


def test_no_vendor_at_all_says_how_to_register_them() -> None:
    with pytest.raises(registry.PluginError, match="no vendor is registered"):
        registry.discover([])


def _distribution(root: Path, name: str, entry_points: str) -> Path:
    """A real (if minimal) installed distribution: what importlib.metadata reads from site-packages."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{entry_points}\n")
    return root


def _start(command: str, site: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    clean["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", "service", command],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["api", "worker", "settings"])
def test_the_cli_refuses_a_broken_plugin_with_one_line(tmp_path: Path, command: str) -> None:
    site = _distribution(tmp_path, "hookbridge-broken", "broken = hookbridge_broken_missing:SPEC")
    done = _start(command, site, HOOKBRIDGE_REDIS_URL="redis://127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("hookbridge: configuration error: vendor plugin 'broken'"), lines
    assert "hookbridge-broken 1.0" in lines[0] and "ModuleNotFoundError" in lines[0], lines


def test_the_cli_refuses_a_second_registration_of_a_name(tmp_path: Path) -> None:
    site = _distribution(tmp_path, "acme-nutrient", "nutrient = service.vendors.uptiq:SPEC")
    done = _start("api", site, HOOKBRIDGE_REDIS_URL="redis://127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "vendor 'nutrient' is registered twice" in done.stderr
    assert "acme-nutrient 1.0" in done.stderr and "hookbridge 0.1.0" in done.stderr, done.stderr


def test_a_plugin_setting_that_clashes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from service.config import settings as settings_mod
    from service.vendors.base import VendorSetting

    def installed(*specs: VendorSpec) -> None:
        monkeypatch.setattr(registry, "vendors", lambda: {s.name: s for s in specs})

    installed(dataclasses.replace(NUTRIENT, settings=(VendorSetting("BASE_URL"),)))
    with pytest.raises(settings_mod.VendorPluginError, match="BASE_URL is one of the common vendor settings"):
        load_settings({})
    # HOOKBRIDGE_REDIS_URL is hookbridge's own: a vendor "redis" may not declare a setting "URL".
    installed(dataclasses.replace(NUTRIENT, name="redis", settings=(VendorSetting("URL"),)))
    with pytest.raises(settings_mod.VendorPluginError, match="HOOKBRIDGE_REDIS_URL is already a setting"):
        load_settings({})
