"""uvicorn servers that run as tasks inside a larger program, which owns the signals."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The program that embeds this server handles SIGTERM/SIGINT and sets ``should_exit``.
        yield
