"""service/observability/tracing.py: when the OTEL_* variables turn tracing on, the poll thinning, the
off path, and the log lines that join a trace."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from service import cli
from service.observability import logs, tracing

ENDPOINT = "http://collector:4318"


@pytest.mark.parametrize(
    ("environ", "exporter"),
    [
        ({}, None),  # off by default
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),  # the SDK's default endpoint, localhost:4318
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "zipkin, otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
    ],
)
def test_wanted(environ: dict[str, str], exporter: str | None) -> None:
    assert tracing.wanted(environ) == exporter


def test_an_exporter_this_build_lacks_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    with pytest.raises(SystemExit) as exit_info:
        cli._tracing("api")
    assert exit_info.value.code == 2
    assert "OTEL_TRACES_EXPORTER='jaeger'" in capsys.readouterr().err
    assert not tracing.ENABLED


def test_polls_recorded() -> None:
    recorded = [n for n in range(1, 300) if tracing._poll_recorded(n)]
    assert recorded == [1, 2, 3, 4, 8, 16, 32, 64, 128, 256]


def test_off_costs_one_branch() -> None:
    # Off, every entry point hands back the same no-op context and touches nothing.
    assert not tracing.ENABLED
    run = {"id": "run_x", "vendor": "nutrient", "polls": 0, "_traceparent": None}
    assert tracing.vendor_call("poll", run) is tracing._OFF
    assert tracing.run_finish(run) is tracing._OFF
    assert tracing.delivery_attempt(None, {}) is tracing._OFF  # type: ignore[arg-type]
    assert tracing.asgi_middleware([]) == []
    assert tracing.current_traceparent() is None
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}


@pytest.fixture
def console_tracing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "unit")
    assert tracing.setup("test")
    try:
        yield
    finally:
        tracing.shutdown()


def _lines(err: str) -> dict[str, dict[str, object]]:
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return {str(line["event"]): line for line in lines}


def test_log_lines_inside_a_span_carry_its_ids(
    console_tracing: None, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json", "INFO")
    log = logs.get("hookbridge.test")
    with tracing.span("unit"):
        ids = tracing.current_ids()
        log.info("inside")
        logging.getLogger("arq.worker").info("stdlib inside")  # a library's line, through the same chain
        logs.info("hookbridge.api", "request inside", {})  # the API's line a request, in one pass
    log.info("outside")
    assert ids is not None
    lines = _lines(capsys.readouterr().err)
    for event in ("inside", "stdlib inside", "request inside"):
        assert (lines[event]["trace_id"], lines[event]["span_id"]) == ids
    assert "trace_id" not in lines["outside"]


def test_log_lines_with_tracing_off_carry_no_ids(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json", "INFO")
    with tracing.span("unit"):
        logs.get("hookbridge.test").info("off")
    assert "trace_id" not in _lines(capsys.readouterr().err)["off"]
