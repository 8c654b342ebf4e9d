"""How hookbridge reaches the simulated Textract and Document AI, for ``hookbridge dev``, ``demo`` and the
tests' stack: the settings that point each at the simulator, the demo's staging bucket (made in both
storage emulators, ``HOOKBRIDGE_SIM_STORAGE_BUCKETS``), dummy AWS keys (the ones the simulated Textract
checks signatures with) and a throwaway service-account key whose ``token_uri`` is the simulator's own
token endpoint, which the simulator is told to trust (``HOOKBRIDGE_SIM_GOOGLE_SA_KEY_FILE``).

Each function takes a :class:`~service.simulator.reach.Reach` (the simulator's configuration, its root
URL and a directory for the key file), as the table of simulated vendors (``defaults.py``) does, and
answers environment variables by their full names (given as defaults: a
variable already set wins). AWS's chain reads its keys from the process environment, not from
hookbridge's settings: :data:`PROCESS_VARIABLES` are the ones the caller exports to the process.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .oauth import OAuthStore
from .reach import Reach

BUCKET = "hookbridge-demo"
PROCESS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
# The demo's runs (operation and options).
DEMO_RUNS: dict[str, dict[str, Any]] = {
    "textract": {"operation": "analyze", "options": {"feature_types": ["TABLES", "FORMS"]}},
    "google_docai": {"operation": "process", "options": {"processor": "demo-invoice-parser"}},
}


def textract_settings(reach: Reach) -> dict[str, str]:
    config, root = reach.config, reach.root
    return {
        "HOOKBRIDGE_TEXTRACT_BASE_URL": root + "/textract",
        "HOOKBRIDGE_TEXTRACT_REGION": config.textract_region,
        "HOOKBRIDGE_TEXTRACT_S3_BUCKET": BUCKET,
        "HOOKBRIDGE_TEXTRACT_S3_PREFIX": "staged/",
        "HOOKBRIDGE_TEXTRACT_S3_ENDPOINT_URL": root + "/s3",
        "HOOKBRIDGE_SIM_STORAGE_BUCKETS": BUCKET,
        "AWS_ACCESS_KEY_ID": config.textract_access_key_id,
        "AWS_SECRET_ACCESS_KEY": config.textract_secret_access_key,
    }


def google_docai_settings(reach: Reach) -> dict[str, str]:
    config, root, workdir = reach.config, reach.root, reach.workdir
    # One key per simulator: its token_uri is that simulator's.
    name = f"google-service-account-{hashlib.sha256(root.encode()).hexdigest()[:12]}.json"
    key_file = service_account_file(workdir / name, root + "/token", config.google_docai_project_id)
    return {
        "HOOKBRIDGE_GOOGLE_DOCAI_BASE_URL": root + "/google_docai",
        "HOOKBRIDGE_GOOGLE_DOCAI_PROJECT": config.google_docai_project_id,
        "HOOKBRIDGE_GOOGLE_DOCAI_LOCATION": config.google_docai_location,
        "HOOKBRIDGE_GOOGLE_DOCAI_PROCESSOR": "demo-invoice-parser",
        "HOOKBRIDGE_GOOGLE_DOCAI_GCS_BUCKET": BUCKET,
        "HOOKBRIDGE_GOOGLE_DOCAI_GCS_PREFIX": "docai/",
        "HOOKBRIDGE_GOOGLE_DOCAI_GCS_BASE_URL": root + "/gcs",
        "HOOKBRIDGE_GOOGLE_DOCAI_CREDENTIALS_FILE": str(key_file),
        "HOOKBRIDGE_SIM_GOOGLE_SA_KEY_FILE": str(key_file),
        "HOOKBRIDGE_SIM_STORAGE_BUCKETS": BUCKET,
    }


def service_account_file(path: Path, token_uri: str, project_id: str) -> Path:
    """A throwaway service-account key file at ``path`` (made once, readable by its owner only)."""
    if not path.exists():
        info = OAuthStore().new_service_account(token_uri, project_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(info, out)
    return path


SETTINGS = {"textract": textract_settings, "google_docai": google_docai_settings}


def environment(names: Any, reach: Reach) -> dict[str, str]:
    """The variables that point each of ``names`` (installed vendors) among these two at the simulator."""
    env: dict[str, str] = {}
    for name in names:
        settings = SETTINGS.get(name)
        if settings is not None:
            env.update(settings(reach))
    return env
