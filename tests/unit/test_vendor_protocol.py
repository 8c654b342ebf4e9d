"""Protocol v2's shared parts (service/vendors/base.py, http.py): the same-origin check as a table, the
request extensions a call gives, and the refreshing bearer token's flow.

The auth flow runs on ``httpx.MockTransport``: a token refused before its time (a 401 on a fresh token)
and an expiry at a chosen moment are what no simulator produces on demand; the vendor client around it
is the real one (its budget, its kinds)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.config import settings
from service.core.clock import ManualClock
from service.vendors import build_adapters, nutrient, registry, text
from service.vendors.base import (
    NO_CALL,
    TICKET_EXTENSION,
    Call,
    Kind,
    KindBudget,
    VendorRateLimited,
    VendorResultTooLarge,
    VendorTransient,
)
from service.vendors.http import RefreshingBearerAuth, make_client, same_origin, stream_to_file
from service.worker import budget
from service.worker.budget import StepTicket, StoreBudget

BASE = "https://acme.cognitiveservices.azure.com/documentintelligence"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"{BASE}/documentModels/m/analyzeResults/1?api-version=2024-11-30", True),
        (BASE, True),
        (f"{BASE}/", True),
        ("https://acme.cognitiveservices.azure.com:443/documentintelligence/x", True),  # the default port
        ("https://acme.cognitiveservices.azure.com/documentintelligenceX/x", False),  # not below the path
        ("https://acme.cognitiveservices.azure.com/other/x", False),
        ("http://acme.cognitiveservices.azure.com/documentintelligence/x", False),  # another scheme
        ("https://acme.cognitiveservices.azure.com:8443/documentintelligence/x", False),  # another port
        ("https://evil.example/documentintelligence/x", False),
        ("https://acme.cognitiveservices.azure.com.evil.example/documentintelligence/x", False),
        ("//evil.example/documentintelligence/x", False),  # relative, but with a host
        ("/documentintelligence/x", True),  # resolved against the base
        ("http://[::1", False),  # httpx refuses it
    ],
)
def test_same_origin(url: str, expected: bool) -> None:
    assert same_origin(url, BASE) is expected


def test_call_extensions_carry_kind_and_ticket() -> None:
    assert NO_CALL.extensions(Kind.POLL) == {"kind": "poll"}
    ticket = object()
    assert Call(run_id="r", ticket=ticket).extensions(Kind.FETCH) == {
        "kind": "fetch",
        TICKET_EXTENSION: ticket,
    }


class _Token(RefreshingBearerAuth):
    def __init__(self, now: list[float]) -> None:
        super().__init__(margin_s=10, clock=lambda: now[0])
        self.issued = 0

    def token_request(self) -> httpx.Request:
        return httpx.Request("POST", "https://login.example/token")

    def read_token(self, status_code: int, body: bytes) -> tuple[str, float]:
        if status_code != 200:
            raise VendorTransient(f"token endpoint answered {status_code}")
        answer = json.loads(body)
        return answer["access_token"], answer["expires_in"]


class _Identity:
    """A token endpoint and an API behind one mock transport; the API refuses tokens in ``revoked``."""

    def __init__(self) -> None:
        self.tokens = 0
        self.revoked: set[str] = set()
        self.seen: list[tuple[str, str | None, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        kind = request.extensions.get("kind")
        if request.url.host == "login.example":
            self.tokens += 1
            self.seen.append(("token", kind, None))
            return httpx.Response(
                200, json={"access_token": f"token-{self.tokens}-abcdef", "expires_in": 100}
            )
        bearer = request.headers.get("authorization", "")
        self.seen.append(("api", kind, bearer))
        if bearer.removeprefix("Bearer ") in self.revoked:
            return httpx.Response(401, json={"error": "expired"})
        return httpx.Response(200, json={"status": "running"})


class _CountingBudget:
    def __init__(self) -> None:
        self.acquired = 0

    async def acquire(self, ticket: object | None = None) -> None:
        self.acquired += 1

    async def settle(
        self, ticket: object | None = None, status: int | None = None, retry_after: float | None = None
    ) -> None:
        return None


async def test_refreshing_bearer_token() -> None:
    now = [0.0]
    identity = _Identity()
    auth = _Token(now)
    budget = _CountingBudget()
    client = make_client(
        "https://api.example",
        {},
        timeout_s=5,
        vendor="acme",
        budget=budget,
        transport=httpx.MockTransport(identity),
        auth=auth,
    )
    async with client:
        call = Call(run_id="r1")
        # Concurrent first requests share one token request.
        answers = await asyncio.gather(
            *(client.get("/runs/1", extensions=call.extensions(Kind.POLL)) for _ in range(5))
        )
        assert [a.status_code for a in answers] == [200] * 5
        assert identity.tokens == 1
        assert {bearer for what, _, bearer in identity.seen if what == "api"} == {"Bearer token-1-abcdef"}
        # The token request is kind auth, never budgeted; each API request took one slot.
        assert ("token", "auth", None) in identity.seen
        assert budget.acquired == 5
        # The token is scrubbed from anything a vendor answers.
        assert text.clean("echo token-1-abcdef") == "echo [redacted]"

        now[0] = 91.0  # within 10 s (the margin) of its expiry at 100 s: refreshed before it is sent
        await client.get("/runs/1", extensions=call.extensions(Kind.POLL))
        assert identity.tokens == 2
        assert identity.seen[-1] == ("api", "poll", "Bearer token-2-abcdef")

        identity.revoked.add("token-2-abcdef")  # refused before its time: one fresh token, one more try
        answer = await client.get("/runs/1", extensions=call.extensions(Kind.POLL))
        assert answer.status_code == 200
        assert identity.tokens == 3
        assert identity.seen[-1] == ("api", "poll", "Bearer token-3-abcdef")

        identity.revoked.add("token-3-abcdef")
        identity.revoked.add("token-4-abcdef")  # refused again: the 401 is the answer, no loop
        answer = await client.get("/runs/1", extensions=call.extensions(Kind.POLL))
        assert answer.status_code == 401
        assert identity.tokens == 4
        # The last three tokens are scrubbed; the first, long replaced, is forgotten.
        assert text.clean("token-4-abcdef token-2-abcdef") == "[redacted] [redacted]"
        assert text.clean("token-1-abcdef") == "token-1-abcdef"


async def test_token_answer_is_bounded() -> None:
    def huge(request: httpx.Request) -> httpx.Response:
        if request.url.host == "login.example":
            return httpx.Response(200, stream=httpx.ByteStream(b"x" * (200 * 1024)))  # not read ahead
        return httpx.Response(200, json={})

    client = make_client(
        "https://api.example",
        {},
        timeout_s=5,
        vendor="acme",
        transport=httpx.MockTransport(huge),
        auth=_Token([0.0]),
    )
    async with client:
        with pytest.raises(VendorTransient, match="token endpoint"):
            await client.get("/runs/1", extensions=NO_CALL.extensions(Kind.POLL))


async def test_stream_to_file_bounded() -> None:
    """The result file is written as the answer arrives, and removed when the answer passes the cap.
    (The conformance kit checks the same against the simulator; here the chunks are chosen.)"""
    body = b'{"analyzeResult": "' + b"x" * 300_000 + b'"}'

    def serve(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/missing":
            return httpx.Response(404, stream=httpx.ByteStream(b'{"error": {"message": "gone"}}'))
        headers = {"content-type": "application/json; charset=utf-8"}
        if request.url.path == "/declared":
            headers["content-length"] = str(len(body))
        return httpx.Response(200, headers=headers, stream=_Chunks(body))

    seen: list[str] = []
    client = make_client(
        "https://api.example", {}, timeout_s=5, vendor="acme", transport=httpx.MockTransport(serve)
    )
    async with client:
        response, file = await stream_to_file(client, "/result", limit=len(body))
        assert response.status_code == 200 and file is not None
        assert (file.size, file.media_type) == (len(body), "application/json")
        assert Path(file.path).read_bytes() == body
        Path(file.path).unlink()

        for path in ("/result", "/declared"):  # as it arrives, and by its Content-Length before
            before = set(Path(tempfile.gettempdir()).glob("hookbridge-result-*"))
            with pytest.raises(VendorResultTooLarge):
                await stream_to_file(client, path, limit=len(body) - 1)
            assert set(Path(tempfile.gettempdir()).glob("hookbridge-result-*")) == before
            seen.append(path)

        response, file = await stream_to_file(client, "/missing", limit=10)
        assert file is None and response.status_code == 404
        assert response.json() == {"error": {"message": "gone"}}
    assert seen == ["/result", "/declared"]


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._body), 65536):
            yield self._body[start : start + 65536]


# Budgets per kind group -------------------------------------------------------------------------------

ACME = dataclasses.replace(
    nutrient.SPEC,
    name="acme_di",
    budgets=(
        KindBudget("submit", frozenset({Kind.SUBMIT}), 15.0),
        KindBudget("poll", frozenset({Kind.POLL, Kind.FETCH}), 50.0),
    ),
)


def test_a_kind_group_has_its_own_rate_setting() -> None:
    """``{V}_SUBMIT_MAX_RPS`` / ``{V}_POLL_MAX_RPS`` beside ``{V}_MAX_RPS`` (contract §10), defaults from
    the spec, for a vendor whose name holds an underscore."""
    loaded = settings.load({"HOOKBRIDGE_ACME_DI_POLL_MAX_RPS": "20"}, vendors={"acme_di": ACME})
    vendor = loaded.vendor("acme_di")
    assert (vendor.extra["submit_max_rps"], vendor.extra["poll_max_rps"]) == (15.0, 20.0)
    with pytest.raises(settings.SettingsError, match="HOOKBRIDGE_ACME_DI_SUBMIT_MAX_RPS"):
        settings.load({"HOOKBRIDGE_ACME_DI_SUBMIT_MAX_RPS": "-1"}, vendors={"acme_di": ACME})


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        ((KindBudget("Submit", frozenset({Kind.SUBMIT})),), "lower-case name"),
        ((KindBudget("a", frozenset({Kind.SUBMIT})), KindBudget("a", frozenset({Kind.POLL}))), "twice"),
        ((KindBudget("a", frozenset({Kind.SUBMIT})), KindBudget("b", frozenset({Kind.SUBMIT}))), "another"),
        ((KindBudget("a", frozenset({Kind.AUTH})),), "not auth"),
        ((KindBudget("a", frozenset()),), "request kinds"),
    ],
)
def test_a_spec_with_budgets_that_do_not_hold_together_is_refused(
    budgets: tuple[KindBudget, ...], message: str
) -> None:
    assert message in (registry._check("acme_di", dataclasses.replace(ACME, budgets=budgets)) or "")
    assert registry._check("acme_di", ACME) is None


class _Limits:
    """The vendor: 429 to every poll while ``polls_limited``, 202 to a submit."""

    def __init__(self) -> None:
        self.polls_limited = True
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.method)
        if request.method == "POST":
            return httpx.Response(202, json={"id": "1"})
        if self.polls_limited:
            return httpx.Response(429, headers={"retry-after": "30"}, json={"error": "slow down"})
        return httpx.Response(200, json={"status": "running"})


async def test_a_429_on_a_read_pauses_reads_not_submits() -> None:
    """Azure's case (analyze 15 TPS, reads 50 TPS, each its own 429): through the real vendor client and
    the worker's KindBudget (rates of 0: no store slot is taken, so no Redis is needed here; the shared
    budget's own pause and probe are held by tests/integration/test_vendor_pause.py)."""
    vendor = settings.load({}, vendors={"acme_di": ACME}).vendor("acme_di")
    clock = ManualClock(1_000.0)
    shared = StoreBudget(None, vendor, clock)  # type: ignore[arg-type]
    reads = budget.GroupBudget(None, vendor, "poll", 0.0, shared, clock)  # type: ignore[arg-type]
    submits = budget.GroupBudget(None, vendor, "submit", 0.0, shared, clock)  # type: ignore[arg-type]
    limits = _Limits()
    client = make_client(
        "https://acme.example",
        {},
        timeout_s=5,
        vendor="acme_di",
        transport=httpx.MockTransport(limits),
        kinds={Kind.SUBMIT: submits, Kind.POLL: reads, Kind.FETCH: reads},
    )
    call = Call(run_id="r", ticket=StepTicket("acme_di"))
    async with client:
        assert (await client.get("/runs/1", extensions=call.extensions(Kind.POLL))).status_code == 429
        with pytest.raises(VendorRateLimited) as paused:  # held here, not sent
            await client.get("/runs/1", extensions=call.extensions(Kind.FETCH))
        assert paused.value.retry_after == 30.0
        submitted = await client.post("/runs", json={}, extensions=call.extensions(Kind.SUBMIT))
        assert submitted.status_code == 202  # submits go on
        assert limits.seen == ["GET", "POST"]
        clock.advance(30.0)  # the pause is over: the next read is sent
        limits.polls_limited = False
        assert (await client.get("/runs/1", extensions=call.extensions(Kind.POLL))).status_code == 200
    assert limits.seen == ["GET", "POST", "GET"]


class _FirstProtocolAdapter:
    """An adapter written before Protocol v2: its methods take no ``call``."""

    name = "oldie"
    supports_cancel = False
    submit_idempotent = False

    async def submit(self, request: Any) -> Any: ...

    async def poll(self, vendor_run_id: str, state: dict[str, Any]) -> Any: ...

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any]) -> Any: ...

    async def cancel(self, vendor_run_id: str, state: dict[str, Any]) -> None: ...


async def test_an_adapter_of_the_first_protocol_is_refused_at_start() -> None:
    spec = dataclasses.replace(
        nutrient.SPEC, name="oldie", build=lambda client, extra: _FirstProtocolAdapter()
    )
    loaded = settings.load({}, vendors={"oldie": spec})
    with pytest.raises(registry.PluginError, match=r"submit\(\) takes no `call`.*first vendor protocol"):
        build_adapters(loaded, {}, None)
