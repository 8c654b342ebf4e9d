"""A hostile tenant against the callback worker: what it costs the worker and the other tenants.

    python -m bench.hostile                      # both parts; figures in docs/reliability.md
    python -m bench.hostile --part bombs         # worker memory against a 1 GiB body and a gzip bomb
    python -m bench.hostile --part fairness --hanging 500
    python -m bench.hostile --part shared-host --shared 98
    python -m bench.hostile --env CLIENT_MAX_IN_FLIGHT=50   # any HOOKBRIDGE_ setting, without the prefix

- **bombs**: client A's receivers answer every callback with a 1 GiB chunked body or a 1 MiB gzip stream
  that inflates to 1 GiB, ``--bombs`` of each at once, three rounds. The figure is the worker's resident
  memory (``VmRSS``, sampled every 20 ms) above what it used before, and its peak (``VmHWM``).
- **fairness**: client B's callback delay (its ``POST .../test`` answered to its receiver reading the
  callback), first alone, then while client A has ``--hanging`` subscriptions whose receivers never
  answer (each attempt waits out ``CALLBACK_TIMEOUT_S``, then retries per ``RETRY_SCHEDULE``).
- **shared-host**: one receiver host for both tenants, as one ingress in front of many apps: client B
  has ``--shared`` subscriptions whose receivers on that host never answer; client A's callback delay to
  its own quick receiver on the same host, alone and then under the attack (median, p50 over its usual,
  worst over its usual).

``hookbridge api``, ``hookbridge worker`` and ``redis-server`` are subprocesses with production defaults;
the receivers run in this process (aiohttp's server). Run it from another checkout (``cd`` there, with
this file and ``tests/hostile/hostile_receivers.py`` copied in) to measure that code with the same
attack: the "before" figures in docs/reliability.md were taken that way on 9efe3c0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time

import aiohttp
from aiohttp import web

from bench._common import AUTH, BenchResult, Cluster, Figure, memory_kib, percentile, print_result, run_main
from tests.hostile.hostile_receivers import Seen, gzip_bomb, gzip_bombing, hanging, huge_chunked, serve

B_KEY = "bench-b-key"
B_AUTH = {"Authorization": f"Bearer {B_KEY}"}
MIB = 1024 * 1024


def _overrides(extra: dict[str, str]) -> dict[str, str]:
    return {"API_KEYS": f"bench:bench-key,b:{B_KEY}", **extra}


async def _subscribe(cluster: Cluster, url: str, auth: dict[str, str]) -> str:
    async with cluster.http.post(f"{cluster.api_url}/v1/subscriptions", json={"url": url}, headers=auth) as r:
        if r.status != 201:
            raise SystemExit(
                f"subscription refused ({r.status}): {await r.text()}; raise the quota with --env"
            )
        return str((await r.json())["id"])


async def _test_event(cluster: Cluster, sub_id: str, auth: dict[str, str]) -> None:
    async with cluster.http.post(f"{cluster.api_url}/v1/subscriptions/{sub_id}/test", headers=auth) as r:
        if r.status != 202:
            raise RuntimeError(f"test event refused ({r.status}): {await r.text()}")


async def _deliveries_ended(cluster: Cluster, sub_ids: list[str]) -> bool:
    for sub_id in sub_ids:
        async with cluster.http.get(
            f"{cluster.api_url}/v1/subscriptions/{sub_id}/deliveries", headers=AUTH
        ) as r:
            rows = (await r.json())["data"]
        if not rows or any(d["attempts"] == 0 for d in rows):
            return False
    return True


# Bombs ------------------------------------------------------------------------------------------------


async def bombs(bombs_each: int, rounds: int, extra: dict[str, str]) -> BenchResult:
    result = BenchResult(
        "hostile receivers: bombs",
        f"python -m bench.hostile --part bombs --bombs {bombs_each} --rounds {rounds}",
        "python -m bench.hostile --part bombs --bombs 1 --rounds 1",
    )
    gzip_bomb()  # built before the clock starts
    chunked, bomb = Seen(), Seen()
    started = time.monotonic()
    async with (
        Cluster("hostile-bombs", _overrides(extra), simulator=False, receiver=False) as cluster,
        serve(huge_chunked(chunked)) as chunked_url,
        serve(gzip_bombing(bomb)) as bomb_url,
    ):
        pid = cluster.procs["worker"].process.pid
        subs = [await _subscribe(cluster, f"{chunked_url}/{i}", AUTH) for i in range(bombs_each)]
        subs += [await _subscribe(cluster, f"{bomb_url}/{i}", AUTH) for i in range(bombs_each)]
        await asyncio.sleep(2)  # the worker settles after start (imports, first claims)
        baseline = memory_kib(pid)
        peak_rss = baseline.get("VmRSS", 0)
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal peak_rss
            while not stop.is_set():
                peak_rss = max(peak_rss, memory_kib(pid).get("VmRSS", 0))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        rounds_s: list[float] = []
        for _ in range(rounds):
            t0 = time.monotonic()
            await asyncio.gather(*(_test_event(cluster, s, AUTH) for s in subs))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(120):
                    while not await _deliveries_ended(cluster, subs):
                        await asyncio.sleep(0.1)
            rounds_s.append(time.monotonic() - t0)
        stop.set()
        await sampler
        after = memory_kib(pid)
    growth = (peak_rss - baseline.get("VmRSS", 0)) / 1024
    result.add(
        Figure(
            "worker memory growth, both bombs at once",
            round(growth, 1),
            "MiB",
            target="< 50 MiB",
            goal=50,
            higher_is_better=False,
            note=f"{bombs_each} of each at once, {rounds} rounds",
        ),
        Figure("worker RSS before", round(baseline.get("VmRSS", 0) / 1024, 1), "MiB"),
        Figure("worker RSS peak (sampled)", round(peak_rss / 1024, 1), "MiB"),
        Figure("worker VmHWM after", round(after.get("VmHWM", 0) / 1024, 1), "MiB"),
        Figure("round time (median)", round(statistics.median(rounds_s), 2), "s"),
        Figure(
            "body bytes the 1 GiB receiver handed to its socket, per callback",
            round(chunked.bytes_sent / max(1, chunked.requests) / MIB, 1),
            "MiB",
        ),
    )
    result.notes.append(
        f"Accept-Encoding the receivers saw: {sorted(set(chunked.accept_encoding + bomb.accept_encoding))}"
    )
    result.data = {"baseline_kib": baseline, "after_kib": after, "peak_rss_kib": peak_rss}
    result.elapsed_s = time.monotonic() - started
    return result


# Fairness ---------------------------------------------------------------------------------------------


async def fairness(hanging_subs: int, samples: int, attack_s: float, extra: dict[str, str]) -> BenchResult:
    result = BenchResult(
        "hostile receivers: one tenant's hanging receivers",
        f"python -m bench.hostile --part fairness --hanging {hanging_subs}",
        "python -m bench.hostile --part fairness --hanging 50 --samples 5 --attack-s 10",
    )
    release = asyncio.Event()
    hung = Seen()
    arrived: dict[str, float] = {}
    got = asyncio.Condition()

    async def quick(request: web.Request) -> web.Response:
        await request.read()
        async with got:
            arrived[request.headers.get("webhook-id", "")] = time.time()  # the event's id
            got.notify_all()
        return web.Response(status=204)

    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        cluster = await stack.enter_async_context(
            Cluster("hostile-fairness", _overrides(extra), simulator=False, receiver=False)
        )
        # 50 receivers per server: the worker's connection pool allows 50 connections per host and port.
        hang_urls = [
            await stack.enter_async_context(serve(hanging(hung, release)))
            for _ in range((hanging_subs + 49) // 50)
        ]
        quick_url = await stack.enter_async_context(serve(quick))
        b_sub = await _subscribe(cluster, quick_url, B_AUTH)
        # A connection per request: a pooled one that the API closed while idle would fail the POST.
        b_http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))

        async def b_delay() -> float:
            t0 = time.time()
            async with b_http.post(f"{cluster.api_url}/v1/subscriptions/{b_sub}/test", headers=B_AUTH) as r:
                event_id = (await r.json())["event_id"]
            async with got:
                await asyncio.wait_for(got.wait_for(lambda: event_id in arrived), timeout=120)
            return arrived[event_id] - t0

        for _ in range(3):
            await b_delay()  # warm-up: first connections, first claims
        usual = [await b_delay() for _ in range(samples)]
        a_subs = await asyncio.gather(
            *(_subscribe(cluster, f"{hang_urls[i % len(hang_urls)]}/{i}", AUTH) for i in range(hanging_subs))
        )
        await asyncio.gather(*(_test_event(cluster, s, AUTH) for s in a_subs))
        deadline = time.monotonic() + 30
        while hung.in_flight < min(hanging_subs, 100) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        attacked: list[float] = []
        t_end = time.monotonic() + attack_s
        while time.monotonic() < t_end or len(attacked) < samples:
            attacked.append(await b_delay())
            await asyncio.sleep(0.25)
        a_in_flight = hung.most_in_flight
        release.set()
        await b_http.close()
    base = statistics.median(usual)
    worst = max(attacked)
    result.add(
        Figure("client B's callback delay alone (median)", round(base, 3), "s"),
        Figure(
            f"client B's callback delay with {hanging_subs} hanging receivers of A (median)",
            round(statistics.median(attacked), 3),
            "s",
        ),
        Figure(
            "... p95",
            round(percentile(attacked, 0.95) or 0.0, 3),
            "s",
        ),
        Figure(
            "... worst over its usual",
            round(worst - base, 3),
            "s",
            target="< 1 s over its usual",
            goal=1.0,
            higher_is_better=False,
            note=f"{len(attacked)} callbacks of B over {attack_s:.0f} s",
        ),
        Figure("A's callbacks in flight at most (at A's receivers)", a_in_flight, ""),
    )
    result.data = {"usual": usual, "attacked": attacked}
    result.elapsed_s = time.monotonic() - started
    return result


# A shared receiver host ------------------------------------------------------------------------------


async def shared_host(hanging_subs: int, samples: int, attack_s: float, extra: dict[str, str]) -> BenchResult:
    """Here client B (``b``) is the hostile one and A (``bench``) the victim, as in issue 23."""
    result = BenchResult(
        "hostile receivers: one host shared by a tenant with hanging receivers and its victim",
        f"python -m bench.hostile --part shared-host --shared {hanging_subs}",
        "python -m bench.hostile --part shared-host --shared 60 --samples 5 --attack-s 10",
    )
    release = asyncio.Event()
    hung = Seen()
    hang = hanging(hung, release)
    arrived: dict[str, float] = {}
    got = asyncio.Condition()

    async def ingress(request: web.Request) -> web.StreamResponse:
        # One server, one host and port: B's receivers hang, A's answers at once.
        if not request.path.endswith("/quick"):
            return await hang(request)
        await request.read()
        async with got:
            arrived[request.headers.get("webhook-id", "")] = time.time()
            got.notify_all()
        return web.Response(status=204)

    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        cluster = await stack.enter_async_context(
            Cluster("hostile-shared-host", _overrides(extra), simulator=False, receiver=False)
        )
        host_url = await stack.enter_async_context(serve(ingress))
        a_sub = await _subscribe(cluster, f"{host_url}/a/quick", AUTH)
        a_http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        stack.push_async_callback(a_http.close)

        async def a_delay() -> float:
            t0 = time.time()
            async with a_http.post(f"{cluster.api_url}/v1/subscriptions/{a_sub}/test", headers=AUTH) as r:
                event_id = (await r.json())["event_id"]
            async with got:
                await asyncio.wait_for(got.wait_for(lambda: event_id in arrived), timeout=120)
            return arrived[event_id] - t0

        for _ in range(3):
            await a_delay()  # warm-up: first connections, first claims
        usual = [await a_delay() for _ in range(samples)]
        b_subs = await asyncio.gather(
            *(_subscribe(cluster, f"{host_url}/b/{i}", B_AUTH) for i in range(hanging_subs))
        )
        await asyncio.gather(*(_test_event(cluster, s, B_AUTH) for s in b_subs))
        # B holds what it can of the host: all 50 connections before, its share after.
        deadline = time.monotonic() + 30
        settled_at, last = time.monotonic(), -1
        while time.monotonic() < deadline and time.monotonic() - settled_at < 1.0:
            if hung.in_flight != last:
                settled_at, last = time.monotonic(), hung.in_flight
            await asyncio.sleep(0.05)
        b_held = hung.in_flight
        attacked: list[float] = []
        t_end = time.monotonic() + attack_s
        while time.monotonic() < t_end or len(attacked) < samples:
            attacked.append(await a_delay())
            await asyncio.sleep(0.25)
        b_most = hung.most_in_flight
        release.set()
    base = statistics.median(usual)
    p50 = statistics.median(attacked)
    worst = max(attacked)
    result.add(
        Figure("client A's callback delay alone (median)", round(base, 3), "s"),
        Figure(
            f"A's delay while B has {hanging_subs} hanging receivers on A's host (median)",
            round(p50, 3),
            "s",
        ),
        Figure("... p95", round(percentile(attacked, 0.95) or 0.0, 3), "s"),
        Figure(
            "... A's p50 over its usual",
            round(p50 / base, 2) if base > 0 else None,
            "x",
            target="< 2x",
            goal=2.0,
            higher_is_better=False,
        ),
        Figure(
            "... worst over its usual",
            round(worst - base, 3),
            "s",
            target="< 1 s over its usual",
            goal=1.0,
            higher_is_better=False,
            note=f"{len(attacked)} callbacks of A over {attack_s:.0f} s",
        ),
        Figure("B's callbacks at its receivers when A was first timed", b_held, ""),
        Figure("B's callbacks at its receivers at most", b_most, ""),
    )
    result.data = {"usual": usual, "attacked": attacked}
    result.elapsed_s = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("bombs", "fairness", "shared-host", "all"), default="all")
    parser.add_argument("--bombs", type=int, default=1, help="receivers of each bomb kind hit at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hanging", type=int, default=500, help="client A's hanging subscriptions")
    parser.add_argument("--shared", type=int, default=98, help="client B's hanging receivers on A's host")
    parser.add_argument("--samples", type=int, default=20, help="client B's callbacks timed alone")
    parser.add_argument("--attack-s", type=float, default=30.0, help="how long B is timed under attack")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE, a HOOKBRIDGE_ setting")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env)

    async def run() -> list[BenchResult]:
        out = []
        if args.part in ("bombs", "all"):
            out.append(await bombs(args.bombs, args.rounds, extra))
        if args.part in ("fairness", "all"):
            out.append(await fairness(args.hanging, args.samples, args.attack_s, extra))
        if args.part in ("shared-host", "all"):
            out.append(await shared_host(args.shared, args.samples, args.attack_s, extra))
        return out

    for result in run_main(run()):
        print_result(result, as_json=args.json)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
