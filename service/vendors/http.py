"""What every adapter's HTTP client shares: the vendor budget, request metrics, error classification,
the per-request auth forms (:class:`StaticHeaderAuth`, :class:`RefreshingBearerAuth`), the same-origin
check for absolute URLs a vendor hands out, and a large result streamed to a bounded file."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http.cookiejar
import json
import os
import re
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any, Literal, Protocol

import aiohttp
import httpx
import orjson
import yarl
from httpx_aiohttp import AiohttpTransport
from multidict import CIMultiDict, CIMultiDictProxy

from service.vendors import text
from service.vendors.base import (
    KIND_EXTENSION,
    NO_CALL,
    TICKET_EXTENSION,
    Call,
    Kind,
    ResultFile,
    VendorRateLimited,
    VendorResultTooLarge,
    VendorSubmitUncertain,
    VendorTransient,
)


class Budget(Protocol):
    """A vendor's request budget and its pause after a 429, shared by every worker process.

    ``ticket`` is what the request carried in its extensions (``Call.ticket``: the worker's per-step
    ticket, opaque here), or None."""

    async def acquire(self, ticket: object | None = None) -> None:
        """Waits until this process may send one request to the vendor; raises
        :class:`VendorRateLimited` without sending while the vendor is paused after a 429."""

    async def settle(
        self, ticket: object | None = None, status: int | None = None, retry_after: float | None = None
    ) -> None:
        """After every request: its status (None when no answer came) and, on 429, ``Retry-After`` in
        seconds (None when absent). A 429 pauses the vendor for every worker."""


# (vendor, kind, status code or "error", seconds) for metrics.
Observer = Callable[[str, str, str, float], None]

# The most of one answer a vendor client reads unless told (the worker passes MAX_DOCUMENT_BYTES and an
# envelope's room: a poll of Cloudsquid or Uptiq carries its result inline).
ANSWER_ENVELOPE_BYTES = 64 * 1024
MAX_ANSWER_BYTES = 50 * 1024 * 1024 + ANSWER_ENVELOPE_BYTES
_SLICE = 64 * 1024
# What an encoded answer is decoded by: deflate inflates a slice at most ~1,032 times, so one slice's
# decode holds at most ~16.5 MiB on top of the cap, as httpx's own path does (httpx_aiohttp reads 16 KiB).
_DECODE_SLICE = 16 * 1024


# Tells an error answer that the vendor means as a 429 (``VendorSpec.throttled``).
Throttled = Callable[[httpx.Response], bool]
# The longest error answer read to tell whether it throttles (AWS's error bodies are a few hundred bytes).
_THROTTLE_BODY_BYTES = 64 * 1024


class BudgetedTransport(httpx.AsyncBaseTransport):
    """Takes one budget slot before every request, and pauses the vendor (or the request's kind group)
    on a 429. ``kinds``: the budget of each kind a group of the vendor's names (``VendorSpec.budgets``);
    every other kind spends ``budget``, and ``auth`` none."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        vendor: str,
        budget: Budget | None,
        observe: Observer | None,
        kinds: Mapping[str, Budget] | None = None,
        session: _Session | None = None,
        throttled: Throttled | None = None,
    ) -> None:
        self.inner = inner
        self.session = session
        self._throttled = throttled
        self._vendor = vendor
        self._budget = budget
        self._kinds: dict[str, Budget | None] = {**(kinds or {}), Kind.AUTH: None}
        self._observe = observe

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        kind = str(request.extensions.get(KIND_EXTENSION, request.method.lower()))
        ticket = request.extensions.get(TICKET_EXTENSION)
        response = await self.metered(kind, ticket, lambda: self.inner.handle_async_request(request))
        if kind == Kind.AUTH:  # read by the auth flow (httpx's own read): bounded here, as it arrives
            response.stream = _CappedStream(response.stream, _TOKEN_ANSWER_BYTES)
        return response

    async def metered(
        self, kind: str, ticket: object | None, send: Callable[[], Awaitable[httpx.Response]]
    ) -> httpx.Response:
        """Sends one request through ``send`` under its budget, observed: every request to the vendor
        goes through here, httpx's own way or :class:`VendorClient`'s fast one. ``ticket`` is the step's
        (the request's extensions). A token request (kind ``auth``) is observed but never budgeted: it
        goes to the identity provider, not the vendor."""
        budget = self._kinds.get(kind, self._budget)
        if budget is not None:
            await budget.acquire(ticket)
        started = time.perf_counter()
        try:
            response = await send()
        except Exception:
            if self._observe:
                self._observe(self._vendor, kind, "error", time.perf_counter() - started)
            if budget is not None:
                await budget.settle(ticket, None, None)
            raise
        if self._observe:
            self._observe(self._vendor, kind, str(response.status_code), time.perf_counter() - started)
        if budget is not None:
            limited = response.status_code == 429 or await self._is_throttling(response)
            retry_after = retry_after_seconds(response.headers.get("retry-after")) if limited else None
            # A throttling answer of another status (Textract's 400 and 500) pauses as a 429 does.
            await budget.settle(ticket, 429 if limited else response.status_code, retry_after)
        return response

    async def _is_throttling(self, response: httpx.Response) -> bool:
        """Whether an error answer is the vendor's way of saying 429 (``VendorSpec.throttled``). Only a
        short answer is read for it (an error body, at most ``_THROTTLE_BODY_BYTES`` as announced); the
        body stays readable by the adapter."""
        if self._throttled is None or response.status_code < 400:
            return False
        length = response.headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > _THROTTLE_BODY_BYTES:
            return False
        await response.aread()
        return self._throttled(response)

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.session is not None:  # httpx_aiohttp closes it only if it made a request itself
            await self.session.aclose()


class VendorClient(httpx.AsyncClient):
    """An httpx client whose plain requests skip httpx's request building, URL merging and cookie jar and go
    straight to the aiohttp session under its transport, with the headers and timeouts built once: a GET
    (a poll) and a POST of a JSON body (a submit), to a path of plain characters, with no query parameters,
    cookies or other options of their own and at most a few plain ASCII headers.

    A poll through httpx cost the worker about half of its CPU, and a submit's httpx layers a sixth of the
    worker's CPU during a burst of submits (docs/performance.md); adapters still write ``client.get(...)``
    and ``client.post(..., json=...)``, and every other request, or any client on another transport (tests
    inject ``httpx.MockTransport``), goes httpx's own way. A JSON body is encoded as httpx 0.28 encodes it
    (``tests/integration/test_vendor_client.py`` compares the bytes and headers on the wire). The answer is
    a full ``httpx.Response`` with its body read (and decoded: a broken gzip stream raises
    ``httpx.DecodingError`` as httpx's own would), and aiohttp's faults become httpx's ``TransportError``s,
    so the adapters cannot tell the two paths apart. Neither path keeps cookies: a vendor API is called
    with its key, and a cookie it sets is not sent back (:func:`_no_cookies`).

    Both paths use httpx's, aiohttp's and httpx_aiohttp's public APIs only (the session is ours, handed to
    the transport as its ``client``; the answer is a response built by httpx's constructor; aiohttp's
    faults are mapped by httpx_aiohttp's table, copied in ``_AIOHTTP_FAULTS``), so that a minor release of
    any of them cannot change what a poll does; the conformance suite runs every adapter through it
    against the real simulator.

    Nor does either path read more of an answer than ``max_answer_bytes`` (decoded): a longer one raises
    :class:`VendorResultTooLarge` as it arrives, so that a vendor (or a proxy in front of it) cannot push
    the worker's memory past what hookbridge keeps of a result. A request the caller streams
    (``client.stream``, :func:`get_bounded`, :func:`stream_to_file`) is the caller's to bound.

    A client with an ``auth`` (``VendorSpec.auth``: a token that expires, a signature) sends every request
    httpx's own way, so that the auth flow sees each request complete, body and headers.
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        timeout_s: float,
        transport: BudgetedTransport,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        auth: httpx.Auth | None = None,
        session: _Session | None = None,
    ) -> None:
        super().__init__(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            follow_redirects=False,
            cookies=_no_cookies(),
            auth=auth,
        )
        self._metered = transport
        self._max_answer = max_answer_bytes
        # The aiohttp session under the transport (handed to it by make_client), or None: no fast path.
        self._session = session if auth is None else None
        # The request's URL is the base's with another path: no string for yarl to parse on every request.
        self._plain_root = yarl.URL(str(self.base_url))
        self._plain_prefix = self._plain_root.path.rstrip("/")
        # httpx's defaults (User-Agent, Accept...) and auth, in the form aiohttp would turn them into on every
        # request (read-only: a proxy, which aiohttp copies from as it would from a dict).
        self._plain_headers = CIMultiDictProxy(CIMultiDict(self.headers.items()))
        self._plain_timeout = aiohttp.ClientTimeout(
            sock_connect=timeout_s, sock_read=timeout_s, connect=timeout_s
        )

    async def get(  # type: ignore[override]
        self, url: httpx.URL | str, *, extensions: dict[str, Any] | None = None, **options: Any
    ) -> httpx.Response:
        if not (not options and self._plain(url, extensions)):
            return await super().get(url, extensions=extensions, **options)
        given = extensions or {}
        kind = str(given.get(KIND_EXTENSION, "get"))
        return await self._metered.metered(
            kind,
            given.get(TICKET_EXTENSION),
            lambda: self._fast("GET", str(url), None, self._plain_headers, kind),
        )

    async def post(  # type: ignore[override]
        self,
        url: httpx.URL | str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        extensions: dict[str, Any] | None = None,
        **options: Any,
    ) -> httpx.Response:
        plain = (
            not options
            and isinstance(json, dict)
            and self._plain(url, extensions)
            and (headers is None or _plain_headers(headers))
        )
        if not plain:
            return await super().post(url, json=json, headers=headers, extensions=extensions, **options)
        # httpx's encode_json, byte for byte; a value JSON cannot hold raises here as it does there.
        body = _dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        merged = CIMultiDict(self._plain_headers)
        if headers:
            merged.update(headers)
        merged.setdefault("Content-Type", "application/json")
        given = extensions or {}
        kind = str(given.get(KIND_EXTENSION, "post"))
        return await self._metered.metered(
            kind, given.get(TICKET_EXTENSION), lambda: self._fast("POST", str(url), body, merged, kind)
        )

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """httpx's own path: the answer read as httpx reads it, but no further than ``max_answer_bytes``
        (decoded), and handed back as a response over that body."""
        response = await super().send(request, stream=True, auth=auth, follow_redirects=follow_redirects)
        if stream:
            return response
        try:
            kind = str(request.extensions.get(KIND_EXTENSION, request.method.lower()))
            body = await _bounded(response.aiter_bytes(), self._max_answer, kind)
        finally:
            await response.aclose()
        return httpx.Response(
            response.status_code,
            headers=_decoded_headers(response.headers.raw, response.headers.get("content-encoding")),
            content=body,
            request=request,
            extensions=response.extensions,
            history=response.history,
        )

    def _plain(self, url: httpx.URL | str, extensions: dict[str, Any] | None) -> bool:
        return (
            self._session is not None
            and isinstance(url, str)
            and _PLAIN_PATH.fullmatch(url) is not None
            and (extensions is None or extensions.keys() <= _KIND_ONLY)
        )

    async def _fast(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: CIMultiDictProxy[str] | CIMultiDict[str],
        kind: str,
    ) -> httpx.Response:
        assert self._session is not None
        session = self._session()
        target = self._plain_root.with_path(f"{self._plain_prefix}/{path.lstrip('/')}", encoded=True)
        try:
            async with session.request(
                method,
                target,
                data=body,
                headers=headers,
                allow_redirects=False,
                auto_decompress=False,  # httpx decodes, as on its own path
                timeout=self._plain_timeout,
            ) as answer:
                declared = answer.content_length
                if declared is None:  # chunked, or to the end of the connection: read no further than the cap
                    content = await _bounded(answer.content.iter_chunked(_SLICE), self._max_answer, kind)
                elif declared > self._max_answer:
                    raise _too_large(kind, self._max_answer)
                else:  # aiohttp reads no more than the declared length
                    content = await answer.read()
        except VendorResultTooLarge:
            raise
        except Exception as exc:
            raise _as_httpx(exc) from exc  # httpx's TransportError for aiohttp's, as on httpx's own path
        raw_headers: Any = answer.raw_headers
        encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding != "identity":
            # httpx's own decoders (gzip, deflate, br, zstd), a slice at a time, up to the cap; the body is
            # handed on decoded, as httpx's own path hands it (send).
            encoded = httpx.Response(answer.status, headers=raw_headers, stream=_Slices(content))
            content = _bounded_sync(encoded.iter_bytes(), self._max_answer, kind)
            raw_headers = _decoded_headers(raw_headers, encoding)
        return _FastResponse(method, answer.status, raw_headers, content, target)


# What httpx_aiohttp's transport maps aiohttp's faults to (its own table), so that both paths raise the
# same httpx exceptions, each with aiohttp's as its cause (nothing_sent() reads that).
_AIOHTTP_FAULTS: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    (aiohttp.ServerTimeoutError, httpx.TimeoutException),
    (aiohttp.SocketTimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientConnectionError, httpx.ConnectTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientProxyConnectionError, httpx.ProxyError),
    (aiohttp.ClientHttpProxyError, httpx.ProxyError),
    (aiohttp.NonHttpUrlClientError, httpx.UnsupportedProtocol),
    (aiohttp.InvalidUrlClientError, httpx.UnsupportedProtocol),
)


def _as_httpx(exc: Exception) -> Exception:
    """The most specific httpx exception for an aiohttp fault (the exception itself if none maps)."""
    mapped: type[httpx.TransportError] | None = None
    for aiohttp_fault, httpx_fault in _AIOHTTP_FAULTS:
        if isinstance(exc, aiohttp_fault) and (mapped is None or issubclass(httpx_fault, mapped)):
            mapped = httpx_fault
    return exc if mapped is None else mapped(str(exc))


def _decoded_headers(raw: Any, encoding: str | None) -> Any:
    """An answer's headers once its body is decoded: without ``Content-Encoding`` and the encoded
    ``Content-Length`` (what ``get_bounded`` hands on as well)."""
    if not encoding or encoding.strip().lower() == "identity":
        return raw
    drop = (b"content-encoding", b"content-length")
    return [(k, v) for k, v in raw if (k.lower() if isinstance(k, bytes) else k.lower().encode()) not in drop]


class _Session:
    """The one aiohttp session under a vendor client: handed to httpx_aiohttp's transport as its
    ``client`` (a factory, its public parameter) and used by the fast path as well, made in the running
    loop on first use, as the transport would make its own."""

    def __init__(self, max_connections: int) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def __call__(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, keepalive_timeout=5.0, ssl=httpx.create_ssl_context()
            )
            # No cookie jar: a vendor's cookie is neither kept nor sent back (_no_cookies, on httpx's side).
            jar = aiohttp.DummyCookieJar()
            session = self._session = aiohttp.ClientSession(connector=connector, cookie_jar=jar)
        return session

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()


class _FastResponse(httpx.Response):
    """An ``httpx.Response`` over a body already read (and decoded), built through httpx's public
    constructor, its ``content`` the body as read, its headers made on first use (a poll that succeeds
    reads none), and parsed by orjson. Its ``request`` (for ``.url``, ``raise_for_status()``) a plugin
    adapter may still ask for: built on first use, since no poll of ours does.

    Built with ``content=``, httpx would run the body through its decoders and chunker at once: about 90
    us a poll against 8 on this path (a loaded 2-core machine), which ``bench.throughput`` sees."""

    def __init__(self, method: str, status_code: int, headers: Any, body: bytes, url: yarl.URL) -> None:
        # Over a stream of the body, as a transport's answer; the body itself is ``content`` at once (built
        # with ``content=``, httpx would run it through its decoders and chunker: ten times the cost).
        super().__init__(status_code, stream=httpx.ByteStream(body))
        self._fast_body = body
        self.is_stream_consumed = self.is_closed = True  # read and closed, as httpx's own read leaves one
        self._fast_method = method
        self._fast_url = url
        self._fast_request: httpx.Request | None = None
        self._fast_raw_headers = headers  # after the constructor, which set its own Content-Length

    @property
    def headers(self) -> httpx.Headers:
        raw = self._fast_raw_headers
        if raw is not None:
            self._fast_raw_headers = None
            self._fast_headers = httpx.Headers(raw)
        return self._fast_headers

    @headers.setter
    def headers(self, value: httpx.Headers) -> None:
        self._fast_raw_headers = None
        self._fast_headers = value

    @property
    def content(self) -> bytes:
        return self._fast_body

    # Read already: what httpx's own read leaves answers these from the body, so does this one.
    def read(self) -> bytes:
        return self._fast_body

    async def aread(self) -> bytes:
        return self._fast_body

    def iter_bytes(self, chunk_size: int | None = None) -> Iterator[bytes]:
        body, step = self._fast_body, chunk_size or len(self._fast_body) or 1
        for start in range(0, len(body), step):
            yield body[start : start + step]

    async def aiter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        for chunk in self.iter_bytes(chunk_size):
            yield chunk

    @property
    def request(self) -> httpx.Request:
        made = self._fast_request
        if made is None:
            made = self._fast_request = httpx.Request(self._fast_method, str(self._fast_url))
        return made

    @request.setter
    def request(self, value: httpx.Request) -> None:
        self._fast_request = value

    def raise_for_status(self) -> httpx.Response:
        # httpx's check reads the request it was given: given now, through its public setter.
        httpx.Response.request.fset(self, self.request)  # type: ignore[attr-defined]
        return super().raise_for_status()

    def json(self, **kwargs: Any) -> Any:
        """orjson where it reads the body as the standard library would (UTF-8, no options); otherwise, or
        on what it refuses (a BOM, another encoding, NaN, integers past 64 bits), httpx's own, which
        raises the same ``ValueError`` for a body that is not JSON."""
        if not kwargs:
            try:
                return orjson.loads(self.content)
            except orjson.JSONDecodeError:
                pass
        return super().json(**kwargs)


_KIND_ONLY = frozenset({KIND_EXTENSION, TICKET_EXTENSION})
# Paths the fast requests take: nothing that httpx and yarl would quote or split differently.
_PLAIN_PATH = re.compile(r"/?[A-Za-z0-9._~/-]+")
# Headers the fast POST takes: a token's name, a value of visible ASCII (httpx refuses what is not ASCII,
# aiohttp would send it as UTF-8), and none that the two clients set or frame the body by themselves.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")
_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "cookie", "connection", "expect"})
_dumps = json.dumps


def _plain_headers(headers: Mapping[str, str]) -> bool:
    return all(
        isinstance(name, str)
        and isinstance(value, str)
        and _HEADER_NAME.fullmatch(name) is not None
        and name.lower() not in _FRAMING
        and _HEADER_VALUE.fullmatch(value) is not None
        for name, value in headers.items()
    )


def _too_large(kind: str, cap: int) -> VendorResultTooLarge:
    return VendorResultTooLarge(
        f"the vendor's answer to a {kind} is more than the {cap} bytes read of one "
        "(HOOKBRIDGE_MAX_DOCUMENT_BYTES and an envelope's room)"
    )


async def _bounded(chunks: AsyncIterator[bytes], cap: int, kind: str) -> bytes:
    body = bytearray()
    async for chunk in chunks:
        if len(body) + len(chunk) > cap:  # before the copy: a decoded chunk may be large
            raise _too_large(kind, cap)
        body += chunk
    return bytes(body)


def _bounded_sync(chunks: Iterator[bytes], cap: int, kind: str) -> bytes:
    body = bytearray()
    for chunk in chunks:
        if len(body) + len(chunk) > cap:  # before the copy: a decoded chunk may be large
            raise _too_large(kind, cap)
        body += chunk
    return bytes(body)


class _Slices(httpx.SyncByteStream):
    """A body already read, handed to httpx's decoders a slice at a time: no slice inflates past what one
    compressed slice can (about a thousand times its size), so the cap is checked as it decodes."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self._body), _DECODE_SLICE):
            yield self._body[start : start + _DECODE_SLICE]


def _no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that takes none: what a vendor sets is neither kept nor sent, on either path. (A jar,
    not ``httpx.Cookies``: httpx copies one of those into a jar of the default policy.)"""
    return http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


def make_client(
    base_url: str,
    headers: dict[str, str],
    *,
    timeout_s: float,
    vendor: str,
    budget: Budget | None = None,
    observe: Observer | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
    auth: httpx.Auth | None = None,
    kinds: Mapping[str, Budget] | None = None,
    throttled: Throttled | None = None,
) -> httpx.AsyncClient:
    """An httpx client on aiohttp's transport (4-9x faster under concurrency, see MEASURED.md), whose polls
    and submits skip httpx's layers and whose answers are bounded (:class:`VendorClient`). ``auth`` runs
    on every request (``VendorSpec.auth``); ``kinds`` are the budgets of the vendor's kind groups."""
    session = None if transport is not None else _Session(max_connections=200)
    inner = transport or AiohttpTransport(client=session)
    return VendorClient(
        base_url=base_url,
        headers=headers,
        timeout_s=timeout_s,
        transport=BudgetedTransport(inner, vendor, budget, observe, kinds, session, throttled),
        max_answer_bytes=max_answer_bytes,
        auth=auth,
        session=session,
    )


# Absolute URLs from the vendor ------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def same_origin(url: str | httpx.URL, base: str | httpx.URL) -> bool:
    """Whether ``url`` is under the vendor's configured ``base`` (same scheme, host and port, and a path
    at or below the base's), so that our key may go there: an absolute URL a vendor hands out (Azure's
    ``Operation-Location``, Nutrient's ``downloadUrl``) is checked before a request carries our key. A
    relative URL without a host is resolved against the base, so it is under it. An URL httpx refuses is
    not."""
    try:
        target, root = httpx.URL(str(url)), httpx.URL(str(base))
    except httpx.InvalidURL:
        return False
    if target.is_relative_url:
        return not target.host
    if (target.scheme, target.host) != (root.scheme, root.host):
        return False
    if (target.port or _DEFAULT_PORTS.get(target.scheme)) != (root.port or _DEFAULT_PORTS.get(root.scheme)):
        return False
    prefix = root.path.rstrip("/")
    return target.path == prefix or target.path.startswith(prefix + "/")


# Auth per request (VendorSpec.auth) -------------------------------------------------------------------


class StaticHeaderAuth(httpx.Auth):
    """Headers set on every request: ``auth_headers`` as an :class:`httpx.Auth` (for an auth that
    composes one, or a test)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = dict(headers)
        text.register(list(self._headers.values()))

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(self._headers)
        yield request


# The most of a token endpoint's answer read.
_TOKEN_ANSWER_BYTES = 64 * 1024


class RefreshingBearerAuth(httpx.Auth):
    """A bearer token that expires (Entra ID, Google OAuth): fetched before the first request, again
    ``margin_s`` before it expires, and once more after a 401 (revoked early). The token request is a
    request the flow yields, so it goes through the vendor client's transport as kind ``auth`` (observed,
    never budgeted); concurrent requests share one refresh. A subclass says how to ask
    (:meth:`token_request`) and how to read the answer (:meth:`read_token`); each token is registered for
    scrubbing before it is sent (``text.rotate``: the last few are kept)."""

    def __init__(self, *, margin_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._margin_s = margin_s
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self._slot = f"bearer-{id(self)}"

    def token_request(self) -> httpx.Request:
        """The request for a new token (absolute URL); its kind is set to ``auth`` here."""
        raise NotImplementedError

    def read_token(self, status_code: int, body: bytes) -> tuple[str, float]:
        """The token and its lifetime in seconds from the token endpoint's answer; raise
        :class:`~service.vendors.base.VendorError` (transient, or rejected for a refused credential)."""
        raise NotImplementedError

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("RefreshingBearerAuth works with httpx.AsyncClient only")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        stale: str | None = None
        for _ in range(2):
            if self._token is None or self._token == stale or self._clock() >= self._expires_at:
                async with self._lock:  # held across the token request: one refresh for every waiter
                    if self._token is None or self._token == stale or self._clock() >= self._expires_at:
                        asking = self.token_request()
                        asking.extensions = {**asking.extensions, KIND_EXTENSION: str(Kind.AUTH)}
                        answer = yield asking
                        with transport_errors():  # bounded by the transport (kind auth)
                            body = await answer.aread()
                        token, lifetime = self.read_token(answer.status_code, body)
                        text.rotate(self._slot, token)
                        self._token = token
                        self._expires_at = self._clock() + max(0.0, lifetime - self._margin_s)
            assert self._token is not None
            request.headers["Authorization"] = f"Bearer {self._token}"
            response = yield request
            if response.status_code != 401 or stale is not None:
                return
            stale = self._token  # refused before its time: one fresh token, one more try


class _CappedStream(httpx.AsyncByteStream):
    """A token endpoint's answer, read no further than ``cap`` raw bytes."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream, cap: int) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self._inner = inner
        self._cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise VendorTransient(f"the token endpoint's answer is more than {self._cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _read_capped(response: httpx.Response, cap: int) -> bytes:
    body = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > cap:
                break
    finally:
        await response.aclose()
    return bytes(body[:cap])


# A large result, streamed to a bounded file ------------------------------------------------------------


async def stream_to_file(
    client: httpx.AsyncClient,
    url: str,
    *,
    limit: int,
    call: Call = NO_CALL,
    kind: Kind = Kind.FETCH,
    media_type: str | None = None,
    data: Any = None,
) -> tuple[httpx.Response, ResultFile | None]:
    """GET ``url`` and write its body to a temporary file of at most ``limit`` bytes (decoded), never
    held whole in memory: the :class:`ResultFile` the worker moves into the store, or None when the
    answer is not a 2xx (then the response's body is read up to 64 KiB, for its error). Past ``limit``
    the file is removed and :class:`VendorResultTooLarge` raised. ``media_type`` defaults to the
    answer's own."""
    with transport_errors(), _decoding_errors():
        async with client.stream("GET", url, extensions=call.extensions(kind)) as response:
            if not response.is_success:
                body = await _read_capped(response, 64 * 1024)
                return _read_response(response, body), None
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _too_large(str(kind), limit)
            fd, path = tempfile.mkstemp(prefix="hookbridge-result-")
            size = 0
            try:
                with os.fdopen(fd, "wb") as out:
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > limit:
                            raise _too_large(str(kind), limit)
                        out.write(chunk)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                raise
    kept = media_type or response.headers.get("content-type", "application/octet-stream").split(";")[0]
    return response, ResultFile(path=path, media_type=kept.strip(), size=size, data=data)


def _read_response(response: httpx.Response, body: bytes) -> httpx.Response:
    """A response over a body already read (and decoded): ``.json()`` and ``.text`` work on it."""
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(response.status_code, headers=headers, content=body)


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date. None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_message(response: httpx.Response) -> str:
    """The vendor's own words: ``errorMessage``, ``message`` or ``error``, else the start of the body."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("errorMessage", "message", "error", "detail"):
            value = body.get(key)
            if isinstance(value, str) and value:
                code = body.get("code")
                said = f"{value} ({code})" if isinstance(code, str) and code not in value else value
                return text.clean(said)
            if isinstance(value, dict) and isinstance(value.get("message"), str):
                return text.clean(value["message"])
    body_text = response.text.strip()
    return text.clean(body_text, 300) if body_text else f"HTTP {response.status_code}"


def raise_for_transient(response: httpx.Response) -> None:
    """429, 408 and 5xx are worth retrying; the caller decides what other codes mean."""
    status = response.status_code
    if status == 429:
        raise VendorRateLimited(
            f"rate limited: {error_message(response)}",
            status_code=status,
            retry_after=retry_after_seconds(response.headers.get("retry-after")),
        )
    if status == 408 or status >= 500:
        raise VendorTransient(
            f"HTTP {status}: {error_message(response)}",
            status_code=status,
            retry_after=retry_after_seconds(response.headers.get("retry-after")),
        )


class _Mapped:
    """A context manager that turns one exception type into a :class:`VendorTransient`. A class, not
    ``@contextlib.contextmanager``: it wraps every poll, and a generator-based one costs several times
    more to enter and leave."""

    __slots__ = ("_describe", "_kind")

    def __init__(self, kind: type[Exception], describe: Callable[[Exception], str]) -> None:
        self._kind = kind
        self._describe = describe

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> Literal[False]:
        if exc is not None and isinstance(exc, self._kind):
            raise VendorTransient(self._describe(exc)) from exc
        return False


def _decoding_errors() -> _Mapped:
    """A body that does not decode (a broken gzip stream) is a vendor fault worth retrying."""
    return _Mapped(httpx.DecodingError, lambda exc: f"the answer does not decode: {exc}")


def transport_errors() -> _Mapped:
    """Connection faults, timeouts and dropped connections become :class:`VendorTransient`."""
    return _Mapped(httpx.TransportError, _transport_fault)


# Faults that happen before a byte of the request left: nothing can have been created at the vendor.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


class _SubmitFaults:
    """:func:`transport_errors` for a submit: a fault after the request may have left (a read timeout, a
    dropped connection) is :class:`VendorSubmitUncertain`, since the vendor may have created the job."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> Literal[False]:
        if exc is None or not isinstance(exc, httpx.TransportError):
            return False
        if nothing_sent(exc):
            raise VendorTransient(_transport_fault(exc)) from exc
        raise VendorSubmitUncertain(
            f"the submit may have reached the vendor, but no answer came ({_transport_fault(exc)})"
        ) from exc


def nothing_sent(exc: httpx.TransportError) -> bool:
    """Whether nothing of the request can have reached the vendor. httpx_aiohttp maps aiohttp's faults
    coarsely ("Server disconnected" becomes a ConnectTimeout), so aiohttp's own exception decides where
    there is one: only a connector's failure (refused, DNS, TLS) or a connect timeout sent nothing."""
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError | TimeoutError):
        return isinstance(cause, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)
    return isinstance(exc, _NOT_SENT)


def submit_errors() -> _SubmitFaults:
    """Connection faults of a submit: :class:`VendorTransient` when nothing left, else
    :class:`VendorSubmitUncertain`."""
    return _SubmitFaults()


def unexpected_answer(response: httpx.Response, missing: str) -> VendorSubmitUncertain:
    """A 2xx to a submit whose body does not name the job: the vendor may have created one."""
    return VendorSubmitUncertain(
        f"the vendor answered HTTP {response.status_code} without {missing}; it may have created a job",
        status_code=response.status_code,
        answer=response.text,
    )


def _transport_fault(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def get_bounded(
    client: httpx.AsyncClient, url: str, *, limit: int, call: Call = NO_CALL, kind: Kind = Kind.FETCH
) -> tuple[httpx.Response, bytes]:
    """GET ``url`` and read at most ``limit`` bytes of its body, so that a vendor cannot push more into the
    worker's memory (and Redis) than hookbridge keeps. A longer body (by its ``Content-Length`` or as read)
    raises :class:`VendorResultTooLarge`; an error answer's body is read up to 64 KiB. A result larger
    than one should hold in memory goes to a file instead (:func:`stream_to_file`)."""
    with transport_errors(), _decoding_errors():
        async with client.stream("GET", url, extensions=call.extensions(kind)) as response:
            cap = limit if response.is_success else min(limit, 64 * 1024)
            declared = response.headers.get("content-length", "")
            if response.is_success and declared.isdigit() and int(declared) > limit:
                raise VendorResultTooLarge(
                    f"the vendor's {kind} is {int(declared)} bytes, more than the {limit} kept "
                    "(HOOKBRIDGE_MAX_DOCUMENT_BYTES)"
                )
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > cap:
                    if response.is_success:
                        raise VendorResultTooLarge(
                            f"the vendor's {kind} is more than the {limit} bytes kept "
                            "(HOOKBRIDGE_MAX_DOCUMENT_BYTES)"
                        )
                    del body[cap:]
                    break
    # A response whose body was read (and decoded): ``.json()`` and ``.text`` work on it for the error paths.
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(response.status_code, headers=headers, content=bytes(body)), bytes(body)
