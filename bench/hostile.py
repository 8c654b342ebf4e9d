"""A hostile tenant against the callback worker: what it costs the worker and the other tenants.

    python -m bench.hostile                      # both parts; figures in docs/reliability.md
    python -m bench.hostile --part bombs         # worker memory against a 1 GiB body and a gzip bomb
    python -m bench.hostile --part fairness --hanging 500
    python -m bench.hostile --part shared-host --shared 98
    python -m bench.hostile --env CLIENT_MAX_IN_FLIGHT=50   # any HOOKBRIDGE_ setting, without the prefix
    python -m bench.hostile --part streams|recover|pool|feed-scan   # the feed's cases (issue 23)

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
- **pool**: ``--tenants`` clients open 10 streams each (one connection per stream), then another client's
  long-polls: how many streams opened, how many were cut, whether the other client is answered.
- **feed-scan**: ``--loops`` readers of one client loop long-polls with a filter that matches nothing over
  ``--entries`` feed entries: Redis busy, and another client's p50 and worst (``GET /v1/runs``).

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


# The feed, its streams and recover (issue 23) -------------------------------------------------------------
#
# What one tenant's readers cost the API and the other tenants: stalled streams (a socket that never
# reads), recover over a long delivery log, the blocking pool shared by every tenant, and a feed filter
# that matches nothing. The victim (client b) is timed with plain GETs before and during each attack.


def _api_pid(cluster: Cluster) -> int:
    return int(cluster.pids()["api"])


def _rss_mib(pid: int) -> float:
    return round(memory_kib(pid).get("VmRSS", 0) / 1024, 1)


async def _victim_p50(cluster: Cluster, path: str, samples: int) -> tuple[float, float]:
    """Client b's median and worst latency of ``GET path``, ms."""
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        async with cluster.http.get(f"{cluster.api_url}{path}", headers=B_AUTH) as r:
            await r.read()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1), round(max(times), 1)


async def _fill_feed(cluster: Cluster, client: str, count: int, size: int) -> None:
    from redis.asyncio import Redis

    from service.store import bodies, keys

    redis = Redis.from_url(cluster.redis.url)
    blob = "x" * size
    body = bodies.packed(
        f'{{"type":"run.progress","timestamp":"2026-01-01T00:00:00Z","data":{{"blob":"{blob}"}}}}'
    )
    try:
        for start in range(0, count, 5000):
            pipe = redis.pipeline(transaction=False)
            for i in range(start, min(count, start + 5000)):
                fields = {
                    "e": f"evt_fill{i}",
                    "t": "run.progress",
                    "r": "run_fill",
                    "v": "nutrient",
                    "b": body,
                }
                pipe.xadd(keys.client_feed(client), fields)  # type: ignore[arg-type]
            await pipe.execute()
    finally:
        await redis.aclose()


def _stalled(port: int) -> tuple[object, int]:
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /v1/events/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer bench-key\r\n\r\n")
    head = sock.recv(12)
    return sock, int(head[9:12] or b"0")


async def streams_case(stalled: int, hold_s: float, extra: dict[str, str]) -> BenchResult:
    result = BenchResult(
        "hostile tenant: stalled streams",
        f"python -m bench.hostile --part streams --stalled {stalled}",
        "python -m bench.hostile --part streams --stalled 12 --hold-s 5",
    )
    started = time.monotonic()
    async with Cluster(
        "hostile-streams", _overrides(extra), worker=False, simulator=False, receiver=False
    ) as c:
        await _fill_feed(c, "bench", 40, 240_000)  # inline results of 240 KB
        pid = _api_pid(c)
        rss0 = _rss_mib(pid)
        alone = await _victim_p50(c, "/v1/events?limit=1", 30)
        socks, accepted = [], 0
        # Half now, half after hold_s: before issue 23 a stalled stream's slot ran out after its lease
        # (20 s) while the stream stayed open, and the client opened more.
        for batch in (stalled // 2, stalled - stalled // 2):
            for _ in range(batch):
                sock, status = await asyncio.to_thread(_stalled, c.api_port)
                socks.append(sock)
                accepted += status == 200
            if len(socks) < stalled:
                await asyncio.sleep(hold_s)
        rss1 = _rss_mib(pid)
        during = await _victim_p50(c, "/v1/events?limit=1", 30)
        for sock in socks:
            sock.close()  # type: ignore[attr-defined]
    result.add(
        Figure(f"stalled streams open of {len(socks)} tried, {hold_s:.0f} s apart (cap 10)", accepted, ""),
        Figure("API memory growth", round(rss1 - rss0, 1), "MiB"),
        Figure(
            "victim p50 alone / during", during[0], "ms", note=f"alone {alone[0]} ms; worst {during[1]} ms"
        ),
    )
    result.elapsed_s = time.monotonic() - started
    return result


async def recover_case(deliveries: int, concurrent: int, extra: dict[str, str]) -> BenchResult:
    from redis.asyncio import Redis

    from service.store import keys

    result = BenchResult(
        "hostile tenant: recover over a long delivery log",
        f"python -m bench.hostile --part recover --deliveries {deliveries}",
        "python -m bench.hostile --part recover --deliveries 20000",
    )
    started = time.monotonic()
    async with Cluster(
        "hostile-recover", _overrides(extra), worker=False, simulator=False, receiver=False
    ) as c:
        sub_id = await _subscribe(c, "http://127.0.0.1:9/hook", AUTH)
        redis = Redis.from_url(c.redis.url)
        for start in range(0, deliveries, 10_000):
            pipe = redis.pipeline(transaction=False)
            ids = range(start, min(deliveries, start + 10_000))
            pipe.zadd(keys.sub_deliveries(sub_id), {f"dlv_{i:032x}": 1000 + i for i in ids})
            for i in ids:  # a delivery record (ended: what recover reads and skips), as the log holds it
                pipe.hset(
                    keys.delivery(f"dlv_{i:032x}"),
                    mapping={
                        "id": f"dlv_{i:032x}",
                        "status": "succeeded",
                        "sub": sub_id,
                        "url": "http://x/" * 20,
                    },
                )
            await pipe.execute()
        await redis.aclose()
        pid = _api_pid(c)
        rss0 = _rss_mib(pid)
        alone = await _victim_p50(c, "/v1/runs?limit=1", 30)
        calls: list[float] = []
        statuses: dict[int, int] = {}

        async def one_recover() -> None:
            cursor = None
            while True:  # a client of today's API follows next_cursor; before, one call did it all
                t0 = time.perf_counter()
                body = {"since": "1970-01-01T00:00:00Z", **({"cursor": cursor} if cursor else {})}
                async with c.http.post(
                    f"{c.api_url}/v1/subscriptions/{sub_id}/recover", json=body, headers=AUTH
                ) as r:
                    answer = await r.json()
                    statuses[r.status] = statuses.get(r.status, 0) + 1
                    if r.status == 429:  # the send rate: wait as told, then the same page again
                        await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
                        continue
                calls.append(time.perf_counter() - t0)
                cursor = answer.get("next_cursor") if isinstance(answer, dict) else None
                if not cursor:
                    return

        peak = rss0
        victim: list[tuple[float, float]] = []

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, _rss_mib(pid))
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        attack = asyncio.gather(*(one_recover() for _ in range(concurrent)))
        while not attack.done():
            victim.append(await _victim_p50(c, "/v1/runs?limit=1", 5))
        await attack
        watcher.cancel()
    result.add(
        Figure(
            f"longest recover request ({len(calls)} requests, {concurrent} at once)",
            round(max(calls), 2),
            "s",
            note=f"answers {statuses}",
        ),
        Figure("API memory peak over idle", round(peak - rss0, 1), "MiB"),
        Figure(
            "victim p50 during",
            statistics.median(v[0] for v in victim),
            "ms",
            note=f"alone {alone[0]} ms; worst {max(v[1] for v in victim)} ms",
        ),
    )
    result.elapsed_s = time.monotonic() - started
    return result


async def pool_case(tenants: int, extra: dict[str, str]) -> BenchResult:
    result = BenchResult(
        "hostile tenants: the feed's blocking pool",
        f"python -m bench.hostile --part pool --tenants {tenants}",
        "python -m bench.hostile --part pool --tenants 5",
    )
    keys_env = ",".join(f"t{i}:t{i}-key" for i in range(tenants))
    overrides = {**_overrides(extra), "API_KEYS": f"{_overrides(extra)['API_KEYS']},{keys_env}"}
    started = time.monotonic()
    async with Cluster("hostile-pool", overrides, worker=False, simulator=False, receiver=False) as c:
        alone = await _victim_p50(c, "/v1/events?wait=0.05", 10)
        opened: list[aiohttp.ClientResponse] = []
        statuses: dict[int | str, int] = {}
        # One connection per stream, as many as are tried: aiohttp's default of 100 connections per
        # session made the 101st open wait for a connection that an open stream never gives back (the
        # case hung before it measured anything). Every open and every victim request has a deadline.
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=tenants * 10 + 10),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
        )

        async def open_stream(i: int) -> None:
            try:
                async with asyncio.timeout(15):
                    r = await session.get(
                        f"{c.api_url}/v1/events/stream", headers={"Authorization": f"Bearer t{i}-key"}
                    )
            except (TimeoutError, aiohttp.ClientError) as exc:
                statuses[type(exc).__name__] = statuses.get(type(exc).__name__, 0) + 1
                return
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if r.status == 200:
                opened.append(r)
            else:
                r.release()

        try:
            for i in range(tenants):  # tenant by tenant, each its whole quota of 10 at once
                await asyncio.gather(*(open_stream(i) for _ in range(10)))
            victim_codes: dict[int | str, int] = {}
            times = []
            for _ in range(10):
                t0 = time.perf_counter()
                try:
                    async with asyncio.timeout(15):
                        async with c.http.get(f"{c.api_url}/v1/events?wait=0.05", headers=B_AUTH) as r:
                            victim_codes[r.status] = victim_codes.get(r.status, 0) + 1
                            await r.read()
                except (TimeoutError, aiohttp.ClientError) as exc:
                    victim_codes[type(exc).__name__] = victim_codes.get(type(exc).__name__, 0) + 1
                times.append((time.perf_counter() - t0) * 1000)
            # Are the streams opened still open (not cut when the pool ran out)? Each sends its first
            # comment line at once; a cut one is at its end.
            cut = sum(1 for r in opened if r.content.is_eof())
        finally:
            for r in opened:
                r.close()
            await session.close()
    result.add(
        Figure(
            f"streams opened by {tenants} tenants x 10", len(opened), "", note=f"answers {dict(statuses)}"
        ),
        Figure("... of them cut by the time the victim was timed", cut, ""),
        Figure(
            "victim long-polls answered 200 of 10",
            victim_codes.get(200, 0),
            "",
            note=f"answers {dict(victim_codes)}",
        ),
        Figure(
            "victim p50 during",
            round(statistics.median(times), 1),
            "ms",
            note=f"alone {alone[0]} ms; worst {round(max(times), 1)} ms",
        ),
    )
    result.elapsed_s = time.monotonic() - started
    return result


async def feed_scan_case(entries: int, loops: int, attack_s: float, extra: dict[str, str]) -> BenchResult:
    from redis.asyncio import Redis

    result = BenchResult(
        "hostile tenant: a feed filter that matches nothing",
        f"python -m bench.hostile --part feed-scan --entries {entries} --loops {loops}",
        "python -m bench.hostile --part feed-scan --entries 30000 --loops 2 --attack-s 5",
    )
    started = time.monotonic()
    async with Cluster("hostile-scan", _overrides(extra), worker=False, simulator=False, receiver=False) as c:
        await _fill_feed(c, "bench", entries, 40)
        redis = Redis.from_url(c.redis.url)
        cpu0, t0 = await redis.info("cpu"), time.monotonic()
        alone = await _victim_p50(c, "/v1/runs?limit=1", 30)
        cpu1 = await redis.info("cpu")
        idle = sum(cpu1[k] - cpu0[k] for k in ("used_cpu_sys", "used_cpu_user")) / (time.monotonic() - t0)
        requests = 0

        async def loop() -> None:
            nonlocal requests
            t_end = time.monotonic() + attack_s
            while time.monotonic() < t_end:
                async with c.http.get(f"{c.api_url}/v1/events?run_id=run_none&wait=5", headers=AUTH) as r:
                    await r.read()
                requests += 1

        cpu0 = await redis.info("cpu")
        t0 = time.monotonic()
        attack = asyncio.gather(*(loop() for _ in range(loops)))
        victim = []
        while not attack.done():
            victim.append(await _victim_p50(c, "/v1/runs?limit=1", 5))
        await attack
        cpu1 = await redis.info("cpu")
        busy = sum(cpu1[k] - cpu0[k] for k in ("used_cpu_sys", "used_cpu_user")) / (time.monotonic() - t0)
        await redis.aclose()
    result.add(
        Figure(
            f"Redis busy with {loops} looping readers",
            round(busy * 100),
            "%",
            note=f"{requests} requests; {round(idle * 100)} % while the victim alone was timed",
        ),
        Figure(
            "victim p50 during",
            statistics.median(v[0] for v in victim),
            "ms",
            note=f"alone {alone[0]} ms; worst {max(v[1] for v in victim)} ms",
        ),
    )
    result.elapsed_s = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part",
        choices=("bombs", "fairness", "streams", "recover", "pool", "feed-scan", "shared-host", "all"),
        default="all",
    )
    parser.add_argument("--stalled", type=int, default=50, help="streams: stalled streams tried")
    parser.add_argument("--hold-s", type=float, default=25.0, help="streams: how long they are tried")
    parser.add_argument("--deliveries", type=int, default=200_000, help="recover: the log's length")
    parser.add_argument("--concurrent", type=int, default=4, help="recover: calls at once")
    parser.add_argument("--tenants", type=int, default=21, help="pool: tenants of 10 streams each")
    parser.add_argument("--entries", type=int, default=300_000, help="feed-scan: entries in the feed")
    parser.add_argument("--loops", type=int, default=10, help="feed-scan: looping readers")
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
        if args.part in ("streams", "all"):
            out.append(await streams_case(args.stalled, args.hold_s, extra))
        if args.part in ("recover", "all"):
            out.append(await recover_case(args.deliveries, args.concurrent, extra))
        if args.part in ("pool", "all"):
            out.append(await pool_case(args.tenants, extra))
        if args.part in ("feed-scan", "all"):
            out.append(await feed_scan_case(args.entries, args.loops, args.attack_s, extra))
        return out

    for result in run_main(run()):
        print_result(result, as_json=args.json)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
