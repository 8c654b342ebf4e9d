"""No API key, vendor key or signing secret reaches a log line or an error body."""

from __future__ import annotations

import logging

import pytest
from structlog.testing import capture_logs

from service.simulator import cloud, defaults
from service.vendors import registry
from tests.conftest import ALICE, BOB, Receiver, StackFactory, eventually

# Every installed vendor the simulator plays with a key of ours (azure_di's goes in a header of its own).
# Textract and Document AI sign with cloud credentials instead, which need the simulator's storage, AWS
# keys in the process and a key the simulator made (test_cloud_vendors_e2e.py's stack); their tokens are
# registered for scrubbing as they are learnt (vendors/aws.py, vendors/gcp.py).
VENDORS = [name for name in registry.vendors() if name in defaults.SIMULATED and name not in cloud.SETTINGS]


async def test_a_full_run_logs_no_secret(
    make_stack: StackFactory, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with capture_logs() as entries:
        stack = await make_stack(HOOKBRIDGE_LOG_LEVEL="debug")
        receiver.answers = [500]
        sub = await stack.subscribe(receiver.url, event_types=["run.*"])
        rotated = (await stack.api.post(f"/v1/subscriptions/{sub['id']}/rotate-secret")).json()
        runs = [await stack.submit(vendor) for vendor in VENDORS]
        failing = await stack.submit("nutrient", filename="fail.pdf")
        for run in [*runs, failing]:
            await stack.wait_status(run["id"], "succeeded", "failed")
        await eventually(
            lambda: _value(len(receiver.events("run.succeeded")) >= len(VENDORS)),
            what="callbacks",
            timeout=30,
        )
        wrong = await stack.api.get("/v1/runs", headers={"Authorization": "Bearer sk-live-SECRET-123"})
        assert wrong.status_code == 401 and "SECRET" not in wrong.text

    text = "\n".join(repr(e) for e in entries) + "\n" + caplog.text
    assert any(e.get("event") == "delivery attempt" for e in entries)  # the capture saw the run
    secrets = [
        ALICE,
        BOB,
        "sk-live-SECRET-123",
        sub["secret"],
        rotated["secret"],
        *(stack.settings.vendor(v).api_key for v in VENDORS),
    ]
    for secret in secrets:
        assert secret and secret not in text
    assert "whsec_" not in text


async def _value(value: object) -> object:
    return value
