"""Callback URL safety (CONTRACT §6): http(s) only, and never an address in a blocked network.

Checked at registration, and again at every attempt against the addresses actually connected to: the
callback client's resolver drops blocked addresses, so a name that re-resolves to a blocked address
(DNS rebinding) finds nothing to connect to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from service.settings import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeURL(ValueError):
    """The URL may not be called back; the message says why (and holds no secret)."""


def normalise(address: str) -> Address:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class Policy:
    def __init__(self, allowed: Sequence[Network], blocked: Sequence[Network]) -> None:
        self.allowed = tuple(allowed)
        self.blocked = tuple(blocked)

    def address_allowed(self, address: str) -> bool:
        ip = normalise(address)
        if any(ip.version == n.version and ip in n for n in self.allowed):
            return True
        return not any(ip.version == n.version and ip in n for n in self.blocked)

    def check_syntax(self, url: str) -> tuple[str, int]:
        """Scheme and host; an IP literal is checked here, a name when it is resolved."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise UnsafeURL(f"not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise UnsafeURL("only http and https URLs can receive callbacks")
        host = parts.hostname
        if not host:
            raise UnsafeURL("the URL has no host")
        if parts.username or parts.password:
            raise UnsafeURL("credentials in the URL are not allowed; use the signature to authenticate")
        try:
            literal = normalise(host)
        except ValueError:
            literal = None
        if literal is not None and not self.address_allowed(str(literal)):
            raise UnsafeURL(f"{literal} is in a blocked network")
        return host, port or (443 if parts.scheme == "https" else 80)

    async def check(self, url: str) -> None:
        """The registration check: every address the name resolves to must be allowed."""
        host, port = self.check_syntax(url)
        try:
            normalise(host)
            return
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise UnsafeURL(f"the host {host} does not resolve ({exc.strerror or exc})") from None
        for info in infos:
            address = str(info[4][0])
            if not self.address_allowed(address):
                raise UnsafeURL(f"{host} resolves to {normalise(address)}, which is in a blocked network")


class SafeResolver(AbstractResolver):
    """An aiohttp resolver that returns only allowed addresses; with none left, connecting fails."""

    def __init__(self, policy: Policy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed = [r for r in results if self._policy.address_allowed(r["host"])]
        if not allowed:
            blocked = ", ".join(sorted({str(normalise(r["host"])) for r in results}))
            raise OSError(f"callback_url_not_allowed: {host} resolves to {blocked}, which is blocked")
        return allowed

    async def close(self) -> None:
        await self._inner.close()
