"""SIGTERM: the worker stops claiming, finishes or hands back what it holds, and exits 0 in its grace."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import Receiver, StackFactory, base_env, eventually


async def test_sigterm_exits_within_the_grace_and_loses_nothing(
    make_stack: StackFactory, redis_url: str, simulator: str, receiver: Receiver, tmp_path: Path
) -> None:
    api = await make_stack(worker=False)
    await api.subscribe(receiver.url)
    runs = [await api.submit("nutrient", filename=f"term-{i}.pdf") for i in range(20)]
    env = {
        **os.environ,
        **base_env(redis_url, simulator, HOOKBRIDGE_SHUTDOWN_GRACE_S="3", HOOKBRIDGE_LEASE_S="9"),
    }
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "service", "worker"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:

        async def some_submitted() -> bool:
            statuses = [(await api.api.get(f"/v1/runs/{r['id']}")).json()["status"] for r in runs]
            return any(s != "queued" for s in statuses)

        await eventually(some_submitted, timeout=30, what="the worker took work")
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 15)
        took = time.monotonic() - started
    finally:
        if worker.poll() is None:
            worker.kill()
    output = log.read_text()
    assert code == 0, output[-2000:]
    assert took < 3 + 5
    assert "worker stopped" in output

    # Whatever it had not finished is picked up by the next worker; every run ends and calls back.
    stack = await make_stack()
    for run in runs:
        await stack.wait_status(run["id"], "succeeded", timeout=40)
    await eventually(
        lambda: _value(len(receiver.events("run.succeeded")) == len(runs)), timeout=30, what="every callback"
    )


async def _value(value: object) -> object:
    return value
