"""Fetch a document someone else named by URL: once, under the callback address rules, bounded.

Two callers: the worker fetches a run's document URL for a vendor that must get the bytes (Nutrient,
:class:`~service.vendors.base.UploadsUrlInput`), and the Nutrient adapter fetches a presigned
``downloadUrl`` on a host that is not Nutrient's. Both URLs come from outside (a tenant, a vendor), so
they get what a callback URL gets, from the same code (``service.delivery.urlsafety``): the one parse and
the blocked networks checked before connecting (``Policy.check``), and the :class:`SafeResolver` at connect
time, so a name that re-resolves to a blocked address (DNS rebinding) finds nothing to connect to.

- No credential of ours is sent: the session carries no header but ``Accept``/``User-Agent``.
- Redirects are followed by hand, at most :data:`MAX_REDIRECTS`, each hop checked again: aiohttp connects
  to an address literal without asking the resolver, so a redirect to ``169.254.169.254`` would pass it.
- At most ``max_bytes`` (``MAX_DOCUMENT_BYTES``) are read, streamed: a declared length past it is refused
  before the body, a body past it is cut off there.
- A refused address, a 4xx (but 408/429), a redirect without ``Location`` or past the limit, a body past
  the limit: :class:`DocumentUnavailable` (the run fails ``document_unavailable``, nothing retried). A
  connect failure, a timeout, 408/429/5xx: :class:`VendorTransient` (retried as any transient fault).

Messages never carry the URL (a presigned URL's query is a credential) nor what a name resolved to.
"""

from __future__ import annotations

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from service.delivery.urlsafety import Policy, SafeResolver, UnsafeURL
from service.vendors.base import DocumentTooLarge, DocumentUnavailable, VendorTransient

MAX_REDIRECTS = 3
_CHUNK = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class DocumentFetcher:
    """Implements ``service.vendors.base.Fetcher``; built by the worker, handed to the adapters."""

    def __init__(
        self,
        policy: Policy,
        *,
        max_bytes: int,
        timeout_s: float,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._policy = policy
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._resolver = resolver

    async def fetch(self, url: str) -> bytes:
        """The body at ``url``; raises :class:`DocumentUnavailable` or :class:`VendorTransient`."""
        current = url
        # A session per fetch: fetches are rare (one per URL run, one per presigned zip), and a session
        # made here is closed here, whatever the caller's lifetime.
        safe = SafeResolver(self._policy, self._resolver)
        connector = aiohttp.TCPConnector(resolver=safe, limit=4, use_dns_cache=False)
        async with aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            timeout=aiohttp.ClientTimeout(total=self._timeout_s),
            headers={"Accept": "*/*"},
        ) as session:
            for _ in range(MAX_REDIRECTS + 1):
                target = await self._checked(current)
                try:
                    async with session.get(target, allow_redirects=False) as response:
                        if response.status in _REDIRECTS:
                            location = response.headers.get("Location")
                            if not location:
                                raise DocumentUnavailable("the document URL redirected without a Location")
                            current = str(target.join(URL(location)))
                            continue
                        self._raise_for_status(response.status)
                        return await self._read(response)
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise VendorTransient(
                        f"the document URL could not be fetched: {type(exc).__name__}"
                    ) from None
        raise DocumentUnavailable(f"the document URL redirected more than {MAX_REDIRECTS} times")

    async def _checked(self, url: str) -> URL:
        try:
            return await self._policy.check(url)
        except UnsafeURL as exc:
            raise DocumentUnavailable(f"the document URL is not allowed: {exc}") from None

    @staticmethod
    def _raise_for_status(status: int) -> None:
        if status in (408, 429) or status >= 500:
            raise VendorTransient(f"the document URL answered HTTP {status}", status_code=status)
        if not 200 <= status < 300:
            raise DocumentUnavailable(f"the document URL answered HTTP {status}", status_code=status)

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        declared = response.content_length
        if declared is not None and declared > self._max_bytes:
            raise self._too_large()
        body = bytearray()
        async for chunk in response.content.iter_chunked(_CHUNK):
            body += chunk
            if len(body) > self._max_bytes:
                raise self._too_large()
        return bytes(body)

    def _too_large(self) -> DocumentTooLarge:
        return DocumentTooLarge(
            f"the document is larger than HOOKBRIDGE_MAX_DOCUMENT_BYTES ({self._max_bytes} bytes)"
        )
