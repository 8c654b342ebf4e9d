"""What every adapter's HTTP client shares: the vendor budget, request metrics, error classification."""

from __future__ import annotations

import email.utils
import http.cookiejar
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Literal, Protocol

import aiohttp
import httpx
import orjson
import yarl
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import map_aiohttp_exceptions
from multidict import CIMultiDict, CIMultiDictProxy

from service.vendors import text
from service.vendors.base import (
    VendorRateLimited,
    VendorResultTooLarge,
    VendorSubmitUncertain,
    VendorTransient,
)


class Budget(Protocol):
    """A vendor's request budget and its pause after a 429, shared by every worker process."""

    async def acquire(self) -> None:
        """Waits until this process may send one request to the vendor; raises
        :class:`VendorRateLimited` without sending while the vendor is paused after a 429."""

    async def settle(self, status: int | None, retry_after: float | None) -> None:
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


class BudgetedTransport(httpx.AsyncBaseTransport):
    """Takes one budget slot before every request, and pauses the whole vendor on a 429."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, vendor: str, budget: Budget | None, observe: Observer | None
    ) -> None:
        self.inner = inner
        self._vendor = vendor
        self._budget = budget
        self._observe = observe

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        kind = str(request.extensions.get("kind", request.method.lower()))
        return await self.metered(kind, lambda: self.inner.handle_async_request(request))

    async def metered(self, kind: str, send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        """Sends one request through ``send`` under the vendor's budget, observed: every request to the
        vendor goes through here, httpx's own way or :class:`VendorClient`'s fast one."""
        if self._budget is not None:
            await self._budget.acquire()
        started = time.perf_counter()
        try:
            response = await send()
        except Exception:
            if self._observe:
                self._observe(self._vendor, kind, "error", time.perf_counter() - started)
            if self._budget is not None:
                await self._budget.settle(None, None)
            raise
        if self._observe:
            self._observe(self._vendor, kind, str(response.status_code), time.perf_counter() - started)
        if self._budget is not None:
            limited = response.status_code == 429
            retry_after = retry_after_seconds(response.headers.get("retry-after")) if limited else None
            await self._budget.settle(response.status_code, retry_after)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


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

    Nor does either path read more of an answer than ``max_answer_bytes`` (decoded): a longer one raises
    :class:`VendorResultTooLarge` as it arrives, so that a vendor (or a proxy in front of it) cannot push
    the worker's memory past what hookbridge keeps of a result. A request the caller streams
    (``client.stream``, :func:`get_bounded`) is the caller's to bound.
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        timeout_s: float,
        transport: BudgetedTransport,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        super().__init__(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            follow_redirects=False,
            cookies=_no_cookies(),
        )
        self._metered = transport
        self._max_answer = max_answer_bytes
        self._session_of = transport.inner if isinstance(transport.inner, AiohttpTransport) else None
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
        kind = str((extensions or {}).get("kind", "get"))
        return await self._metered.metered(
            kind, lambda: self._fast("GET", str(url), None, self._plain_headers, kind)
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
        kind = str((extensions or {}).get("kind", "post"))
        return await self._metered.metered(kind, lambda: self._fast("POST", str(url), body, merged, kind))

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: httpx._types.AuthTypes | httpx._client.UseClientDefault | None = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: bool | httpx._client.UseClientDefault = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """httpx's own path: the answer read as httpx reads it, but no further than ``max_answer_bytes``."""
        response = await super().send(request, stream=True, auth=auth, follow_redirects=follow_redirects)
        if stream:
            return response
        try:
            kind = str(request.extensions.get("kind", request.method.lower()))
            body = await _bounded(response.aiter_bytes(), self._max_answer, kind)
            response._content = body  # what httpx's own read() leaves
        finally:
            await response.aclose()
        return response

    def _plain(self, url: httpx.URL | str, extensions: dict[str, Any] | None) -> bool:
        return (
            self._session_of is not None
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
        assert self._session_of is not None
        if not isinstance(self._session_of.client, aiohttp.ClientSession):
            self._session_of.client = self._session_of.get_client()
        session = self._session_of.client
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
        except Exception:
            with map_aiohttp_exceptions():  # httpx's TransportError for aiohttp's, as on httpx's own path
                raise
        encoded = answer.headers.get("Content-Encoding", "identity").strip().lower() != "identity"
        response = _FastResponse(method, answer.status, answer.raw_headers, content, target, encoded)
        if encoded:  # httpx decodes it (gzip, deflate, br, zstd), a slice at a time, up to the cap
            response.stream = _Slices(content)
            response._content = _bounded_sync(response.iter_bytes(), self._max_answer, kind)
        return response


class _FastResponse(httpx.Response):
    """An ``httpx.Response`` over a body already read: built the way httpx's own client builds one from a
    transport's stream, without re-reading the body through httpx's decoders when it is not encoded (a
    third of the response's cost), and parsed by orjson. Its ``request`` (for ``raise_for_status()``,
    ``.url``) a plugin adapter may still ask for: built on first use, since no poll of ours does."""

    def __init__(
        self, method: str, status_code: int, headers: Any, body: bytes, url: yarl.URL, encoded: bool
    ) -> None:
        super().__init__(status_code, stream=httpx.ByteStream(body))
        self._fast_method = method
        self._fast_raw_headers = headers  # made httpx.Headers on first use: a poll that succeeds reads none
        self._fast_url = url
        if not encoded:  # an encoded body is decoded by VendorClient._fast, under its cap
            self._content = body
            self.is_stream_consumed = True
            self.is_closed = True

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
    def request(self) -> httpx.Request:
        if self._request is None:
            self._request = httpx.Request(self._fast_method, str(self._fast_url))
        return self._request

    @request.setter
    def request(self, value: httpx.Request) -> None:
        self._request = value

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


_KIND_ONLY = frozenset({"kind"})
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
) -> httpx.AsyncClient:
    """An httpx client on aiohttp's transport (4-9x faster under concurrency, see MEASURED.md), whose polls
    and submits skip httpx's layers and whose answers are bounded (:class:`VendorClient`)."""
    inner = transport or AiohttpTransport(limits=httpx.Limits(max_connections=200))
    return VendorClient(
        base_url=base_url,
        headers=headers,
        timeout_s=timeout_s,
        transport=BudgetedTransport(inner, vendor, budget, observe),
        max_answer_bytes=max_answer_bytes,
    )


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
    client: httpx.AsyncClient, url: str, *, limit: int, kind: str
) -> tuple[httpx.Response, bytes]:
    """GET ``url`` and read at most ``limit`` bytes of its body, so that a vendor cannot push more into the
    worker's memory (and Redis) than hookbridge keeps. A longer body (by its ``Content-Length`` or as read)
    raises :class:`VendorResultTooLarge`; an error answer's body is read up to 64 KiB."""
    with transport_errors(), _decoding_errors():
        async with client.stream("GET", url, extensions={"kind": kind}) as response:
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
