"""Every vendor end to end through the API: API → Redis → worker → adapter → simulator → signed callback."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from service.dev.embedded_redis import free_port
from service.observability.metrics import REGISTRY
from service.store import keys
from tests.conftest import ClockedFactory, Receiver, Stack, StackFactory, eventually, store_client

VENDORS = ["nutrient", "cloudsquid", "uptiq"]
# What each simulated vendor reports once its run is over, as GET /_sim/stats counts it.
VENDOR_DONE = {"nutrient": "done", "cloudsquid": "done", "uptiq": "Processed"}


def fields_of(vendor: str, result: dict[str, Any]) -> dict[str, Any]:
    """Where each vendor puts the extracted fields in its result."""
    if vendor == "nutrient":
        return dict(result["output"]["fields"])
    if vendor == "uptiq":
        return dict(result["extractedData"])
    return result  # Cloudsquid: the DataRow's data object itself


def sent_bytes(filename: str) -> bytes:
    return b"%PDF-1.4 test " + filename.encode()  # what Stack.submit sends


async def callbacks(receiver: Receiver, event_type: str, run_id: str) -> list[Any]:
    return [r for r in receiver.received if r.json()["type"] == event_type and _run_id(r.json()) == run_id]


def _run_id(event: dict[str, Any]) -> str:
    return str(event["data"]["run"]["id"])


async def sim_stats(stack: Stack, vendor: str) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        stats: dict[str, int] = (await sim.get("/_sim/stats")).json()[vendor]
    return stats


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_run_succeeds_with_a_verified_callback_carrying_the_result(
    stack: Stack, receiver: Receiver, vendor: str
) -> None:
    sub = await stack.subscribe(receiver.url)
    run = await stack.submit(vendor, filename="statement.pdf", metadata={"ref": vendor})

    delivered = (
        await eventually(lambda: callbacks(receiver, "run.succeeded", run["id"]), what="run.succeeded")
    )[0]
    payload = Webhook(sub["secret"]).verify(delivered.body, delivered.headers)
    assert payload["data"]["run"]["vendor"] == vendor and payload["data"]["run"]["status"] == "succeeded"
    assert payload["data"]["run"]["metadata"] == {"ref": vendor}
    fields = fields_of(vendor, payload["data"]["result"])
    assert fields["sha256"] == hashlib.sha256(sent_bytes("statement.pdf")).hexdigest()
    assert fields["invoice_number"].startswith("INV-")

    final = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["vendor_run_id"] and final["vendor_status"] == VENDOR_DONE[vendor]
    stored = await stack.api.get(f"/v1/runs/{run['id']}/result")
    assert stored.status_code == 200 and stored.json() == payload["data"]["result"]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_vendor_failure_reaches_failed_with_the_vendor_message(
    stack: Stack, receiver: Receiver, vendor: str
) -> None:
    sub = await stack.subscribe(receiver.url)
    run = await stack.submit(vendor, filename="fail-smudged.pdf")

    final = await stack.wait_status(run["id"], "failed")
    assert final["error"]["code"] == "vendor_failed"
    assert "simulated failure: unreadable document" in final["error"]["message"]
    if vendor == "uptiq":
        assert "documentQuality" in final["error"]["message"]
    delivered = (await eventually(lambda: callbacks(receiver, "run.failed", run["id"]), what="run.failed"))[0]
    payload = Webhook(sub["secret"]).verify(delivered.body, delivered.headers)
    assert payload["data"]["run"]["error"] == final["error"]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_canceled_run_never_calls_back_succeeded(
    stack: Stack, receiver: Receiver, vendor: str
) -> None:
    await stack.subscribe(receiver.url)
    # slow-: the vendor takes 1-3 s, long enough to cancel while it works, short enough to outwait.
    run = await stack.submit(vendor, filename="slow-contract.pdf")
    await stack.wait_status(run["id"], "submitted", "running")
    canceled = await stack.api.post(f"/v1/runs/{run['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    await eventually(lambda: callbacks(receiver, "run.canceled", run["id"]), what="run.canceled")

    # Outwait the vendor: Nutrient is told and cancels; the others, which cannot cancel, finish anyway.
    expected = {"canceled": 1} if vendor == "nutrient" else {VENDOR_DONE[vendor]: 1}

    async def vendor_over() -> bool:
        return await sim_stats(stack, vendor) == expected

    await eventually(vendor_over, what=f"the {vendor} run to be over at the vendor")
    # A later run of the same vendor calls back: the worker has had every chance to misreport the first.
    later = await stack.submit(vendor, filename="later.pdf")
    await eventually(
        lambda: callbacks(receiver, "run.succeeded", later["id"]), what="the later run.succeeded"
    )

    assert await callbacks(receiver, "run.succeeded", run["id"]) == []
    final = (await stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["status"] == "canceled" and final["error"] is None


@pytest.mark.parametrize("vendor", VENDORS)
async def test_max_run_s_ends_a_stuck_run_timed_out(
    make_clocked: ClockedFactory, receiver: Receiver, vendor: str
) -> None:
    # Ten minutes pass on the clock, not in the test (within the simulated Nutrient's own processing limit,
    # which fails a run that outlives it).
    c = await make_clocked(**{f"HOOKBRIDGE_{vendor.upper()}_MAX_RUN_S": "600"})
    await c.stack.subscribe(receiver.url)
    run = await c.stack.submit(vendor, filename="stuck-forever.pdf")
    await c.step()
    await c.advance(9 * 60)
    assert (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()["status"] in ("submitted", "running")
    await c.advance(61)
    final = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["status"] == "failed" and final["error"]["code"] == "timed_out"
    assert f"HOOKBRIDGE_{vendor.upper()}_MAX_RUN_S" in final["error"]["message"]
    assert len(await callbacks(receiver, "run.failed", run["id"])) == 1
    if vendor == "nutrient":  # the one vendor that can be told to stop
        assert await sim_stats(c.stack, vendor) == {"canceled": 1}


async def _equal(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


# Issue 11 ----------------------------------------------------------------------------------------------


async def sim_requests(stack: Stack, vendor: str) -> list[tuple[str, str, int | None]]:
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        entries = (await sim.get("/_sim/requests", params={"vendor": vendor})).json()["data"]
    return [(e["method"], e["path"], e["status"]) for e in entries]


async def run_field(stack: Stack, run_id: str, name: str, expected: Any) -> dict[str, Any] | None:
    run: dict[str, Any] = (await stack.api.get(f"/v1/runs/{run_id}")).json()
    return run if run[name] == expected else None


async def delete_recorded(stack: Stack, run_id: str) -> dict[str, Any] | None:
    """The run once the worker has given up deleting the vendor's copy (``vendor_deleted`` is false from
    the moment the run ends until then)."""
    run: dict[str, Any] = (await stack.api.get(f"/v1/runs/{run_id}")).json()
    return run if run["vendor_delete_error"] else None


async def test_zero_retention_deletes_the_run_at_nutrient_after_the_result_is_fetched(
    stack: Stack, receiver: Receiver
) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient", filename="private.pdf", zero_retention=True)
    delivered = (await eventually(lambda: callbacks(receiver, "run.succeeded", run["id"]), what="callback"))[
        0
    ]
    assert delivered.json()["data"]["result"]["output"]["fields"]["invoice_number"]  # inline, as always
    final = await eventually(
        lambda: run_field(stack, run["id"], "vendor_deleted", True), what="vendor_deleted"
    )
    assert final is not None and final["vendor_delete_error"] is None
    vendor_run = final["vendor_run_id"]
    log = await sim_requests(stack, "nutrient")
    paths = [(method, path.rsplit("/", 1)[-1]) for method, path, _ in log]
    # Deleted once, after the result was fetched; the vendor no longer has it.
    assert paths.index(("DELETE", vendor_run)) > paths.index(("GET", "result"))
    assert [e for e in log if e[0] == "DELETE"] == [
        ("DELETE", f"/nutrient/extraction/runs/{vendor_run}", 204)
    ]
    assert await sim_stats(stack, "nutrient") == {}


async def test_without_zero_retention_nothing_is_deleted(stack: Stack) -> None:
    run = await stack.submit("nutrient", filename="keep.pdf")
    final = await stack.wait_status(run["id"], "succeeded")
    assert final["vendor_deleted"] is None
    later = await stack.submit("nutrient", filename="later.pdf")
    await stack.wait_status(later["id"], "succeeded")  # the worker had every chance to delete the first
    assert not [e for e in await sim_requests(stack, "nutrient") if e[0] == "DELETE"]
    assert (await sim_stats(stack, "nutrient"))["done"] == 2


async def test_zero_retention_cancels_then_deletes_a_canceled_run(stack: Stack, receiver: Receiver) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient", filename="stuck-private.pdf", zero_retention=True)
    submitted = await stack.wait_status(run["id"], "submitted", "running")
    assert (await stack.api.post(f"/v1/runs/{run['id']}/cancel")).status_code == 200
    await eventually(lambda: callbacks(receiver, "run.canceled", run["id"]), what="run.canceled")
    await eventually(lambda: run_field(stack, run["id"], "vendor_deleted", True), what="vendor_deleted")
    tail = [(m, p.rsplit("/", 1)[-1]) for m, p, _ in await sim_requests(stack, "nutrient")][-2:]
    assert tail == [("POST", "cancel"), ("DELETE", submitted["vendor_run_id"])]
    assert await sim_stats(stack, "nutrient") == {}


async def test_a_delete_that_keeps_failing_ends_recorded_not_in_a_loop(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack(HOOKBRIDGE_VENDOR_MAX_TRANSIENT_FAILURES="3")
    await stack.subscribe(receiver.url)
    run = await stack.submit("nutrient", filename="stuck-private.pdf", zero_retention=True)
    await stack.wait_status(run["id"], "submitted", "running")
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        await sim.patch("/_sim/config", json={"rate_5xx": 1.0, "vendors_faulty": ["nutrient"]})
    assert (await stack.api.post(f"/v1/runs/{run['id']}/cancel")).status_code == 200
    # The callback does not wait for the vendor.
    await eventually(lambda: callbacks(receiver, "run.canceled", run["id"]), what="run.canceled")
    final = await eventually(lambda: delete_recorded(stack, run["id"]), what="given up")
    assert final is not None and final["vendor_deleted"] is False
    assert "gave up after 3 attempts" in final["vendor_delete_error"]
    attempts = len([e for e in await sim_requests(stack, "nutrient") if e[1].endswith("/cancel")])
    assert attempts == 3
    # Nothing more is tried: a later run of the same vendor finishes and the count stays.
    async with httpx.AsyncClient(base_url=stack.simulator_url) as sim:
        await sim.patch("/_sim/config", json={"rate_5xx": 0.0})
    later = await stack.submit("nutrient", filename="later.pdf")
    await stack.wait_status(later["id"], "succeeded")
    assert len([e for e in await sim_requests(stack, "nutrient") if e[1].endswith("/cancel")]) == 3


@pytest.mark.parametrize("vendor", ["cloudsquid", "uptiq"])
async def test_zero_retention_at_a_vendor_without_delete_says_the_copy_remains(
    stack: Stack, vendor: str
) -> None:
    run = await stack.submit(vendor, filename="private.pdf", zero_retention=True)
    await stack.wait_status(run["id"], "succeeded")
    final = await eventually(lambda: delete_recorded(stack, run["id"]), what="recorded")
    assert final is not None and final["vendor_deleted"] is False
    assert "no API to delete" in final["vendor_delete_error"]


async def test_usage_is_on_the_run_and_counted_per_vendor_and_client(stack: Stack) -> None:
    def counted(vendor: str) -> float:
        value = REGISTRY.get_sample_value(
            "hookbridge_vendor_credits_total", {"vendor": vendor, "client": "alice"}
        )
        return value or 0.0

    before = {v: counted(v) for v in ("nutrient", "uptiq")}
    nutrient = await stack.submit(
        "nutrient", filename="a.pdf", operation="parse", options={"instructions": {"mode": "text"}}
    )
    uptiq = await stack.submit("uptiq", filename="b.pdf")
    n = await stack.wait_status(nutrient["id"], "succeeded")
    u = await stack.wait_status(uptiq["id"], "succeeded")
    pages = (await stack.api.get(f"/v1/runs/{n['id']}/result")).json()["output"]["fields"]["pages"]
    assert n["usage"] == {
        "credits": 1.0 * pages,
        "reported": {"data_extraction_credits": {"cost": 1.0 * pages}},
    }
    # Uptiq's creditReservation is a reservation, not a charge: reported as given, no credits counted.
    assert u["usage"]["credits"] is None and u["usage"]["reported"]["creditReservation"]
    assert counted("nutrient") - before["nutrient"] == n["usage"]["credits"]
    assert counted("uptiq") == before["uptiq"]


async def test_uptiq_record_extras_reach_the_client(stack: Stack, receiver: Receiver) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit("uptiq", filename="statement.pdf")
    delivered = (await eventually(lambda: callbacks(receiver, "run.succeeded", run["id"]), what="callback"))[
        0
    ]
    result = delivered.json()["data"]["result"]
    assert {"fraudResults", "creditReservation", "webhookStatus"} <= set(result)
    assert result["extractedData"]["invoice_number"].startswith("INV-")
    assert (await stack.api.get(f"/v1/runs/{run['id']}/result")).json() == result


async def test_an_uptiq_timeout_keeps_the_last_stage_message(make_clocked: ClockedFactory) -> None:
    c = await make_clocked(HOOKBRIDGE_UPTIQ_MAX_RUN_S="600")
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        await sim.patch("/_sim/config", json={"uptiq_early_404_s": 0})
    run = await c.stack.submit("uptiq", filename="stuck-statement.pdf")
    await c.step()
    for _ in range(10):
        await c.advance(60)  # polled once a minute on the clock (its interval is 200 ms at most here)
    await c.advance(1)
    final = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert final["status"] == "failed" and final["error"]["code"] == "timed_out"
    last = final["error"]["details"]["last_progress"]
    assert last["message"].startswith("Extracting data (")
    assert f"the vendor last said: {last['message']}" in final["error"]["message"]


async def test_a_split_zip_is_served_as_the_result(stack: Stack, receiver: Receiver) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit(
        "nutrient", filename="two.pdf", operation="split", options={"instructions": {"output": "both"}}
    )
    delivered = (await eventually(lambda: callbacks(receiver, "run.succeeded", run["id"]), what="callback"))[
        0
    ]
    data = delivered.json()["data"]
    assert data["result_url"] == f"/v1/runs/{run['id']}/result"
    assert data["result"]["output"]["downloadUrl"] == data["result_url"]  # ours, not the vendor's
    assert data["result"]["output"]["documents"]  # "both": the page ranges too
    served = await stack.api.get(data["result_url"])
    assert served.status_code == 200 and served.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(served.content)) as archive:
        assert archive.read("invoice-1.pdf") == sent_bytes("two.pdf")


async def test_a_split_zip_with_zero_retention_travels_inline(stack: Stack, receiver: Receiver) -> None:
    await stack.subscribe(receiver.url)
    run = await stack.submit(
        "nutrient",
        filename="two.pdf",
        operation="split",
        zero_retention=True,
        options={"instructions": {"output": "zip"}},
    )
    delivered = (await eventually(lambda: callbacks(receiver, "run.succeeded", run["id"]), what="callback"))[
        0
    ]
    data = delivered.json()["data"]
    assert data["result_url"] is None
    output = data["result"]["output"]
    assert "downloadUrl" not in output and output["file_media_type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(output["file_base64"]))) as archive:
        assert archive.read("invoice-1.pdf") == sent_bytes("two.pdf")
    assert (await stack.api.get(f"/v1/runs/{run['id']}/result")).status_code == 410


async def test_a_result_past_the_size_limit_fails_the_run(make_stack: StackFactory) -> None:
    stack = await make_stack(HOOKBRIDGE_MAX_DOCUMENT_BYTES="200")
    run = await stack.submit(
        "nutrient", filename="two.pdf", operation="split", options={"instructions": {"output": "zip"}}
    )
    final = await stack.wait_status(run["id"], "failed")
    assert final["error"]["code"] == "result_too_large"
    assert "HOOKBRIDGE_MAX_DOCUMENT_BYTES" in final["error"]["message"]


@pytest.mark.parametrize("zero_retention", [False, True], ids=["cancel", "cancel-and-delete"])
async def test_a_run_the_vendor_was_told_about_keeps_its_retention(
    stack: Stack, zero_retention: bool
) -> None:
    """Writing the run again after telling the vendor (cancel, delete) must not drop its expiry: a plain SET
    does, and such runs then stayed in Redis for ever."""
    run = await stack.submit("nutrient", filename="stuck.pdf", zero_retention=zero_retention)
    await stack.wait_status(run["id"], "submitted", "running")
    assert (await stack.api.post(f"/v1/runs/{run['id']}/cancel")).status_code == 200
    client = store_client(stack.redis_url)

    async def told() -> bool:
        doc = json.loads(await client.get(keys.run(run["id"])) or b"{}")
        # The store leaves fields out while they hold their default (vendor_cancel_pending: false).
        return bool(doc) and not doc.get("vendor_cancel_pending") and not doc.get("vendor_delete_pending")

    try:
        await eventually(told, what="the vendor told")
        ttl_ms = await client.pttl(keys.run(run["id"]))
    finally:
        await client.aclose()
    assert 0 < ttl_ms <= stack.settings.retention_s * 1000


# Issue 24: the simulator plays readings the documents allow, and the run still ends right --------------


async def _sim_posts(c: Any, vendor: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        entries = (await sim.get("/_sim/requests", params={"vendor": vendor})).json()["data"]
    return [e for e in entries if e["method"] == "POST"]


async def _patch_sim(c: Any, changes: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        assert (await sim.patch("/_sim/config", json=changes)).status_code == 200


@pytest.mark.parametrize("vendor", ["cloudsquid", "uptiq"])
async def test_a_lost_submit_answer_is_never_sent_again_without_idempotency(
    make_clocked: ClockedFactory, vendor: str
) -> None:
    """Issue 24, row 4: the connection drops after the request went out. Neither vendor documents an
    idempotency key, so the run ends vendor_submit_ambiguous after exactly one POST, and stays so."""
    c = await make_clocked()
    await _patch_sim(c, {"rate_drop": 1.0, "vendors_faulty": [vendor], "uptiq_early_404_s": 0})
    run = await c.stack.submit(vendor)
    await c.step()
    await _patch_sim(c, {"rate_drop": 0.0})
    for _ in range(5):
        await c.advance(60)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "failed" and got["error"]["code"] == "vendor_submit_ambiguous", got["error"]
    assert len(await _sim_posts(c, vendor)) == 1
    assert any(e["kind"] == "error" for e in got["trail"])


async def test_nutrient_replays_a_lost_submit_with_its_key(make_clocked: ClockedFactory) -> None:
    """Nutrient keeps its replay: "Retrying the same request with the same key returns HTTP 202 without
    creating another run" (S003). One vendor run, however many POSTs."""
    c = await make_clocked()
    await _patch_sim(c, {"rate_drop": 1.0, "vendors_faulty": ["nutrient"]})
    run = await c.stack.submit("nutrient")
    await c.step()
    await _patch_sim(c, {"rate_drop": 0.0})
    for _ in range(6):
        await c.advance(30)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "succeeded"
    assert len(await _sim_posts(c, "nutrient")) == 2
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        runs = (await sim.get("/_sim/runs", params={"vendor": "nutrient"})).json()["data"]
    assert len(runs) == 1


@pytest.mark.parametrize(
    ("shape", "ends"), [("object", "succeeded"), ("list", "succeeded"), ("ids", "failed")]
)
async def test_uptiq_multi_extraction_202_readings(
    make_clocked: ClockedFactory, shape: str, ends: str
) -> None:
    """S004 does not show the 202 of a multi-extraction: under every reading the run ends right (read, or
    refused as ambiguous), after exactly one POST /extract."""
    c = await make_clocked()
    await _patch_sim(c, {"uptiq_multi_shape": shape, "uptiq_early_404_s": 0, "rate_no_status": 0.3})
    run = await c.stack.submit("uptiq", options={"documentTypes": ["BalanceSheet", "Invoice"]})
    await c.step()
    for _ in range(20):
        await c.advance(10)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == ends, got.get("error")
    if ends == "failed":
        assert got["error"]["code"] == "vendor_submit_ambiguous"
    assert len(await _sim_posts(c, "uptiq")) == 1


async def test_cloudsquid_answers_without_status_still_end_right(make_clocked: ClockedFactory) -> None:
    c = await make_clocked()
    await _patch_sim(c, {"rate_no_status": 0.5})
    run = await c.stack.submit("cloudsquid")
    await c.step()
    for _ in range(20):
        await c.advance(5)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "succeeded"
    assert "None" not in json.dumps(got["trail"])
    assert len(await _sim_posts(c, "cloudsquid")) == 2  # one upload, one run


@pytest.mark.parametrize("route", ["404", "405"])
async def test_nutrient_without_a_delete_route_reports_not_deleted(
    make_clocked: ClockedFactory, route: str
) -> None:
    """A reported deletion is a confirmed one: a 404 or 405 on delete leaves vendor_deleted false, with
    why (zero retention), and answers without status on the way do not end the run."""
    c = await make_clocked()
    await _patch_sim(c, {"nutrient_delete": route, "rate_no_status": 0.3})
    run = await c.stack.submit("nutrient", zero_retention=True)
    await c.step()
    for _ in range(10):
        await c.advance(30)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "succeeded"
    assert got["vendor_deleted"] is False
    assert "not deleted" in got["vendor_delete_error"]


# Issue 24, goal 2: Nutrient URL input is fetched once and uploaded, so a lost 202 never orphans a run ----


class DocumentHost:
    """A document URL's server on a real port: what it serves can change, or go, between two requests."""

    def __init__(self, content: bytes) -> None:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        self.content = content
        self.gone = False
        self.hits = 0

        async def serve(request: Request) -> Response:
            self.hits += 1
            if self.gone:
                return Response(b"gone", status_code=404)
            return Response(self.content, media_type="application/pdf")

        self.app = Starlette(routes=[Route("/{name}", serve)])


class LoseFirstSubmitAnswer(httpx.AsyncBaseTransport):
    """Real HTTP to the simulator; the first submit's answer is lost after the simulator queued the run.
    The simulator's own drop happens before it handles a request, so it cannot lose a 202: this is the one
    thing mocked, at the HTTP boundary."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and request.url.path.endswith("/async") and not self.lost:
            await response.aread()
            await response.aclose()
            self.lost += 1
            raise httpx.ReadError("the connection dropped before the answer arrived", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _submit_url(stack: Stack, url: str) -> dict[str, Any]:
    response = await stack.api.post(
        "/v1/runs", json={"vendor": "nutrient", "operation": "extract", "document": {"url": url}}
    )
    assert response.status_code == 202, response.text
    return dict(response.json())


@pytest.mark.parametrize("after", ["changed", "gone"])
async def test_nutrient_url_input_after_a_lost_202_keeps_the_vendor_run(
    make_clocked: ClockedFactory, after: str
) -> None:
    """S003: the URL "is downloaded again on every retry" (changed bytes: 409; gone: the submit fails), and
    "Alternatively, upload the file." hookbridge fetches the URL once and uploads the bytes with the
    Idempotency-Key: the replay after a lost 202 carries the same bytes, whatever the URL serves now, and
    Nutrient answers with the run it queued. Exactly one vendor run, tracked on the run."""
    transport = LoseFirstSubmitAnswer()
    c = await make_clocked(vendor_transport=transport, HOOKBRIDGE_NUTRIENT_URL_INPUT="upload")
    host = DocumentHost(b"%PDF-1.4 invoice INV-7 total 42.00")
    url = await c.stack.servers.start(host.app, free_port()) + "/invoice-7.pdf"
    run = await _submit_url(c.stack, url)
    await c.step()
    assert transport.lost == 1 and host.hits == 1
    if after == "changed":
        host.content = b"%PDF-1.4 another document"
    else:
        host.gone = True
    for _ in range(8):
        await c.advance(30)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "succeeded", got.get("error")
    assert host.hits == 1  # fetched once, never again
    posts = await _sim_posts(c, "nutrient")
    assert len(posts) == 2
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        runs = (await sim.get("/_sim/runs", params={"vendor": "nutrient"})).json()["data"]
    assert len(runs) == 1
    assert got["vendor_run_id"] == runs[0]["id"]
    # The bytes are kept only until the vendor accepted them.
    r = store_client(c.stack.redis_url)
    try:
        assert await r.exists(keys.document(run["id"])) == 0
    finally:
        await r.aclose()


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data/iam", "http://127.0.0.1:{port}/invoice.pdf"],
    ids=["metadata", "loopback"],
)
async def test_nutrient_url_input_to_a_blocked_address_is_never_fetched(
    make_clocked: ClockedFactory, url: str
) -> None:
    """The document URL gets the callback address rules: a blocked address (the metadata address always;
    loopback unless allowed) fails the run document_unavailable, unfetched, and Nutrient gets nothing."""
    # The callback rules of production: loopback blocked (the tests' default allows it for receivers).
    c = await make_clocked(HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS="", HOOKBRIDGE_NUTRIENT_URL_INPUT="upload")
    host = DocumentHost(b"%PDF-1.4 secret")
    served = await c.stack.servers.start(host.app, free_port())
    run = await _submit_url(c.stack, url.format(port=served.rsplit(":", 1)[-1]))
    await c.step()
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "failed"
    assert got["error"]["code"] == "document_unavailable", got["error"]
    assert "not allowed" in got["error"]["message"] and "blocked network" in got["error"]["message"]
    assert host.hits == 0
    assert await _sim_posts(c, "nutrient") == []


async def test_nutrient_url_input_that_is_missing_fails_clearly(make_clocked: ClockedFactory) -> None:
    c = await make_clocked(HOOKBRIDGE_NUTRIENT_URL_INPUT="upload")
    host = DocumentHost(b"")
    host.gone = True
    run = await _submit_url(c.stack, await c.stack.servers.start(host.app, free_port()) + "/x.pdf")
    await c.step()
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "failed" and got["error"]["code"] == "document_unavailable"
    assert "HTTP 404" in got["error"]["message"]
    assert host.hits == 1 and await _sim_posts(c, "nutrient") == []


# Issue 24, goal 3: readings of silent documents, each played by the simulator ---------------------------

CAMEL, SNAKE = "fileUrl,fileBase64,fileName", "file_url,file_base64,file_name"


@pytest.mark.parametrize(
    ("reading", "fields", "ends"),
    [("camel", CAMEL, "succeeded"), ("snake", SNAKE, "succeeded"), ("snake", CAMEL, "failed")],
)
async def test_uptiq_body_field_readings(
    make_clocked: ClockedFactory, reading: str, fields: str, ends: str
) -> None:
    """S004 publishes no /extract body schema. The names are a setting; under a reading it does not match,
    Uptiq's 400 ends the run vendor_rejected with its message naming the fields, after one POST."""
    c = await make_clocked(HOOKBRIDGE_UPTIQ_BODY_FIELDS=fields)
    await _patch_sim(c, {"uptiq_body_fields": reading, "uptiq_early_404_s": 0})
    run = await c.stack.submit("uptiq")
    await c.step()
    for _ in range(10):
        await c.advance(10)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == ends, got.get("error")
    if ends == "failed":
        assert got["error"]["code"] == "vendor_rejected"
        assert "file_base64" in got["error"]["message"]
    assert len(await _sim_posts(c, "uptiq")) == 1


@pytest.mark.parametrize("placement", ["top", "nested"])
@pytest.mark.parametrize("operation", ["extract", "classify"])
async def test_nutrient_url_runs_end_right_under_every_instruction_placement(
    make_clocked: ClockedFactory, placement: str, operation: str
) -> None:
    """NU-parse shows the JSON format's instruction fields at the top level for parse only; for the other
    operations a real Nutrient may read them nested. The worker uploads a URL's bytes as multipart (the
    documented ``instructions`` part), so no run rests on that reading."""
    c = await make_clocked(HOOKBRIDGE_NUTRIENT_URL_INPUT="upload")
    await _patch_sim(c, {"nutrient_json_instructions": placement})
    host = DocumentHost(b"%PDF-1.4 invoice INV-9")
    url = await c.stack.servers.start(host.app, free_port()) + "/invoice-9.pdf"
    response = await c.stack.api.post(
        "/v1/runs",
        json={
            "vendor": "nutrient",
            "operation": operation,
            "document": {"url": url},
            "options": {"instructions": {"schema": {"type": "object"}}},
        },
    )
    assert response.status_code == 202, response.text
    run_id = response.json()["id"]
    await c.step()
    for _ in range(8):
        await c.advance(30)
    got = (await c.stack.api.get(f"/v1/runs/{run_id}")).json()
    assert got["status"] == "succeeded", got.get("error")
    assert host.hits == 1 and len(await _sim_posts(c, "nutrient")) == 1


async def test_nutrient_url_input_send_hands_the_url_to_nutrient(make_clocked: ClockedFactory) -> None:
    """NUTRIENT_URL_INPUT=send (URLs that never change): hookbridge never fetches, Nutrient gets the URL."""
    c = await make_clocked(HOOKBRIDGE_NUTRIENT_URL_INPUT="send")
    host = DocumentHost(b"%PDF-1.4 invoice")
    url = await c.stack.servers.start(host.app, free_port()) + "/fixed.pdf"
    run = await _submit_url(c.stack, url)
    await c.step()
    for _ in range(8):
        await c.advance(30)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "succeeded", got.get("error")
    assert host.hits == 0
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        runs = (await sim.get("/_sim/runs", params={"vendor": "nutrient"})).json()["data"]
    assert len(runs) == 1


async def test_a_split_zip_behind_a_presigned_url_on_another_host_is_served(
    make_clocked: ClockedFactory,
) -> None:
    """The simulator's ``nutrient_download_host: other``: the zip lives on another origin that refuses a
    request carrying our key. The worker fetches it key-less and serves it as the run's result."""
    c = await make_clocked()
    await _patch_sim(c, {"nutrient_download_host": "other"})
    run = await c.stack.submit(
        "nutrient", filename="two.pdf", operation="split", options={"instructions": {"output": "zip"}}
    )
    await c.step()
    for _ in range(8):
        await c.advance(30)
    got = (await c.stack.api.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "succeeded", got.get("error")
    served = await c.stack.api.get(f"/v1/runs/{run['id']}/result")
    with zipfile.ZipFile(io.BytesIO(served.content)) as archive:
        assert archive.read("invoice-1.pdf") == sent_bytes("two.pdf")
    async with httpx.AsyncClient(base_url=c.stack.simulator_url) as sim:
        log = (await sim.get("/_sim/requests", params={"vendor": "nutrient"})).json()["data"]
    assert [e["status"] for e in log if "/_storage/" in e["path"]] == [200]
