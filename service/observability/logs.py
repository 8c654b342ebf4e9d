"""structlog for everything: JSON in production, console output in dev; stdlib logs (uvicorn, arq)
go through the same processors so that every line has one shape."""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
from typing import Any

import orjson
import structlog

from service.observability import tracing

_SECRET_KEYS = frozenset({"authorization", "api_key", "secret", "secrets", "password", "token"})


# A URL's userinfo and query string: where receivers put credentials (``?token=``, ``user:pass@``).
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#@]*@)?([^\s?#]*)(\?[^\s#\"'<>]*)?")


def redact_urls(text: str) -> str:
    """Every URL in ``text`` with its userinfo and query string replaced by ``[redacted]``."""

    def one(m: re.Match[str]) -> str:
        scheme, userinfo, rest, query = m.groups()
        return scheme + ("[redacted]@" if userinfo else "") + rest + ("?[redacted]" if query else "")

    return _URL.sub(one, text) if "://" in text else text


def _redact(value: Any) -> Any:
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, dict):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact(v) for v in value)
    return value


def _scrub(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """One pass over a line's fields, the last before it is written: a key named like a secret is masked
    (a last line of defence: the code never logs secrets), and every URL in a value loses its userinfo and
    query string (callback URLs reach log lines inside transport errors; their credentials must not)."""
    for key, value in event.items():
        if key.lower() in _SECRET_KEYS:
            event[key] = "[redacted]"
        elif isinstance(value, str):
            if "://" in value:
                event[key] = redact_urls(value)
        elif isinstance(value, dict | list | tuple):
            event[key] = _redact(value)
        elif isinstance(value, BaseException):
            event[key] = redact_urls(f"{type(value).__name__}: {value}")
    return event


def _trace_ids(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    # Joins a line to its trace; with tracing off, one flag read.
    if tracing.ENABLED and (ids := tracing.current_ids()) is not None:
        event["trace_id"], event["span_id"] = ids
    return event


def _render_json(event: structlog.typing.EventDict, **_: Any) -> str:
    try:
        return orjson.dumps(event, default=repr).decode()
    except TypeError:  # what orjson refuses (a 65-bit integer, a key that is not a string)
        return json.dumps(event, default=repr)


class _InfoLines:
    """INFO lines in JSON built and written in one pass, as the configured chain writes them: the same
    keys in the same order (the line's fields, ``event``, ``logger``, the bound context, ``level``,
    ``timestamp``, the trace's ids), scrubbed alike, to the same file under the same lock. The API writes
    one a request, and a chain of processors whose code a request has pushed out of the CPU's caches
    costs ~25 us a line there (~9 us in a loop that keeps it hot); this is one short path."""

    def __init__(self, file: Any, processors: list[structlog.typing.Processor]) -> None:
        self._out = structlog.WriteLogger(file)
        self.processors = processors  # the chain this stands for: valid while it is the configured one

    def write(self, name: str, event: str, fields: dict[str, Any]) -> None:
        line = {**fields, "event": event, "logger": name}
        for key, value in structlog.contextvars.get_contextvars().items():
            line.setdefault(key, value)
        line["level"] = "info"
        line["timestamp"] = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
        _trace_ids(None, "info", line)
        self._out.msg(_render_json(_scrub(None, "info", line)))


_info_lines: _InfoLines | None = None


def info(name: str, event: str, fields: dict[str, Any]) -> None:
    """``get(name).info(event, **fields)``: with JSON output at INFO, the same line through one short path
    (:class:`_InfoLines`); otherwise through structlog."""
    lines = _info_lines
    if (
        lines is not None
        and "exc_info" not in fields
        and structlog.get_config()["processors"] is lines.processors
    ):
        lines.write(name, event, fields)
    else:
        get(name).info(event, **fields)


def configure(log_format: str = "console", level: str = "INFO") -> None:
    """Our own lines go through structlog alone (a level filter compiled into the logger, written straight
    to stderr): a JSON line costs ~15 us of CPU where it cost ~44 us through the stdlib ``logging``
    machinery, and the API writes one per request (a submit's names its run). The stdlib lines of
    libraries (uvicorn, arq) go through a handler on the root logger with the same processors, so every
    line has one shape."""
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _trace_ids,
    ]
    renderer: structlog.typing.Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_render_json)
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    shared.append(_scrub)
    processors = [_logger_name, *shared, renderer]
    global _info_lines
    at_info = logging.getLevelNamesMapping()[level.upper()] <= logging.INFO
    _info_lines = _InfoLines(sys.stderr, processors) if log_format == "json" and at_info else None
    structlog.configure(
        processors=processors,
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        # A logger made at import assembles itself at each call (~2 us), so that it follows a configure()
        # made later (the tests reconfigure) instead of keeping the output of its first call.
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
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
    # werkzeug (moto's S3 in the simulator) sets its logger to INFO on its first line unless it has a
    # level of its own: it follows the configured one, as uvicorn's request lines do.
    logging.getLogger("werkzeug").setLevel(level.upper())


def _logger_name(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    # get() binds the name as ``logger_name`` (``logger`` is a parameter of structlog's own), and stdlib
    # lines name theirs ``logger``: one key for both.
    event["logger"] = event.pop("logger_name", None)
    return event


def get(name: str = "hookbridge") -> structlog.typing.FilteringBoundLogger:
    """A logger whose lines carry ``logger=name``."""
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(logger_name=name)
    return logger
