"""Slowloris against the real ``hookbridge api`` process, on loopback only, bounded in count and time.

    python -m bench.slowloris                       # up to 15,000 connections, about a minute
    python -m bench.slowloris --max 2000 --quick    # a smoke run

Opens slow connections in steps (each sends a request line and then one header line every 8 s, never the
blank line that ends the headers), and at each step times ``GET /healthz`` on a fresh connection and counts
the API process's open file descriptors. Then waits for the guard (``API_HEADER_TIMEOUT_S``) to close
them. The figure: the most slow connections held open at once with ``/healthz`` still answering 200.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import sys
import time
from pathlib import Path

import aiohttp

from bench._common import BenchResult, Cluster, Figure, percentile, print_result, run_main

COMMAND = "python -m bench.slowloris"
REQUEST_LINE = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


class Slow:
    def __init__(self, port: int) -> None:
        self.port = port
        self.writers: list[asyncio.StreamWriter] = []
        self.failed = 0

    async def open(self, n: int, concurrency: int = 200) -> None:
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                try:
                    _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 5)
                    writer.write(REQUEST_LINE)
                    self.writers.append(writer)
                except (OSError, TimeoutError):
                    self.failed += 1

        await asyncio.gather(*(one() for _ in range(n)))

    def alive(self) -> int:
        return sum(1 for w in self.writers if not w.is_closing() and not w.transport.is_closing())

    async def trickle(self, stop: asyncio.Event, every_s: float = 8.0) -> None:
        i = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
            for w in self.writers:
                if not w.is_closing():
                    with contextlib.suppress(Exception):
                        w.write(f"X-Slow-{i}: 1\r\n".encode())
            i += 1

    def close(self) -> None:
        for w in self.writers:
            w.close()


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


async def healthz(http: aiohttp.ClientSession, url: str, n: int = 5) -> tuple[int, list[float]]:
    ok, times = 0, []
    for _ in range(n):
        started = time.perf_counter()
        try:
            async with http.get(url + "/healthz", headers={"Connection": "close"}) as response:
                await response.read()
                ok += response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            pass
        times.append(time.perf_counter() - started)
    return ok, times


async def run(quick: bool = False, max_connections: int = 15_000) -> BenchResult:
    started = time.monotonic()
    if quick:
        max_connections = min(max_connections, 1500)
    steps = [s for s in (500, 1000, 2500, 5000, 7500, 10_000, 12_500, 15_000, 20_000) if s <= max_connections]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    result = BenchResult("slowloris", COMMAND, COMMAND + " --quick")
    # The default header timeout (10 s) would close the first step's connections before the last opens;
    # 60 s keeps them all open while the steps run, so the figure is the count held at once.
    overrides = {"API_HEADER_TIMEOUT_S": "60"}
    async with Cluster("slowloris", overrides, worker=False, simulator=False, receiver=False) as cluster:
        api_pid = cluster.procs["api"].process.pid
        api_limit = Path(f"/proc/{api_pid}/limits").read_text()
        api_nofile = next((line.split()[3] for line in api_limit.splitlines() if "open files" in line), "?")
        slow = Slow(cluster.api_port)
        stop = asyncio.Event()
        trickle = asyncio.create_task(slow.trickle(stop))
        rows = []
        survived = 0
        latencies: list[float] = []
        try:
            for target in steps:
                await slow.open(target - len(slow.writers))
                await asyncio.sleep(0.5)
                ok, times = await healthz(cluster.http, cluster.api_url)
                alive = slow.alive()
                rows.append(
                    {
                        "open": alive,
                        "failed_to_open": slow.failed,
                        "healthz_ok": f"{ok}/5",
                        "healthz_max_ms": round(max(times) * 1000, 1),
                        "api_fds": open_fds(api_pid),
                    }
                )
                print(rows[-1], file=sys.stderr, flush=True)
                if ok == 5:
                    survived = max(survived, alive)
                    latencies += times
                if slow.failed:
                    break
        finally:
            stop.set()
            await trickle
            slow.close()
    result.add(
        Figure(
            "slow connections held open with /healthz answering",
            survived,
            "connections",
            note=f"API process nofile {api_nofile}; bench process nofile {soft}/{hard}",
        ),
        Figure("/healthz p50 under that load", (percentile(latencies, 0.5) or 0) * 1000, "ms"),
        Figure("/healthz max under that load", max(latencies, default=0) * 1000, "ms"),
    )
    result.data["steps"] = rows
    result.notes.append(
        "Each slow connection sends a request line, then one header line every 8 s, never the blank line. "
        "The guard closes it API_HEADER_TIMEOUT_S after it opened (10 s by default; 60 s here so that the "
        "steps accumulate), and at API_MAX_CONNECTIONS (by default the file limit minus 256) a new "
        "connection evicts the oldest one still waiting for its headers."
    )
    result.elapsed_s = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--max", type=int, default=15_000, help="most slow connections to open")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    print_result(run_main(run(args.quick, args.max)), as_json=args.json)


if __name__ == "__main__":
    main()
