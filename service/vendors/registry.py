"""The vendor registry: every :class:`~service.vendors.base.VendorSpec` installed under the entry point
group ``hookbridge.vendors``.

A vendor is one package that declares, in its ``pyproject.toml``::

    [project.entry-points."hookbridge.vendors"]
    acme = "hookbridge_acme:SPEC"

hookbridge registers its own three the same way, so ``pip install`` of hookbridge (or of a plugin) is all
it takes. The settings (``HOOKBRIDGE_{VENDOR}_*``), the vendor names and operations the API accepts and
the OpenAPI document's enums all come from here.

A plugin that cannot be imported, that is not a ``VendorSpec``, whose spec does not hold together, or that
takes a name another distribution already registered, is a :class:`PluginError`: one line that names the
entry point and its distribution, which the CLI prints as a configuration error (exit 2), as it does for a
bad setting.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points

from service.config import settings as settings_mod
from service.config.settings import Settings, VendorSettings
from service.vendors.base import Kind, KindBudget, VendorDefaults, VendorSetting, VendorSpec

GROUP = "hookbridge.vendors"
OWN_DISTRIBUTION = "hookbridge"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")  # contract §10
_OPERATION = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
_BUDGET = re.compile(r"^[a-z][a-z]{0,15}$")
_SETTING = re.compile(r"^[A-Z][A-Z0-9_]{0,40}$")
# HOOKBRIDGE_SIM_* belongs to the simulator; a vendor of that name could not have settings of its own.
RESERVED = frozenset({"sim"})


class PluginError(ValueError):
    """A vendor plugin that cannot be used; the message is one line naming it."""


def vendors() -> dict[str, VendorSpec]:
    """The installed vendors by name: hookbridge's own first, in their declared order, then the others
    by name. Read once per ``sys.path``."""
    return dict(_discover_cached(tuple(sys.path)))


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of ``env`` (else the process's environment) read with every installed vendor, as the
    composition root reads them (``service/cli.py``); an unusable plugin is a ``VendorPluginError``."""
    try:
        specs = vendors()
    except PluginError as exc:
        raise settings_mod.VendorPluginError(str(exc)) from None
    return settings_mod.load(env, vendors=specs)


def spec_of(vendor: VendorSettings) -> VendorSpec | None:
    """The spec a vendor's settings were read with, as the :class:`VendorSpec` it is (the settings know
    only what of it declares settings); None when they were read without one."""
    return vendor.spec if isinstance(vendor.spec, VendorSpec) else None


@lru_cache(maxsize=8)
def _discover_cached(path: tuple[str, ...]) -> tuple[tuple[str, VendorSpec], ...]:
    return tuple(discover(entry_points(group=GROUP)).items())


def discover(found: Iterable[EntryPoint]) -> dict[str, VendorSpec]:
    """Loads and checks every entry point; raises :class:`PluginError` on the first unusable one."""
    seen: dict[str, EntryPoint] = {}
    for ep in found:
        if ep.name in seen:
            raise PluginError(
                f"vendor {ep.name!r} is registered twice under {GROUP}: by {_origin(seen[ep.name])} and by "
                f"{_origin(ep)}; uninstall one of them"
            )
        seen[ep.name] = ep
    if not seen:
        raise PluginError(
            f"no vendor is registered under the entry point group {GROUP}: is hookbridge installed "
            "(pip install -e . or the wheel)?"
        )
    own = [ep for ep in seen.values() if _distribution(ep) == OWN_DISTRIBUTION]
    others = sorted(
        (ep for ep in seen.values() if _distribution(ep) != OWN_DISTRIBUTION), key=lambda e: e.name
    )
    return {ep.name: _load(ep) for ep in [*own, *others]}


def _load(ep: EntryPoint) -> VendorSpec:
    where = f"vendor plugin {ep.name!r} ({_origin(ep)})"
    if not _NAME.match(ep.name) or ep.name in RESERVED:
        raise PluginError(
            f"{where}: the name must be 1-31 lower-case letters, digits and underscores, "
            "starting with a letter" + (f", and not {ep.name!r}" if ep.name in RESERVED else "")
        )
    try:
        spec = ep.load()
    except Exception as exc:  # any import-time failure of someone else's code, reported in one line
        raise PluginError(f"{where}: cannot be loaded: {type(exc).__name__}: {_one_line(exc)}") from None
    if not isinstance(spec, VendorSpec):
        raise PluginError(
            f"{where}: {ep.value} is a {type(spec).__name__}, not a service.vendors.base.VendorSpec"
        )
    try:
        problem = _check(ep.name, spec)
    except (TypeError, AttributeError) as exc:
        problem = f"the spec's fields have the wrong types ({_one_line(exc)})"
    if problem:
        raise PluginError(f"{where}: {problem}")
    return spec


def _check(name: str, spec: VendorSpec) -> str | None:
    if spec.name != name:
        return f"the spec is named {spec.name!r} but registered as {name!r}"
    problem = _check_operations(spec) or _check_defaults(spec)
    if problem:
        return problem
    if not callable(spec.auth_headers) or not callable(spec.build):
        return "auth_headers and build must be callables"
    if spec.auth is not None and not callable(spec.auth):
        return "auth must be None or a callable that builds an httpx.Auth"
    return _check_budgets(spec) or _check_settings(spec)


def _check_budgets(spec: VendorSpec) -> str | None:
    """Each group names its own setting ({V}_{NAME}_MAX_RPS) and its own kinds; no kind in two."""
    seen: set[Kind] = set()
    names: set[str] = set()
    for budget in spec.budgets:
        if not isinstance(budget, KindBudget) or not _BUDGET.match(budget.name):
            return f"budget {budget!r} must be a KindBudget with a lower-case name"
        if budget.name in names:
            return f"budget {budget.name} is declared twice"
        names.add(budget.name)
        kinds = set(budget.kinds)
        if not kinds or not all(isinstance(k, Kind) and k is not Kind.AUTH for k in kinds):
            return f"budget {budget.name}: kinds must be request kinds (service.vendors.base.Kind), not auth"
        if kinds & seen:
            return f"budget {budget.name}: kind {sorted(kinds & seen)[0]} is in another budget too"
        seen |= kinds
        if not budget.max_rps >= 0:
            return f"budget {budget.name}: max_rps must be 0 or more"
        if not all(isinstance(s, int | float) and s > 0 for s in budget.pause_schedule_s):
            return f"budget {budget.name}: pause_schedule_s must hold seconds greater than 0"
    return None


def _check_operations(spec: VendorSpec) -> str | None:
    if not isinstance(spec.operations, tuple) or not spec.operations:
        return "operations must be a non-empty tuple"
    for op in spec.operations:
        if not isinstance(op, str) or not _OPERATION.match(op):
            return f"operation {op!r} is not a lower-case word"
    if len(set(spec.operations)) != len(spec.operations):
        return "operations are listed twice"
    return None


def _check_defaults(spec: VendorSpec) -> str | None:
    if not isinstance(spec.defaults, VendorDefaults):
        return "defaults must be a VendorDefaults"
    d = spec.defaults
    if not d.base_url.startswith(("http://", "https://")):
        return f"defaults.base_url {d.base_url!r} is not an http(s) URL"
    for field in ("poll_initial_s", "poll_max_s", "poll_multiplier", "max_run_s", "pause_max_s"):
        if not getattr(d, field) > 0:
            return f"defaults.{field} must be greater than 0"
    if d.poll_max_s < d.poll_initial_s:
        return "defaults.poll_max_s must be >= poll_initial_s"
    if not d.max_rps >= 0:
        return "defaults.max_rps must be 0 or more"
    if not (isinstance(d.max_answer_bytes, int) and d.max_answer_bytes >= 0):
        return "defaults.max_answer_bytes must be 0 (MAX_DOCUMENT_BYTES and an envelope) or more"
    return None


def _check_settings(spec: VendorSpec) -> str | None:
    names: set[str] = set()
    for setting in spec.settings:
        if not isinstance(setting, VendorSetting) or not _SETTING.match(setting.name):
            return f"setting {setting!r} must be a VendorSetting with an upper-case name"
        if setting.name in names:
            return f"setting {setting.name} is declared twice"
        names.add(setting.name)
    return None


def _distribution(ep: EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return None if dist is None else str(dist.metadata["Name"]).lower().replace("_", "-")


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ep.value
    return f"{dist.metadata['Name']} {dist.version}: {ep.value}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else "(no message)"
