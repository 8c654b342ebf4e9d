"""The callback HTTP client: aiohttp, redirects off, the safe resolver, and a bounded read of the answer.

A receiver is a tenant's code, so its answer is read as a hostile peer's: at most
:data:`RESPONSE_BODY_LIMIT` bytes of the body (what the delivery log keeps), never decoded
(``Accept-Encoding: identity`` is asked for and ``Content-Encoding`` is ignored, so a gzip bomb stays
the few bytes it is), and the connection is dropped when more was sent. Headers are bounded by aiohttp's
parser (128 fields of at most 8 KiB). The caller bounds the whole exchange in time.

The URL sent is the :class:`yarl.URL` that :func:`service.delivery.urlsafety.parse` returned: aiohttp
sends that object as it is, so the URL checked is the URL sent.

Connections to one receiver host are shared between clients and subscriptions by
:mod:`service.delivery.shares`, not by aiohttp's first-come per-host limit (which is off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from service.delivery.shares import Caller, HostShares, Shares
from service.delivery.urlsafety import Policy, SafeResolver

RESPONSE_BODY_LIMIT = 4096
_READ_BUFSIZE = 16 * 1024  # aiohttp's buffer per connection (256 KiB by default)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # only Retry-After and Location, as sent
    body: bytes  # at most RESPONSE_BODY_LIMIT bytes, as sent (not decoded)
    truncated: bool  # the receiver sent more, and its connection was dropped


class CallbackClient:
    def __init__(
        self,
        policy: Policy,
        timeout_s: float,
        *,
        resolver: AbstractResolver | None = None,
        shares: Shares | None = None,
    ) -> None:
        self._policy = policy
        self._timeout_s = timeout_s
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self.shares = HostShares(shares or Shares())

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use: aiohttp wants a running loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                resolver=SafeResolver(self._policy, self._resolver),
                # Unlimited here: the shares bound each host, and the delivery pump's concurrency all.
                limit=0,
                limit_per_host=0,
                ttl_dns_cache=10,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,
                auto_decompress=False,
                read_bufsize=_READ_BUFSIZE,
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                skip_auto_headers=("Accept-Encoding",),
            )
        return self._session

    async def post(
        self, url: URL, body: bytes, headers: Mapping[str, str], *, client: str, subscription: str
    ) -> Answer:
        """One POST for ``client``'s ``subscription``, redirects not followed, within their shares of the
        host's connections; raises what the transport raises."""
        send = {**headers, "Accept-Encoding": "identity"}
        caller = Caller(f"{url.scheme}://{url.raw_host}:{url.port}", client, subscription)
        async with (
            self.shares.hold(caller),
            self._open().post(url, data=body, headers=send, allow_redirects=False) as response,
        ):
            got = bytearray()
            while len(got) < RESPONSE_BODY_LIMIT:
                chunk = await response.content.read(RESPONSE_BODY_LIMIT - len(got))
                if not chunk:
                    break
                got += chunk
            truncated = not response.content.at_eof()
            if truncated:
                response.close()  # never read the rest: drop the connection instead of reusing it
            kept = {k: response.headers[k] for k in ("Retry-After", "Location") if k in response.headers}
            return Answer(response.status, kept, bytes(got), truncated)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def make_client(
    policy: Policy,
    timeout_s: float,
    *,
    resolver: AbstractResolver | None = None,
    shares: Shares | None = None,
) -> CallbackClient:
    """``resolver`` replaces the system's DNS (tests use it to make a name resolve to a chosen address)."""
    return CallbackClient(policy, timeout_s, resolver=resolver, shares=shares)
