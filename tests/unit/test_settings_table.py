"""The settings table (service/config/settings.py): every setting declared once, bounded, and refused with its
variable named when it is nonsense; the README's table and the chart's schema generated from it."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import ModuleType

import pytest

from service import cli
from service.config import settings as s
from service.vendors import registry

ROOT = Path(__file__).resolve().parents[2]
VENDORS = registry.vendors()
ROWS = s.table(VENDORS)
NUMERIC = [row for row in ROWS if row.setting.numeric]
# Nonsense for any number: NaN, infinities, zero, negative, huge, empty, a value that rounds to 0 ms,
# Unicode digits (int() and float() take them; Redis and Lua do not).
NONSENSE = ["nan", "inf", "-inf", "0", "-1", "1e300", "", "0.0001", "\uff11\uff10", "\u0661\u0662\u0663"]


def _cli(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """Runs the CLI in this process with exactly ``env`` as its HOOKBRIDGE_ environment."""
    for name in [n for n in list(__import__("os").environ) if n.startswith("HOOKBRIDGE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            cli.main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_every_numeric_setting_is_in_the_nonsense_table() -> None:
    """The parametrization below is generated from the table: a new numeric setting is covered by it
    without an edit here. This pins the ones the issue measured, so the generation cannot go empty."""
    names = {row.name for row in NUMERIC}
    for name in (
        "HOOKBRIDGE_SUBMIT_RATE_PER_S",
        "HOOKBRIDGE_SUBSCRIPTION_DISABLE_AFTER_S",
        "HOOKBRIDGE_SSE_HEARTBEAT_S",
        "HOOKBRIDGE_RETRY_SCHEDULE",
        "HOOKBRIDGE_REDIS_WAIT_TIMEOUT_MS",
        "HOOKBRIDGE_NUTRIENT_MAX_RPS",
        "HOOKBRIDGE_UPTIQ_POLL_INITIAL_S",
    ):
        assert name in names
    assert len(NUMERIC) >= 45


@pytest.mark.parametrize("row", NUMERIC, ids=[row.name for row in NUMERIC])
def test_nonsense_stops_the_cli_with_exit_2_naming_the_variable(
    row: s.Row, monkeypatch: pytest.MonkeyPatch
) -> None:
    zero = getattr(row.setting.parse, "zero", "")
    for value in NONSENSE:
        env = {row.name: value}
        if value == "0" and zero:
            # The table says what 0 means for this one: accepted, and the running configuration shows it.
            code, out, err = _cli(["settings", "--effective"], env, monkeypatch)
            assert code == 0, err
            assert f"{row.name}=0\n" in out
            continue
        # `hookbridge api` as the console script runs it: it never gets past its settings.
        code, _, err = _cli(["api"], env, monkeypatch)
        assert code == 2, (row.name, value)
        assert f"configuration error: {row.name}: " in err, (value, err)
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HOOKBRIDGE_SUBMIT_RATE_PER_S", "nan"),
        ("HOOKBRIDGE_SUBSCRIPTION_DISABLE_AFTER_S", "nan"),
        ("HOOKBRIDGE_SSE_HEARTBEAT_S", "0.0001"),
        ("HOOKBRIDGE_SUBMIT_RATE_PER_S", "1e-300"),
        ("HOOKBRIDGE_NUTRIENT_POLL_MULTIPLIER", "inf"),
        ("HOOKBRIDGE_RETRY_SCHEDULE", "5s,0ms"),
    ],
)
def test_the_measured_cases_are_refused(name: str, value: str) -> None:
    with pytest.raises(s.SettingsError) as info:
        s.load({name: value}, vendors=VENDORS)
    assert str(info.value).startswith(name + ": ")


def test_every_setting_is_declared_once_with_a_doc() -> None:
    names = [row.name for row in ROWS]
    assert len(names) == len(set(names))
    for row in ROWS:
        assert row.setting.doc.strip(), row.name
        assert row.name.startswith("HOOKBRIDGE_") and row.name.isupper()
    # Every Settings field that is a setting carries its declaration; plain fields are the few constants.
    undeclared = {
        f.name
        for f in dataclasses.fields(s.Settings)
        if s._META not in f.metadata and f.init and f.name not in ("redis", "vendors")
    }
    assert undeclared == {"max_metadata_pairs", "max_metadata_value_bytes"}
    # Each default passes its own parser's bounds (a default outside them would be a contradiction).
    for row in NUMERIC:
        if isinstance(row.setting.parse, s.Number):
            assert row.setting.parse(s.show(row.default)) == row.default, row.name


def test_two_clients_with_one_secret_are_refused_and_never_echoed() -> None:
    secret = "correct-horse-battery"
    import hashlib

    hashed = "sha256:" + hashlib.sha256(secret.encode()).hexdigest()
    upper = "sha256:" + hashed.removeprefix("sha256:").upper()
    for keys in (f"a:{secret},b:{secret}", f"a:{secret},b:{hashed}", f"a:{hashed},b:{upper}"):
        with pytest.raises(s.SettingsError) as info:
            s.load({"HOOKBRIDGE_API_KEYS": keys}, vendors={})
        assert str(info.value).startswith("HOOKBRIDGE_API_KEYS: clients a and b have the same secret")
        assert secret not in str(info.value) and hashed not in str(info.value)
    with pytest.raises(s.SettingsError, match="client a: listed twice"):
        s.load({"HOOKBRIDGE_API_KEYS": "a:one,a:two"}, vendors={})
    assert s.load({"HOOKBRIDGE_API_KEYS": "a:one,b:two"}, vendors={}).api_keys == (("a", "one"), ("b", "two"))


def test_choices_are_enums_and_compare_as_their_text() -> None:
    cfg = s.load({"HOOKBRIDGE_LOG_LEVEL": "DEBUG", "HOOKBRIDGE_WORKER_ROLE": "runs"}, vendors={})
    assert cfg.log_level is s.LogLevel.DEBUG and cfg.log_level == "debug"
    assert cfg.worker_role is s.WorkerRole.RUNS and cfg.worker_role == "runs"
    assert s.Settings().log_format is s.LogFormat.CONSOLE


def test_sub_configs_validate_themselves_without_load() -> None:
    """The rules between fields hold for Settings built in code too, not only in load()."""
    with pytest.raises(s.SettingsError, match=r"^HOOKBRIDGE_LEASE_S: "):
        s.Settings(lease_s=10.0)
    with pytest.raises(s.SettingsError, match=r"^HOOKBRIDGE_REDIS_SENTINELS: give one of"):
        s.Settings(redis_url="redis://x", redis_sentinels=(("h", 26379),))
    cfg = s.Settings(retention_s=60.0, progress_min_interval_s=0.0)
    assert cfg.run_policy.retention_s == 60 and cfg.run_policy.progress_min_interval_s == 0
    assert cfg.worker.lease_s == cfg.lease_s and cfg.api_limits.submit_burst == cfg.submit_burst
    assert dataclasses.replace(cfg, submit_burst=3).api_limits.submit_burst == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.run_policy.retention_s = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "env",
    [
        {"HOOKBRIDGE_REDIS_URL": "redis://a:6379", "HOOKBRIDGE_REDIS_CLUSTER_NODES": "a:7000,b:7000"},
        {"HOOKBRIDGE_REDIS_SENTINELS": "a:26379", "HOOKBRIDGE_REDIS_CLUSTER_NODES": "a:7000"},
        {"HOOKBRIDGE_REDIS_URL": "redis://a:6379", "HOOKBRIDGE_REDIS_SENTINELS": "a:26379"},
    ],
)
def test_one_redis_address_at_most(env: dict[str, str]) -> None:
    with pytest.raises(s.SettingsError, match="give one of REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES"):
        s.load(env, vendors={})


def test_redis_cluster_and_wait_are_accepted_at_start() -> None:
    """Contract section 10: REDIS_CLUSTER_NODES is one of the three ways to reach Redis, and
    REDIS_WAIT_REPLICAS is honoured (tests/store/test_wait.py); neither stops `api` or `worker`."""
    from service import cli

    cfg = s.load(
        {
            "HOOKBRIDGE_REDIS_CLUSTER_NODES": "a:7000, b:7001",
            "HOOKBRIDGE_REDIS_WAIT_REPLICAS": "1",
            "HOOKBRIDGE_REDIS_WAIT_TIMEOUT_MS": "250",
        },
        vendors={},
    )
    assert cfg.redis_cluster_nodes == (("a", 7000), ("b", 7001)) and cfg.connection.configured
    assert (cfg.redis_wait_replicas, cfg.redis_wait_timeout_ms) == (1, 250)
    for command in ("api", "worker"):
        cli._require_redis(cfg, command)  # no SystemExit
    with pytest.raises(SystemExit):
        cli._require_redis(s.load({}, vendors={}), "api")


def test_vendor_settings_are_declared_once_for_every_vendor() -> None:
    """A vendor that arrives later (contract section 10: google_docai) gets the common settings, bounded
    the same way, from the one declaration; its own come from its plugin's declaration."""
    from service.vendors.base import VendorSetting

    nutrient = VENDORS["nutrient"]

    def finite_or_not(text: str) -> float:
        return float(text)

    docai = dataclasses.replace(
        nutrient,
        name="google_docai",
        settings=(VendorSetting("PROJECT"), VendorSetting("X", 1.0, finite_or_not)),
    )
    rows = {row.name: row for row in s.table({"google_docai": docai})}
    for suffix in ("BASE_URL", "API_KEY", "POLL_INITIAL_S", "POLL_MAX_S", "MAX_RUN_S", "MAX_RPS", "PROJECT"):
        assert f"HOOKBRIDGE_GOOGLE_DOCAI_{suffix}" in rows
    cfg = s.load(
        {"HOOKBRIDGE_GOOGLE_DOCAI_MAX_RPS": "2.5", "HOOKBRIDGE_GOOGLE_DOCAI_PROJECT": "p"},
        vendors={"google_docai": docai},
    )
    assert cfg.vendor("google_docai").max_rps == 2.5 and cfg.vendor("google_docai").extra["project"] == "p"
    for name, value in (("MAX_RUN_S", "nan"), ("POLL_INITIAL_S", "0"), ("X", "nan")):
        with pytest.raises(s.SettingsError, match=f"^HOOKBRIDGE_GOOGLE_DOCAI_{name}: "):
            s.load({f"HOOKBRIDGE_GOOGLE_DOCAI_{name}": value}, vendors={"google_docai": docai})
    with pytest.raises(s.VendorPluginError, match="the name must match"):
        s.table({"Bad-Name": dataclasses.replace(nutrient, name="Bad-Name")})


def test_reading_settings_does_not_load_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the specs (as the CLI gives them), the loader never touches the registry."""

    def boom() -> dict[str, object]:
        raise AssertionError("the registry was read")

    monkeypatch.setattr(registry, "vendors", boom)
    assert s.load({"HOOKBRIDGE_LEASE_S": "60"}, vendors={}).lease_s == 60
    assert s.table({}) and s.describe({})


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_schema", ROOT / "helm" / "generate_schema.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_schema"] = module
    spec.loader.exec_module(module)
    return module


def test_readme_and_chart_schema_are_generated_from_the_table() -> None:
    gen = _generator()
    assert (ROOT / "README.md").read_text() == gen.render_readme(), "README stale: run make schema"
    assert (ROOT / "helm/hookbridge/values.schema.json").read_text() == gen.render(), (
        "schema stale: make schema"
    )
    readme = (ROOT / "README.md").read_text()
    for row in ROWS:
        if row.owner in ("", "redis"):
            assert f"| `{row.name.removeprefix('HOOKBRIDGE_')}` |" in readme, row.name
    assert "| `{V}_POLL_INITIAL_S` |" in readme and "| `CLOUDSQUID_PROJECT` |" in readme
