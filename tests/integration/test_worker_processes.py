"""``hookbridge worker --processes 2``: two real worker processes under one supervisor, each with its own
health port; SIGTERM stops them all cleanly, and a child that dies by itself takes the pod down."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.dev.embedded_redis import free_port
from tests.conftest import base_env, eventually

Supervisor = tuple[subprocess.Popen[bytes], int, Path]  # the process, process 0's health port, its log


@pytest.fixture
def supervisor(redis_url: str, tmp_path: Path) -> Iterator[Supervisor]:
    port = free_port()
    while True:  # process 1 takes the next port: both must be free
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            port = free_port()
    env = {
        **os.environ,
        **base_env(
            redis_url,
            HOOKBRIDGE_WORKER_METRICS_PORT=str(port),
            HOOKBRIDGE_WORKER_METRICS_HOST="127.0.0.1",
            HOOKBRIDGE_SHUTDOWN_GRACE_S="2",
        ),
    }
    log = tmp_path / "supervisor.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "worker", "--processes", "2"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, port, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _workers(port: int) -> dict[int, str]:
    """The worker id (host-pid) each health port answers with."""
    out = {}
    async with httpx.AsyncClient(timeout=2) as client:
        for p in (port, port + 1):
            try:
                response = await client.get(f"http://127.0.0.1:{p}/healthz")
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                out[p] = response.json()["worker"]
    return out


async def _both_up(port: int) -> dict[int, str]:
    found: dict[int, str] = {}

    async def up() -> bool:
        found.update(await _workers(port))
        return len(found) == 2

    await eventually(up, timeout=60, what="both worker processes serve their health port")
    return found


async def test_two_processes_each_on_its_port_and_sigterm_stops_all_with_0(supervisor: Supervisor) -> None:
    proc, port, log = supervisor
    workers = await _both_up(port)
    pids = {int(w.rsplit("-", 1)[1]) for w in workers.values()}
    assert len(pids) == 2 and proc.pid not in pids
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 20)
    assert code == 0, log.read_text()[-2000:]
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


async def test_a_child_that_dies_stops_the_others_and_the_supervisor_fails(supervisor: Supervisor) -> None:
    proc, port, log = supervisor
    workers = await _both_up(port)
    first, second = (int(w.rsplit("-", 1)[1]) for w in workers.values())
    os.kill(first, signal.SIGKILL)
    code = await asyncio.to_thread(proc.wait, 20)
    assert code != 0
    assert "a worker process exited by itself" in log.read_text()
    assert not Path(f"/proc/{second}").exists() or "zombie" in Path(f"/proc/{second}/status").read_text()
