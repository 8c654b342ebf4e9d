"""The OpenAPI 3.1 document (placeholder until the full document lands)."""

from __future__ import annotations

from typing import Any

from service import __version__


def document() -> dict[str, Any]:
    return {"openapi": "3.1.0", "info": {"title": "hookbridge", "version": __version__}, "paths": {}}
