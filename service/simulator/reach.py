"""Where the simulator is, as ``hookbridge dev``, ``demo`` and the tests reach it: its configuration, its
root URL and a directory for the files a vendor's settings name (a key file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import SimulatorConfig


@dataclass(frozen=True)
class Reach:
    config: SimulatorConfig
    root: str  # the simulator's root URL, http://host:port, no trailing slash
    workdir: Path  # a directory of the caller's for files the settings name; it removes it
