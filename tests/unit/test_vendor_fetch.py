"""The document fetcher (service/delivery/fetch.py) against a real server on a real port: the callback
address rules on every hop, the size limit, and which faults are for good and which are transient."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from service.config.settings import parse_blocked_networks, parse_networks
from service.delivery.fetch import MAX_REDIRECTS, DocumentFetcher
from service.delivery.urlsafety import Policy
from service.dev.embedded_redis import free_port
from service.vendors.base import DocumentTooLarge, DocumentUnavailable, VendorTransient

LOOPBACK_ALLOWED = Policy(parse_networks("127.0.0.0/8,::1/128"), parse_blocked_networks(""))
PRODUCTION = Policy((), parse_blocked_networks(""))


def app(seen: list[dict[str, Any]]) -> Starlette:
    async def doc(request: Request) -> Response:
        seen.append(dict(request.headers))
        return Response(b"%PDF-1.4 doc", media_type="application/pdf")

    async def redirect(request: Request) -> Response:
        seen.append(dict(request.headers))
        return Response(status_code=302, headers={"Location": request.query_params["to"]})

    async def loop(request: Request) -> Response:
        seen.append(dict(request.headers))
        return Response(status_code=307, headers={"Location": "/loop"})

    async def big(request: Request) -> Response:
        return Response(b"x" * 5000)

    async def big_streamed(request: Request) -> Response:
        async def chunks() -> Any:
            for _ in range(50):
                yield b"x" * 1000

        return StreamingResponse(chunks())  # no Content-Length: cut off while reading

    async def status(request: Request) -> Response:
        return Response(b"no", status_code=int(request.path_params["code"]))

    return Starlette(
        routes=[
            Route("/doc.pdf", doc),
            Route("/redirect", redirect),
            Route("/loop", loop),
            Route("/big", big),
            Route("/big-streamed", big_streamed),
            Route("/status/{code}", status),
        ]
    )


@pytest.fixture
async def served(servers: Any) -> tuple[str, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    return await servers.start(app(seen), free_port()), seen


def fetcher(policy: Policy = LOOPBACK_ALLOWED, max_bytes: int = 4096) -> DocumentFetcher:
    return DocumentFetcher(policy, max_bytes=max_bytes, timeout_s=5)


async def test_a_document_is_fetched_without_credentials(served: Any) -> None:
    base, seen = served
    assert await fetcher().fetch(base + "/doc.pdf") == b"%PDF-1.4 doc"
    assert len(seen) == 1 and "authorization" not in seen[0] and "cookie" not in seen[0]


async def test_a_redirect_is_followed_and_checked_again(served: Any) -> None:
    base, seen = served
    assert await fetcher().fetch(base + "/redirect?to=/doc.pdf") == b"%PDF-1.4 doc"
    with pytest.raises(DocumentUnavailable, match="blocked network"):
        await fetcher().fetch(base + "/redirect?to=http://169.254.169.254/latest/meta-data/")
    with pytest.raises(DocumentUnavailable, match=f"more than {MAX_REDIRECTS}"):
        await fetcher().fetch(base + "/loop")
    assert len(seen) == 2 + 1 + MAX_REDIRECTS + 1


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:{port}/doc.pdf", "http://169.254.169.254/", "http://[::1]:{port}/doc.pdf"]
)
async def test_a_blocked_address_is_never_connected_to(served: Any, url: str) -> None:
    base, seen = served
    with pytest.raises(DocumentUnavailable, match="not allowed"):
        await fetcher(PRODUCTION).fetch(url.format(port=base.rsplit(":", 1)[-1]))
    assert seen == []


@pytest.mark.parametrize("path", ["/big", "/big-streamed"])
async def test_past_the_limit_is_refused(served: Any, path: str) -> None:
    with pytest.raises(DocumentTooLarge, match="HOOKBRIDGE_MAX_DOCUMENT_BYTES"):
        await fetcher(max_bytes=4096).fetch(served[0] + path)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (404, DocumentUnavailable),
        (403, DocumentUnavailable),
        (410, DocumentUnavailable),
        (429, VendorTransient),
        (408, VendorTransient),
        (500, VendorTransient),
        (503, VendorTransient),
    ],
)
async def test_refusals_are_for_good_and_faults_transient(served: Any, code: int, kind: type) -> None:
    with pytest.raises(kind) as caught:
        await fetcher().fetch(f"{served[0]}/status/{code}")
    assert isinstance(caught.value, DocumentUnavailable) is (kind is DocumentUnavailable)
    assert f"HTTP {code}" in str(caught.value)


async def test_nothing_listening_is_transient() -> None:
    with pytest.raises(VendorTransient) as caught:
        await fetcher().fetch(f"http://127.0.0.1:{free_port()}/doc.pdf")
    assert not isinstance(caught.value, DocumentUnavailable)
