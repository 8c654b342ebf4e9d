"""The vendor conformance suite: what every adapter must do, run through the real API and worker against
the vendor's own simulator.

Use it by subclassing :class:`VendorConformance` in a test module (pytest collects the subclass). A
vendor that hookbridge's built-in simulator serves needs its name alone: the base path below the
simulator's root and the key the simulator expects are the simulator's own::

    class TestLlamaParse(VendorConformance):
        vendor = "llamaparse"

A vendor with a simulator of its own says where it runs and what settings it needs::

    class TestAcme(VendorConformance):
        vendor = "acme"

        @pytest_asyncio.fixture
        async def vendor_root(self, servers: Servers) -> str:
            return await servers.start(acme_simulator(), free_port())

        def env(self) -> dict[str, str]:
            return {"HOOKBRIDGE_ACME_API_KEY": "..."}

A run's ``operation`` is the vendor's first, and its ``options`` the first example of the vendor's options
model where that model requires a field (``json_schema_extra={"examples": [...]}``); ``run_body`` can say
otherwise.

The simulator decides each run's outcome from the document's filename, as hookbridge's own does: a name
with ``fail`` ends in the vendor's failure, one with ``stuck`` never ends, any other succeeds. Faults
(429 storms, 5xx, dropped connections) come from a proxy of the suite's own between the worker and the
simulator (``proxy.py``), so they are the same for every vendor and need no knob in its simulator.
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.simulator.app import PREFIXES
from service.testing.fixtures import (
    Receiver,
    Stack,
    StackFactory,
    eventually,
    required_options,
    simulator_api_key,
)
from service.testing.proxy import FaultProxy
from service.vendors import registry
from service.vendors.base import DeletesRuns

FAST = {"POLL_INITIAL_S": "50ms", "POLL_MAX_S": "200ms", "PAUSE_MAX_S": "1s"}


@dataclass
class Harness:
    proxy: FaultProxy
    stack: Stack
    suite: VendorConformance

    async def submit(self, filename: str, **fields: Any) -> dict[str, Any]:
        body = self.suite.run_body(filename)
        body.update(fields)
        response = await self.stack.api.post("/v1/runs", json=body)
        assert response.status_code == 202, response.text
        return dict(response.json())

    def requests(self, marker: str = "") -> list[str]:
        return [f"{e.method} {e.path}" for e in self.proxy.log if marker in e.path]


class VendorConformance:
    vendor: ClassVar[str]
    # The vendor's base URL below its simulator's root; None: the built-in simulator's prefix for it.
    base_path: ClassVar[str | None] = None
    cancel_marker: ClassVar[str] = "cancel"  # in the path of the vendor's cancel request
    # The adapter's ``submit_idempotent``: whether a submit that may have reached the vendor is sent again.
    submit_idempotent: ClassVar[bool] = False
    # Whether the adapter reads the vendor's Retry-After on a poll's 200 (PollResult.retry_after_s).
    poll_retry_after: ClassVar[bool] = False
    # The path of the vendor's status field in a poll's JSON answer, and the marker of its delete request
    # (None: any DELETE where the adapter deletes runs, base.DeletesRuns; else the vendor has no API to
    # delete its copy of a run).
    status_path: ClassVar[tuple[str, ...]] = ("status",)
    delete_marker: ClassVar[str | None] = None
    # False: the vendor keeps its own copy and has no API to delete it (Textract): the run must say
    # ``vendor_deleted`` false with the reason, even where the adapter deletes what hookbridge staged.
    vendor_deletes: ClassVar[bool] = True

    # What a subclass provides ---------------------------------------------------------------------

    @pytest_asyncio.fixture
    async def vendor_root(self, simulator: str) -> str:
        """The root URL of the vendor's simulator (hookbridge's own, unless overridden)."""
        return simulator

    def env(self) -> dict[str, str]:
        """Settings the vendor needs besides its base URL (API key, its own settings); by default the key
        the built-in simulator expects, where it expects one."""
        key = simulator_api_key(self.vendor)
        return {} if key is None else {f"HOOKBRIDGE_{self.vendor.upper()}_API_KEY": key}

    def run_body(self, filename: str) -> dict[str, Any]:
        """A run request for a document with this filename."""
        content = base64.b64encode(b"%PDF-1.4 conformance " + filename.encode()).decode()
        spec = registry.vendors()[self.vendor]
        body: dict[str, Any] = {
            "vendor": self.vendor,
            "operation": spec.operations[0],
            "document": {"content_base64": content, "filename": filename, "media_type": "application/pdf"},
        }
        options = required_options(self.vendor)
        if options:
            body["options"] = options
        return body

    def vendor_base_path(self) -> str:
        return PREFIXES.get(self.vendor, "") if self.base_path is None else self.base_path

    # The harness ----------------------------------------------------------------------------------

    @pytest_asyncio.fixture
    async def harness(self, make_stack: StackFactory, servers: Servers, vendor_root: str) -> Any:
        proxy = FaultProxy(vendor_root)
        proxy_url = await servers.start(proxy, free_port())

        async def make(*, worker: bool = True, **overrides: str) -> Harness:
            prefix = f"HOOKBRIDGE_{self.vendor.upper()}_"
            env = {prefix + k: v for k, v in FAST.items()}
            env[prefix + "BASE_URL"] = proxy_url + self.vendor_base_path()
            env.update(self.env())
            env.update(overrides)
            return Harness(proxy, await make_stack(worker=worker, **env), self)

        return make

    # The suite ------------------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_registered_vendor_is_served_by_the_api(self, harness: Any) -> None:
        h: Harness = await harness(worker=False)  # the API alone
        vendor = h.stack.settings.vendor(self.vendor)
        assert vendor.spec is not None and vendor.operations
        doc = (await h.stack.api.get("/openapi.json")).json()
        schemas = doc["components"]["schemas"]
        assert self.vendor in schemas["Vendor"]["enum"]
        assert set(vendor.operations) <= set(schemas["Operation"]["enum"])
        variant = doc["components"]["schemas"]["RunRequest"]["discriminator"]["mapping"][self.vendor]
        operation = schemas[variant.rsplit("/", 1)[1]]["properties"]["operation"]
        assert operation.get("enum", [operation.get("const")]) == list(vendor.operations)
        bad = await h.stack.api.post("/v1/runs", json={**h.suite.run_body("x.pdf"), "operation": "nope"})
        assert bad.status_code == 422 and bad.json()["code"] == "validation_error", bad.text
        listed = await h.stack.api.get("/v1/runs", params={"vendor": self.vendor})
        assert listed.status_code == 200, listed.text

    @pytest.mark.asyncio
    async def test_submit_and_poll_to_succeeded(self, harness: Any, receiver: Receiver) -> None:
        h: Harness = await harness()
        await h.stack.subscribe(receiver.url)
        run = await h.submit("conformance-ok.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done
        assert done["vendor_run_id"]
        result = await h.stack.api.get(f"/v1/runs/{run['id']}/result")
        assert result.status_code == 200 and result.content, result.text

        async def called_back() -> bool:
            return any(e["data"]["run"]["id"] == run["id"] for e in receiver.events("run.succeeded"))

        await eventually(called_back, what="run.succeeded delivered")

    @pytest.mark.asyncio
    async def test_poll_to_failed(self, harness: Any) -> None:
        h: Harness = await harness()
        run = await h.submit("conformance-fail.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "failed", done
        assert done["error"]["code"] == "vendor_failed", done
        assert done["error"]["message"], done

    @pytest.mark.asyncio
    async def test_cancel(self, harness: Any) -> None:
        h: Harness = await harness()
        run = await h.submit("conformance-stuck.pdf")
        await h.stack.wait_status(run["id"], "running")
        response = await h.stack.api.post(f"/v1/runs/{run['id']}/cancel")
        assert response.status_code == 200, response.text
        done = await h.stack.wait_status(run["id"], "canceled")
        assert done["status"] == "canceled"
        if h.stack.settings.vendor(self.vendor).supports_cancel:

            async def told() -> bool:
                return any(
                    e.method == "POST" and self.cancel_marker in e.path and e.status and e.status < 300
                    for e in h.proxy.log
                )

            await eventually(told, what="the vendor was told to cancel")

    @pytest.mark.asyncio
    async def test_429_pauses_the_vendor_and_fails_nothing(self, harness: Any) -> None:
        h: Harness = await harness()
        started = h.proxy.storm(1.0, retry_after="1")
        runs = [await h.submit(f"conformance-429-{i}.pdf") for i in range(5)]
        for run in runs:
            done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
            assert done["status"] == "succeeded", done
        during = h.proxy.between(started, started + 1.0)
        assert during and all(e.status == 429 for e in during)
        # Five runs due together, yet after the first 429 the vendor was left alone until Retry-After.
        assert len(during) <= 5, [(round(e.t - started, 3), e.path) for e in during]

    def _transient(self, h: Harness, faults: list[int | str]) -> None:
        """Faults that are transient for this vendor: without idempotency a dropped submit is ambiguous
        (its own test below), so the drop then waits for a poll."""
        h.proxy.faults = faults
        if not self.submit_idempotent:
            h.proxy.drop_methods = frozenset({"GET"})

    @pytest.mark.asyncio
    async def test_transient_faults_are_retried(self, harness: Any) -> None:
        h: Harness = await harness()
        self._transient(h, [503, "drop", 502, 500])
        run = await h.submit("conformance-faults.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done
        assert not h.proxy.faults  # every fault was met

    @pytest.mark.asyncio
    async def test_transient_faults_in_a_row_fail_the_run(self, harness: Any) -> None:
        h: Harness = await harness(HOOKBRIDGE_VENDOR_MAX_TRANSIENT_FAILURES="3")
        self._transient(h, [503, "drop", 503, 503, 503, 503])
        run = await h.submit("conformance-down.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "failed", done
        assert done["error"]["code"] == "vendor_unreachable", done

    @pytest.mark.asyncio
    async def test_a_dropped_submit_is_sent_again_only_with_idempotency(self, harness: Any) -> None:
        h: Harness = await harness()
        h.proxy.faults = ["drop"]  # the first request: the submit (its first POST)
        run = await h.submit("conformance-dropped.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        dropped = [e for e in h.proxy.log if e.fault == "drop"]
        assert len(dropped) == 1 and dropped[0].method == "POST", h.requests()
        if self.submit_idempotent:
            assert done["status"] == "succeeded", done
        else:
            assert done["status"] == "failed" and done["error"]["code"] == "vendor_submit_ambiguous", done
            assert [e.method for e in h.proxy.log] == ["POST"], h.requests()  # never asked again

    @pytest.mark.asyncio
    async def test_timeout(self, harness: Any) -> None:
        h: Harness = await harness(**{f"HOOKBRIDGE_{self.vendor.upper()}_MAX_RUN_S": "1s"})
        run = await h.submit("conformance-stuck-timeout.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "failed", done
        assert done["error"]["code"] == "timed_out", done
        if h.stack.settings.vendor(self.vendor).supports_cancel:
            assert any(self.cancel_marker in e.path for e in h.proxy.log), h.requests()

    # Protocol v2 -----------------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_every_request_meets_the_proxy(self, harness: Any) -> None:
        """The proxy forwards Host, so an absolute URL the vendor hands out (an Operation-Location) names
        the proxy: every request of a run, the polls included, passes through it and its faults."""
        h: Harness = await harness()
        run = await h.submit("conformance-through.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done
        methods = [e.method for e in h.proxy.log]
        assert "POST" in methods and "GET" in methods[methods.index("POST") :], h.requests()
        assert done["polls"] >= 1 and methods.count("GET") >= done["polls"], (done["polls"], h.requests())

    @pytest.mark.asyncio
    async def test_retry_after_on_a_poll_is_honoured(self, harness: Any) -> None:
        """A vendor's "ask again in N s" on a poll's 200 sets the next poll, past POLL_MAX_S (200 ms
        here) and up to PAUSE_MAX_S (1 s here)."""
        if not self.poll_retry_after:
            pytest.skip(f"{self.vendor} documents no Retry-After on a poll")
        h: Harness = await harness()
        h.proxy.get_headers = {"Retry-After": "1"}
        run = await h.submit("conformance-stuck-retry-after.pdf")
        await h.stack.wait_status(run["id"], "running")

        async def polled_thrice() -> bool:
            return len([e for e in h.proxy.log if e.method == "GET"]) >= 3

        await eventually(polled_thrice, timeout=10, what="three polls")
        await h.stack.api.post(f"/v1/runs/{run['id']}/cancel")
        polls = [e.t for e in h.proxy.log if e.method == "GET"]
        gaps = [b - a for a, b in itertools.pairwise(polls)]
        assert all(gap >= 0.95 for gap in gaps[:2]), gaps  # not the 50-200 ms of the schedule

    @pytest.mark.asyncio
    async def test_an_answer_past_the_cap_fails_the_run_unread(self, harness: Any) -> None:
        """``{V}_MAX_ANSWER_BYTES``: a longer answer is refused as it arrives (result_too_large), never
        held whole."""
        h: Harness = await harness(**{f"HOOKBRIDGE_{self.vendor.upper()}_MAX_ANSWER_BYTES": "2048"})
        h.proxy.get_padding = 64 * 1024
        run = await h.submit("conformance-large.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "failed" and done["error"]["code"] == "result_too_large", done

    @pytest.mark.asyncio
    async def test_zero_retention_deletes_the_vendors_copy(self, harness: Any) -> None:
        """Zero retention: the vendor's copy is deleted once the run ends, and the run says so only when
        the vendor confirmed it; a vendor without a delete API leaves ``vendor_deleted`` false, saying
        why."""
        h: Harness = await harness()
        run = await h.submit("conformance-zero.pdf", zero_retention=True)
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done

        async def told() -> dict[str, Any] | None:
            now = (await h.stack.api.get(f"/v1/runs/{run['id']}")).json()
            return now if now["vendor_deleted"] or now["vendor_delete_error"] else None

        after = await eventually(told, what="the vendor's copy handled")
        adapter = h.stack.worker.adapters[self.vendor] if h.stack.worker is not None else None
        marker = self.delete_marker
        if marker is None and isinstance(adapter, DeletesRuns) and self.vendor_deletes:
            marker = ""
        if marker is None:
            assert after["vendor_deleted"] is False and after["vendor_delete_error"], after
            return
        assert after["vendor_deleted"] is True, after
        deletes = [e for e in h.proxy.log if e.method == "DELETE" and marker in e.path]
        assert deletes and deletes[-1].status is not None and deletes[-1].status < 300, h.requests()

    @pytest.mark.asyncio
    async def test_an_unknown_status_is_running(self, harness: Any) -> None:
        """A status the vendor never documented is neither an end nor a fault: the run polls on."""
        h: Harness = await harness()
        h.proxy.status_path = self.status_path
        h.proxy.status_value = "some_status_nobody_documented"
        h.proxy.status_count = 3
        run = await h.submit("conformance-unknown-status.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done
        assert h.proxy.status_count == 0, h.requests()  # three answers said it
        assert done["polls"] >= 4, done
