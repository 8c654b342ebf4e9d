"""The simulator app as a whole: request log, control routes, injected faults, dropped connections."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette

from service.core.clock import ManualClock
from service.simulator import SimulatorConfig, create_app
from tests.conftest import eventually

NUTRIENT_AUTH = {"Authorization": "Bearer sim-nutrient-key"}
UPTIQ_AUTH = {"X-Api-Key": "sim-uptiq-key"}
UPTIQ_BODY = {"documentType": "W2", "fileUrl": "https://example.com/w2.pdf"}
CLOUDSQUID_RUN = "/cloudsquid/api/projects/p/tables/3fa85f64-5717-4562-b3fc-2c963f66afa6/run/" + (
    "3fa85f64-5717-4562-b3fc-2c963f66afa6"
)


def asgi_client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(SimulatorConfig(duration_s=(0.05, 0.1)))) as c:
        yield c


async def nutrient_get(client: httpx.AsyncClient) -> httpx.Response:
    return await client.get("/nutrient/extraction/runs/UNKNOWN", headers=NUTRIENT_AUTH)


class TestRequestLog:
    async def test_every_vendor_request_is_logged_with_arrival_time(self, client: httpx.AsyncClient) -> None:
        before = time.time()
        await nutrient_get(client)
        await client.post("/uptiq/extract", headers=UPTIQ_AUTH, json=UPTIQ_BODY)
        await client.get(CLOUDSQUID_RUN)
        await client.get("/_sim/stats")
        after = time.time()

        entries = (await client.get("/_sim/requests")).json()["data"]
        assert [(e["vendor"], e["method"], e["status"]) for e in entries] == [
            ("nutrient", "GET", 404),
            ("uptiq", "POST", 200),
            ("cloudsquid", "GET", 401),
        ]
        assert entries[0]["path"] == "/nutrient/extraction/runs/UNKNOWN"
        assert all(before <= e["t"] <= after for e in entries)
        assert [e["t"] for e in entries] == sorted(e["t"] for e in entries)

        only_uptiq = (await client.get("/_sim/requests", params={"vendor": "uptiq"})).json()["data"]
        assert [e["vendor"] for e in only_uptiq] == ["uptiq"]

        assert (await client.delete("/_sim/requests")).status_code == 204
        assert (await client.get("/_sim/requests")).json()["data"] == []

    async def test_time_is_taken_on_arrival_not_after_latency(self) -> None:
        app = create_app(SimulatorConfig(latency_ms=(200.0, 200.0)))
        async with asgi_client(app) as client:
            sent = time.time()
            await nutrient_get(client)
            answered = time.time()
            entry = (await client.get("/_sim/requests")).json()["data"][0]
        assert answered - sent >= 0.2
        assert entry["t"] - sent < 0.1

    async def test_faulted_requests_are_logged(self) -> None:
        async with asgi_client(create_app(SimulatorConfig(nutrient_rps=1, nutrient_burst=1))) as client:
            assert (await nutrient_get(client)).status_code == 404
            assert (await nutrient_get(client)).status_code == 429
            entry = (await client.get("/_sim/requests")).json()["data"][1]
        assert entry["status"] == 429
        assert entry["fault"] == "429"


class TestControlRoutes:
    async def test_config_get_and_patch(self, client: httpx.AsyncClient) -> None:
        config = (await client.get("/_sim/config")).json()
        assert config["duration_s"] == [0.05, 0.1]
        patched = await client.patch("/_sim/config", json={"rate_5xx": 1, "vendors_faulty": ["uptiq"]})
        assert patched.status_code == 200
        assert patched.json()["rate_5xx"] == 1.0
        assert patched.json()["vendors_faulty"] == ["uptiq"]
        assert (await nutrient_get(client)).status_code == 404
        assert (await client.get("/uptiq/document-extractions/x", headers=UPTIQ_AUTH)).status_code >= 500

    @pytest.mark.parametrize("body", [{"rate_5xx": "lots"}, {"rate_429": 1}, {"nope": 1}, [1]])
    async def test_bad_patch_is_400_and_changes_nothing(self, client: httpx.AsyncClient, body: Any) -> None:
        before = (await client.get("/_sim/config")).json()
        response = await client.patch("/_sim/config", json=body)
        assert response.status_code == 400
        assert response.json()["error"]
        assert (await client.get("/_sim/config")).json() == before

    async def test_stats_count_runs_per_vendor_and_status(self, client: httpx.AsyncClient) -> None:
        for name in ("a.pdf", "fail.pdf", "stuck.pdf"):
            await client.post(
                "/nutrient/extraction/parse/async", headers=NUTRIENT_AUTH, files={"file": (name, b"%PDF")}
            )
        await client.post("/uptiq/extract", headers=UPTIQ_AUTH, json=UPTIQ_BODY)
        expected = {
            "nutrient": {"done": 1, "error": 1, "running": 1},
            "cloudsquid": {},
            "uptiq": {"Processed": 1},
            "textract": {},
            "google_docai": {},
            "azure_di": {},
            "llamaparse": {},
        }

        async def counted() -> bool:
            return bool((await client.get("/_sim/stats")).json() == expected)

        await eventually(counted, timeout=5, interval=0.01, what=f"stats {expected}")


class TestFaults:
    async def test_5xx(self) -> None:
        async with asgi_client(create_app(SimulatorConfig(rate_5xx=1.0))) as client:
            statuses = {(await nutrient_get(client)).status_code for _ in range(30)}
        assert statuses <= {500, 502, 503}
        assert len(statuses) > 1

    async def test_faults_apply_only_to_faulty_vendors(self) -> None:
        config = SimulatorConfig(rate_5xx=1.0, vendors_faulty=frozenset({"cloudsquid"}))
        async with asgi_client(create_app(config)) as client:
            assert (await nutrient_get(client)).status_code == 404
            assert (await client.get(CLOUDSQUID_RUN)).status_code >= 500

    async def test_seeded_faults_repeat(self) -> None:
        async def sequence(seed: int) -> list[int]:
            config = SimulatorConfig(seed=seed, rate_drop=0.0, rate_5xx=0.5)
            async with asgi_client(create_app(config)) as client:
                return [(await nutrient_get(client)).status_code for _ in range(40)]

        first, again, other = await sequence(1), await sequence(1), await sequence(2)
        assert first == again
        assert first != other
        assert 404 in set(first)
        assert set(first) - {404} <= {500, 502, 503}

    async def test_patching_the_seed_restarts_the_sequence(self, client: httpx.AsyncClient) -> None:
        await client.patch("/_sim/config", json={"seed": 3, "rate_5xx": 0.5})
        first = [(await nutrient_get(client)).status_code for _ in range(20)]
        await client.patch("/_sim/config", json={"seed": 3})
        assert [(await nutrient_get(client)).status_code for _ in range(20)] == first

    async def test_drop_in_process_raises_the_client_side_error(self) -> None:
        async with asgi_client(create_app(SimulatorConfig(rate_drop=1.0))) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await nutrient_get(client)
            entry = (await client.get("/_sim/requests")).json()["data"][0]
        assert entry["fault"] == "drop"
        assert entry["status"] is None


class TestRateLimit:
    """429s come from a token bucket per vendor and API key, on the simulator's clock."""

    @staticmethod
    def limited(clock: ManualClock, **knobs: Any) -> httpx.AsyncClient:
        return asgi_client(create_app(SimulatorConfig(**knobs), clock=clock))

    async def test_a_burst_then_429_without_retry_after_in_each_vendor_shape(self) -> None:
        knobs = {
            f"{v}_{k}": n for v in ("nutrient", "cloudsquid", "uptiq") for k, n in (("rps", 1), ("burst", 2))
        }
        async with self.limited(ManualClock(), **knobs) as client:
            nutrient = [await nutrient_get(client) for _ in range(3)]
            uptiq = [await client.get("/uptiq/document-extractions/x", headers=UPTIQ_AUTH) for _ in range(3)]
            cloudsquid = [await client.get(CLOUDSQUID_RUN) for _ in range(3)]
            control = await client.get("/_sim/config")
        assert [r.status_code for r in nutrient] == [404, 404, 429]
        assert [r.status_code for r in uptiq] == [404, 404, 429]
        assert [r.status_code for r in cloudsquid] == [401, 401, 429]
        # No vendor documents Retry-After: the simulator never sends one.
        assert all("retry-after" not in r.headers for r in (nutrient[2], uptiq[2], cloudsquid[2]))
        assert nutrient[2].json()["errorMessage"] == "rate limit exceeded for your subscription"
        assert nutrient[2].json()["requestId"]
        assert uptiq[2].json()["status"] == "error"
        assert cloudsquid[2].json()["errorMessage"]
        assert control.status_code == 200  # control routes are never limited

    async def test_the_bucket_refills_at_its_rate(self) -> None:
        clock = ManualClock()
        async with self.limited(clock, nutrient_rps=2, nutrient_burst=3) as client:
            assert [(await nutrient_get(client)).status_code for _ in range(4)] == [404, 404, 404, 429]
            clock.advance(0.49)
            assert (await nutrient_get(client)).status_code == 429  # 0.98 of a token
            clock.advance(0.02)
            assert (await nutrient_get(client)).status_code == 404
            assert (await nutrient_get(client)).status_code == 429
            clock.advance(100)  # refills to the burst, not beyond
            assert [(await nutrient_get(client)).status_code for _ in range(4)] == [404, 404, 404, 429]

    async def test_polls_and_submits_of_one_nutrient_key_share_the_bucket(self) -> None:
        async with self.limited(ManualClock(), nutrient_rps=1, nutrient_burst=2) as client:
            submit = await client.post(
                "/nutrient/extraction/parse/async", headers=NUTRIENT_AUTH, files={"file": ("a.pdf", b"%PDF")}
            )
            poll = await client.get(f"/nutrient/extraction/runs/{submit.json()['id']}", headers=NUTRIENT_AUTH)
            again = await client.post(
                "/nutrient/extraction/parse/async", headers=NUTRIENT_AUTH, files={"file": ("b.pdf", b"%PDF")}
            )
        assert [submit.status_code, poll.status_code, again.status_code] == [202, 200, 429]

    async def test_each_key_and_each_vendor_has_its_own_bucket(self) -> None:
        async with self.limited(ManualClock(), nutrient_rps=1, nutrient_burst=1) as client:
            assert (await nutrient_get(client)).status_code == 404
            assert (await nutrient_get(client)).status_code == 429
            other_key = await client.get(
                "/nutrient/extraction/runs/UNKNOWN", headers={"Authorization": "Bearer another"}
            )
            assert other_key.status_code == 401  # its own bucket had a token
            assert (await client.get("/uptiq/document-extractions/x", headers=UPTIQ_AUTH)).status_code == 404

    async def test_patching_a_limit_refills_the_buckets(self) -> None:
        async with self.limited(ManualClock(), nutrient_rps=1, nutrient_burst=1) as client:
            await nutrient_get(client)
            assert (await nutrient_get(client)).status_code == 429
            await client.patch("/_sim/config", json={"nutrient_burst": 2})
            assert [(await nutrient_get(client)).status_code for _ in range(3)] == [404, 404, 429]
            await client.patch("/_sim/config", json={"nutrient_rps": 0})  # 0 lifts the limit
            assert {(await nutrient_get(client)).status_code for _ in range(20)} == {404}


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.mark.parametrize("http", ["h11", "httptools"])
async def test_dropped_connection_over_a_real_socket(http: str) -> None:
    app = create_app(SimulatorConfig(rate_drop=1.0, vendors_faulty=frozenset({"nutrient"})))
    sock = _free_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, http=http, ws="none", lifespan="off", log_level="warning", access_log=False)
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        deadline = time.monotonic() + 10.0
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            assert not serving.done(), serving
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(3):
                with pytest.raises(httpx.TransportError) as caught:
                    await client.post(
                        "/nutrient/extraction/parse/async",
                        headers=NUTRIENT_AUTH,
                        files={"file": ("a.pdf", b"%PDF" * 1000)},
                    )
                assert isinstance(caught.value, httpx.RemoteProtocolError | httpx.ReadError)
            # The server lives on: other vendors and the control routes still answer.
            assert (await client.post("/uptiq/extract", json={})).status_code == 401
            entries = (await client.get("/_sim/requests")).json()["data"]
        assert [e["fault"] for e in entries] == ["drop", "drop", "drop", None]
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10.0)
        sock.close()
