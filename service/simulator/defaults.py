"""How hookbridge reaches each vendor the simulator plays: the settings that point a vendor at it, and a
run the demo can submit there.

``hookbridge dev``, ``hookbridge demo`` and the tests' stack read this table for every *installed*
vendor (``service.dev.stack``), so a vendor added here (and to the registry) appears in all three with
nothing else to change. A vendor installed but not here is left to the operator's own settings.

Each entry's ``settings`` gets a :class:`Reach` (the simulator's configuration, its root URL and a
directory for files a setting names, such as a key file) and answers environment variables by their full
names: the vendor's own ``HOOKBRIDGE_{NAME}_*`` and any other its client reads (``AWS_*``), or the
simulator's own ``HOOKBRIDGE_SIM_*`` (a key file it must trust). The caller gives them as defaults: a
variable already set wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import cloud
from .config import SimulatorConfig
from .reach import Reach as Reach


@dataclass(frozen=True)
class SimulatedVendor:
    name: str
    settings: Callable[[Reach], Mapping[str, str]]
    operation: str = ""  # the demo run's operation; "" takes the API's default
    options: Mapping[str, Any] = field(default_factory=dict)  # the demo run's options
    # Variables among ``settings``' that the vendor's client reads from the process environment rather than
    # from hookbridge's settings (AWS's credential chain): exported to the process by ``hookbridge dev``
    # and ``demo`` while the vendor is pointed at the simulator.
    process: tuple[str, ...] = ()


def _keyed(name: str, path: str, key: Callable[[SimulatorConfig], str]) -> Callable[[Reach], dict[str, str]]:
    var = f"HOOKBRIDGE_{name.upper()}_"

    def settings(reach: Reach) -> dict[str, str]:
        return {var + "BASE_URL": reach.root + path, var + "API_KEY": key(reach.config)}

    return settings


def _cloudsquid(reach: Reach) -> dict[str, str]:
    return {
        **_keyed("cloudsquid", "/cloudsquid/api", lambda c: c.cloudsquid_api_key)(reach),
        "HOOKBRIDGE_CLOUDSQUID_PROJECT": "demo",
        "HOOKBRIDGE_CLOUDSQUID_TABLE_ID": "9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f",
    }


# Azure's endpoint is the simulator's root (app.py: its SDK reads the result id from a host-only endpoint).
_azure_di = _keyed("azure_di", "", lambda c: c.azure_di_api_key)

SIMULATED: dict[str, SimulatedVendor] = {
    v.name: v
    for v in (
        SimulatedVendor("nutrient", _keyed("nutrient", "/nutrient", lambda c: c.nutrient_api_key)),
        SimulatedVendor("cloudsquid", _cloudsquid),
        SimulatedVendor(
            "uptiq", _keyed("uptiq", "/uptiq", lambda c: c.uptiq_api_key), options={"documentType": "Invoice"}
        ),
        SimulatedVendor("azure_di", _azure_di, options={"model_id": "prebuilt-invoice"}),
        SimulatedVendor(
            "llamaparse",
            _keyed("llamaparse", "/llamaparse", lambda c: c.llamaparse_api_key),
            options={"tier": "fast"},
        ),
        # Textract and Document AI read the simulator's storage (S3 and GCS), with dummy AWS keys (which
        # AWS's chain reads from the process) and a throwaway service-account key (cloud.py).
        SimulatedVendor(
            "textract",
            cloud.textract_settings,
            operation="analyze",
            options={"feature_types": ["TABLES", "FORMS"]},
            process=cloud.PROCESS_VARIABLES,
        ),
        SimulatedVendor(
            "google_docai",
            cloud.google_docai_settings,
            operation="process",
            options={"processor": "demo-invoice-parser"},
        ),
    )
}


def environment(names: Any, reach: Reach) -> dict[str, str]:
    """The variables that point each of ``names`` (installed vendors) that the simulator plays at it."""
    env: dict[str, str] = {}
    for name in names:
        vendor = SIMULATED.get(name)
        if vendor is not None:
            env.update(vendor.settings(reach))
    return env


def process_variables(names: Any, environ: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` to export to the process for ``names``: those of each vendor the caller did
    not point elsewhere (no ``HOOKBRIDGE_{NAME}_BASE_URL`` of its own in ``environ``)."""
    out: dict[str, str] = {}
    for name in names:
        vendor = SIMULATED.get(name)
        if vendor is None or f"HOOKBRIDGE_{name.upper()}_BASE_URL" in environ:
            continue
        out.update({var: env[var] for var in vendor.process if var in env})
    return out


def demo_run(name: str) -> dict[str, Any]:
    """The ``operation`` and ``options`` of a demo run at ``name`` (empty for a vendor not simulated)."""
    vendor = SIMULATED.get(name)
    if vendor is None:
        return {}
    run: dict[str, Any] = {}
    if vendor.operation:
        run["operation"] = vendor.operation
    if vendor.options:
        run["options"] = dict(vendor.options)
    return run
