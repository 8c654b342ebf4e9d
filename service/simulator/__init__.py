"""An HTTP server imitating the async APIs of Nutrient, Cloudsquid and Uptiq, quirks included.

It is an independent reading of the vendors' documents in ``shared/vendors/`` (it never imports
``service.vendors``), served by one Starlette app under ``/nutrient``, ``/cloudsquid/api`` and ``/uptiq``.
Outcomes are chosen by the submitted document (see ``_documents``); knobs are in ``config``.
"""

from __future__ import annotations

from .app import create_app
from .config import SimulatorConfig

__all__ = ["SimulatorConfig", "create_app"]
