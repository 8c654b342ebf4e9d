"""``logs.info``: the API's line a request, built in one pass, is the line structlog's configured chain
writes for the same call (the same keys in the same order, the same values, scrubbed alike), at every
level and configuration in which the chain would write it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import structlog

from service.observability import logs

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")

FIELDS: list[dict[str, Any]] = [
    {},
    {"method": "POST", "path": "/v1/runs", "status": 202, "ms": 1.2},
    {"run_id": "run_x", "vendor": "nutrient", "method": "GET", "path": "/v1/runs/{run_id}", "status": 200},
    {"error": "call to https://user:pw@hooks.example/cb?token=abc failed"},  # a URL's credentials
    {"Authorization": "Bearer sk", "api_key": "k", "password": "p"},  # keys named like secrets
    {"nested": {"url": "https://a:b@x/y?q=1", "n": [1, "http://h/p?s=2"]}, "t": ("https://h/?k=v",)},
    {"exc": ValueError("bad https://u:p@x/?t=1")},
    {"big": 2**70, "text": "ünïcode ✓ \u2028", "none": None, "yes": True},  # past orjson: json.dumps
    {"request_id": "given", "level": "mine"},  # a field named as the chain's own keys
    {"obj": object()},  # repr
]


def _lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def _without_time(line: dict[str, Any]) -> list[tuple[str, Any]]:
    assert TIMESTAMP.match(line["timestamp"]), line["timestamp"]
    return [(k, v) for k, v in line.items() if k != "timestamp"]


@pytest.mark.parametrize("fields", FIELDS, ids=range(len(FIELDS)))
def test_a_line_is_the_one_structlogs_chain_writes(
    fields: dict[str, Any], restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json", "INFO")
    tokens = structlog.contextvars.bind_contextvars(request_id="req_1", tenant="acme")
    try:
        logs.get("hookbridge.api").info("request", **fields)
        logs.info("hookbridge.api", "request", dict(fields))
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
    chain, short = _lines(capsys.readouterr().err)
    assert _without_time(short) == _without_time(chain)
    assert "sk" not in json.dumps(short) and ":pw@" not in json.dumps(short)


def test_no_line_below_the_configured_level(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json", "WARNING")
    logs.info("hookbridge.api", "request", {"status": 200})
    assert _lines(capsys.readouterr().err) == []


def test_console_output_and_a_chain_configured_since_go_through_structlog(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("console", "INFO")
    logs.info("hookbridge.api", "request", {"status": 200})
    err = capsys.readouterr().err
    assert "request" in err and not err.startswith("{")
    logs.configure("json", "INFO")
    seen: list[dict[str, Any]] = []

    def keep(_: object, __: str, event: Any) -> str:
        seen.append(dict(event))
        return "{}"

    structlog.configure(processors=[keep])  # another chain (a test's, a library's): it is the one used
    logs.info("hookbridge.api", "request", {"status": 201})
    assert seen == [{"status": 201, "event": "request", "logger_name": "hookbridge.api"}]
