"""structlog for everything: JSON in production, console output in dev; stdlib logs (uvicorn, arq)
go through the same processors so that every line has one shape."""

from __future__ import annotations

import logging
import sys

import structlog

_SECRET_KEYS = frozenset({"authorization", "api_key", "secret", "secrets", "password", "token"})


def _drop_secrets(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    # A last line of defence: the code never logs secrets, and a key named like one is masked anyway.
    for key in list(event):
        if key.lower() in _SECRET_KEYS:
            event[key] = "[redacted]"
    return event


def configure(log_format: str = "console", level: str = "INFO") -> None:
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _drop_secrets,
    ]
    renderer: structlog.typing.Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "arq", "arq.worker"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # Request lines from httpx carry URLs only, but they are noise at INFO under load.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def get(name: str = "hookbridge") -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
