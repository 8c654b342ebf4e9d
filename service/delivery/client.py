"""The callback HTTP client: httpx on aiohttp's transport, redirects off, the safe resolver."""

from __future__ import annotations

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver
from httpx_aiohttp import AiohttpTransport

from service.delivery.urlsafety import Policy, SafeResolver


def make_client(
    policy: Policy, timeout_s: float, *, resolver: AbstractResolver | None = None
) -> httpx.AsyncClient:
    """``resolver`` replaces the system's DNS (tests use it to make a name resolve to a chosen address)."""

    def session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            resolver=SafeResolver(policy, resolver), limit=500, limit_per_host=50, ttl_dns_cache=10
        )
        return aiohttp.ClientSession(connector=connector, trust_env=False)

    return httpx.AsyncClient(
        transport=AiohttpTransport(client=session),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,  # a 3xx is a failed attempt: a redirect could lead anywhere
    )
