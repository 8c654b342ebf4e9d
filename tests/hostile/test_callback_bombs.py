"""A tenant's receiver answers a callback with a bomb (issue 10, finding 2): a 1 GiB chunked body, a
1 MiB gzip stream that inflates to 1 GiB. The worker reads at most the 4 KiB it logs, asks for and keeps
the bytes as sent (``Accept-Encoding: identity``, nothing inflated), and hangs up on the rest.

The receivers are real servers on loopback (aiohttp's); the API and the worker are the real ones. The
worker's memory under both bombs at once is measured by ``python -m bench.hostile`` (not asserted here).
"""

from __future__ import annotations

from typing import Any

from tests.conftest import StackFactory, eventually
from tests.hostile.hostile_receivers import Seen, gzip_bomb, gzip_bombing, huge_chunked, serve

MIB = 1 << 20


async def _only_attempt(stack: Any, sub_id: str) -> dict[str, Any]:
    async def ended() -> list[dict[str, Any]] | None:
        rows = (await stack.api.get(f"/v1/subscriptions/{sub_id}/deliveries")).json()["data"]
        return rows if rows and rows[0]["status"] != "pending" else None

    [delivery] = await eventually(ended, timeout=30, what="the delivery ended")
    detail = (await stack.api.get(f"/v1/deliveries/{delivery['id']}")).json()
    assert detail["status"] == "succeeded", detail
    [attempt] = detail["attempt_log"]
    return dict(attempt)


async def test_a_gigabyte_chunked_answer_is_read_to_4_kib_and_the_connection_dropped(
    make_stack: StackFactory,
) -> None:
    seen = Seen()
    async with serve(huge_chunked(seen)) as url:
        stack = await make_stack(
            HOOKBRIDGE_CALLBACK_TIMEOUT_S="5", HOOKBRIDGE_LEASE_S="15", HOOKBRIDGE_RETRY_SCHEDULE="30s"
        )
        sub = await stack.subscribe(url)
        assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
        attempt = await _only_attempt(stack, sub["id"])
        assert attempt["status_code"] == 200 and attempt["error"] is None
        assert attempt["response_body"] == "A" * 4096  # what the log keeps, and all that was read
        await eventually(lambda: _value(seen.dropped == 1), what="the receiver saw the worker hang up")
    # Socket buffers take a few MiB; reading the whole body would have taken the full GiB (or, within the
    # timeout, hundreds of MiB).
    assert seen.bytes_sent < 32 * MIB, seen
    assert seen.accept_encoding == ["identity"]


async def test_a_gzip_bomb_is_kept_as_sent_never_inflated(make_stack: StackFactory) -> None:
    seen = Seen()
    async with serve(gzip_bombing(seen)) as url:
        stack = await make_stack(
            HOOKBRIDGE_CALLBACK_TIMEOUT_S="5", HOOKBRIDGE_LEASE_S="15", HOOKBRIDGE_RETRY_SCHEDULE="30s"
        )
        sub = await stack.subscribe(url)
        assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
        attempt = await _only_attempt(stack, sub["id"])
    assert attempt["status_code"] == 200 and attempt["error"] is None
    body = attempt["response_body"]
    # The first 4 KiB exactly as sent (gzip's magic first), not 4 KiB of the inflated zeros.
    assert body == gzip_bomb()[:4096].decode("utf-8", "replace")
    assert seen.accept_encoding == ["identity"]


async def test_both_bombs_at_once_leave_another_tenants_callback_alone(make_stack: StackFactory) -> None:
    """Bob's ordinary receiver is called back while Alice's two bombs are served."""
    chunked, bomb, plain = Seen(), Seen(), Seen()

    async def ok(request: Any) -> Any:
        from aiohttp import web

        plain.requests += 1
        await request.read()
        return web.Response(status=204)

    async with serve(huge_chunked(chunked)) as url1, serve(gzip_bombing(bomb)) as url2, serve(ok) as url3:
        stack = await make_stack(
            HOOKBRIDGE_CALLBACK_TIMEOUT_S="5", HOOKBRIDGE_LEASE_S="15", HOOKBRIDGE_RETRY_SCHEDULE="30s"
        )
        subs = [await stack.subscribe(url1), await stack.subscribe(url2)]
        bob = await stack.bob.post("/v1/subscriptions", json={"url": url3})
        assert bob.status_code == 201
        for sub in subs:
            await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")
        await stack.bob.post(f"/v1/subscriptions/{bob.json()['id']}/test")
        for sub in subs:
            attempt = await _only_attempt(stack, sub["id"])
            assert attempt["status_code"] == 200
        await eventually(lambda: _value(plain.requests == 1), what="bob's callback")
    assert chunked.bytes_sent < 32 * MIB


async def _value(value: object) -> object:
    return value
