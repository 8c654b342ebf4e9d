"""Request ids: every answer carries ``X-Request-Id`` (errors and 401s too), a well-formed incoming one is
echoed and any other replaced, problem bodies carry it as ``request_id``, and the API's log line of the
request names the same id."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from service.dev.embedded_redis import free_port
from service.observability import logs
from tests.conftest import ALICE, StackFactory

FRESH = re.compile(r"^req_[0-9A-Z]{26}$")


def _problem_id(response: httpx.Response) -> Any:
    assert response.headers["content-type"] == "application/problem+json"
    return response.json()["request_id"]


async def test_a_well_formed_id_is_echoed_on_answers_and_problems(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    for given in ("abc", "A.b_c-1", "x" * 128, "0123456789"):
        ok = await stack.api.get("/v1/runs", headers={"X-Request-Id": given})
        assert ok.status_code == 200 and ok.headers["x-request-id"] == given
    # Problems of every kind: 401 (no key), 404 (a route, a record), 405, 422, and the body's id is the
    # header's.
    cases = [
        ("GET", "/v1/runs", {}, 401, False),
        ("GET", "/v1/nothing-here", {}, 404, True),
        ("GET", "/v1/runs/run_00000000000000000000000000", {}, 404, True),
        ("DELETE", "/v1/runs", {}, 405, True),
        ("GET", "/v1/runs", {"limit": "0"}, 422, True),
    ]
    for i, (method, path, params, status, authed) in enumerate(cases):
        given = f"case-{i}"
        headers = {"X-Request-Id": given}
        client = stack.api if authed else httpx.AsyncClient(base_url=stack.api_url)
        try:
            answer = await client.request(method, path, params=params, headers=headers)
        finally:
            if not authed:
                await client.aclose()
        assert answer.status_code == status, (path, answer.text)
        assert answer.headers["x-request-id"] == given and _problem_id(answer) == given
    # Outside /v1 too: the probes and the document.
    for path in ("/healthz", "/openapi.json"):
        assert (await stack.api.get(path, headers={"X-Request-Id": "probe.1"})).headers[
            "x-request-id"
        ] == "probe.1"


async def test_any_other_id_is_replaced_by_a_fresh_one(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    bad: list[bytes] = [b"", b"x" * 129, b"has space", b"a/b", b"semi;colon", "é".encode(), b"\xff\xfe"]
    seen = set()
    for given in bad:
        answer = await stack.api.get("/v1/nothing", headers=[(b"X-Request-Id", given)])
        rid = answer.headers["x-request-id"]
        assert FRESH.match(rid), (given, rid)
        assert rid.encode() != given and _problem_id(answer) == rid
        seen.add(rid)
    # Without one, every answer gets its own.
    for _ in range(3):
        seen.add((await stack.api.get("/v1/runs")).headers["x-request-id"])
    assert len(seen) == len(bad) + 3


async def test_a_store_outage_answer_carries_the_id(make_stack: StackFactory) -> None:
    """A 503 from a Redis that cannot be reached (nothing listens on the port): the id is on it too."""
    stack = await make_stack(worker=False, HOOKBRIDGE_REDIS_URL=f"redis://127.0.0.1:{free_port()}")
    answer = await stack.api.get("/v1/runs", headers={"X-Request-Id": "outage-1"})
    assert answer.status_code == 503
    assert answer.headers["x-request-id"] == "outage-1" and _problem_id(answer) == "outage-1"


async def test_the_log_line_names_the_same_id(
    make_stack: StackFactory, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    logs.configure("json", "INFO")
    stack = await make_stack(worker=False)
    echoed = await stack.api.get("/v1/runs", headers={"X-Request-Id": "trace-me.42"})
    async with httpx.AsyncClient(base_url=stack.api_url) as client:
        fresh = await client.get(
            "/v1/runs", headers={"X-Request-Id": "not valid!", "Authorization": f"Bearer {ALICE}"}
        )
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("event") == "request"]
    ids = {line["request_id"] for line in requests}
    assert "trace-me.42" in ids and echoed.headers["x-request-id"] == "trace-me.42"
    assert fresh.headers["x-request-id"] in ids and "not valid!" not in ids


async def test_a_submit_writes_one_line_naming_its_run(
    make_stack: StackFactory, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    """The request's own line carries what the handler names (a submit: its run and vendor); a read's
    line carries nothing of another request's."""
    logs.configure("json", "INFO")
    stack = await make_stack(worker=False)
    stack.api.headers["X-Request-Id"] = "submit-1"
    try:
        run = await stack.submit("nutrient")
    finally:
        del stack.api.headers["X-Request-Id"]
    await stack.api.get(f"/v1/runs/{run['id']}", headers={"X-Request-Id": "read-1"})
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    submit = [line for line in lines if line.get("request_id") == "submit-1"]
    assert [(line["event"], line["run_id"], line["vendor"], line["status"]) for line in submit] == [
        ("request", run["id"], "nutrient", 202)
    ]
    [read] = [line for line in lines if line.get("request_id") == "read-1"]
    assert read["event"] == "request" and "run_id" not in read and read["status"] == 200
