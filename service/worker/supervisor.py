"""``hookbridge worker --processes N``: N worker processes in one pod, so that it uses more than one core.

A worker process is one event loop on one core (about 0.1-0.2 ms of CPU per vendor poll, see
docs/performance.md); the leases in Redis already share the due work between any number of them, so the
supervisor only starts them, forwards SIGTERM and SIGINT, and waits. A child that exits by itself (a
crash, an OOM kill) stops the others and the supervisor exits non-zero: the pod restarts as a whole, so
that Kubernetes sees and counts the failure rather than a supervisor hiding it behind restarts. The
children's leases hand their work to the rest.

Process ``i`` (from 0) serves its health and metrics on ``WORKER_METRICS_PORT + i``; the pod's liveness
probe reads process 0, and the supervisor watches the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType

from service.observability import logs

log = logs.get("hookbridge.worker")

# How often the supervisor looks at its children when no signal comes.
WATCH_EVERY_S = 0.2


def child_env(index: int, metrics_port: int) -> dict[str, str]:
    env = dict(os.environ)
    env["HOOKBRIDGE_WORKER_PROCESSES"] = "1"  # a child is a plain worker, never a supervisor itself
    if metrics_port:
        env["HOOKBRIDGE_WORKER_METRICS_PORT"] = str(metrics_port + index)
    return env


def supervise(processes: int, metrics_port: int, grace_s: float) -> int:
    """Runs ``processes`` workers until a signal or a child's own exit; returns the exit code."""
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    children: list[subprocess.Popen[bytes]] = []
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index in range(processes):
        command = [sys.executable, "-m", "service", "worker", "--processes", "1"]
        children.append(subprocess.Popen(command, env=child_env(index, metrics_port)))
    log.info("worker processes started", processes=processes, pids=[c.pid for c in children])
    if stopping:  # a signal came while they started: the later ones have not seen it
        forward(signal.SIGTERM, None)
    while not stopping and all(c.poll() is None for c in children):
        time.sleep(WATCH_EVERY_S)
    if not stopping:
        dead = [(c.pid, c.returncode) for c in children if c.returncode is not None]
        log.error("a worker process exited by itself: stopping the others", exited=dead)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s + 5
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    codes = [c.returncode for c in children]
    log.info("worker processes stopped", exit_codes=codes)
    if not stopping:
        return 1
    return 0 if all(code in (0, -signal.SIGTERM, -signal.SIGINT) for code in codes) else 1
