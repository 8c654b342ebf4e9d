"""Callback URL safety (CONTRACT §6): http(s) only, and never an address in a blocked network.

A URL is parsed once, by :func:`parse`, with yarl: the parser that aiohttp sends with. Registration and
every attempt call the same function and the attempt sends the very ``URL`` object it returns, so a URL
that registration accepts is the URL that is sent. On top of yarl (which is lenient, as browsers are)
``parse`` refuses what different readers read differently: control characters and whitespace anywhere
(browsers drop a tab that httpx refuses), a numeric host that is not a plain dotted quad (``0177.0.0.1``,
``0x7f.1``, ``2130706433``: octal, hex and decimal forms that ``inet_aton`` reads as 127.0.0.1), userinfo,
port 0, zone ids, and host names that are not letters, digits, ``-`` and ``_`` (after IDNA).

Addresses are checked at registration, and again at every attempt against the addresses actually
connected to: the callback client's resolver drops blocked addresses, so a name that re-resolves to a
blocked address (DNS rebinding) finds nothing to connect to. An IPv6 address that embeds an IPv4 one
(``::ffff:a.b.c.d``, ``::a.b.c.d``, ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``,
6to4 ``2002::/16``, Teredo) is judged by the IPv4 rules as well. The cloud metadata addresses are never
allowed, whatever the settings say.

Messages never say what a name resolves to: a tenant must not learn the internal network from errors.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import unicodedata
from collections.abc import Sequence

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from service.config.settings import METADATA_NETWORKS, Network
from service.observability import logs

log = logs.get("hookbridge.delivery")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # RFC 2765 "IPv4-translated": ::ffff:0:a.b.c.d
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # the deprecated "IPv4-compatible" ::a.b.c.d
_ALWAYS_BLOCKED = tuple(ipaddress.ip_network(n) for n in METADATA_NETWORKS)


class UnsafeURL(ValueError):
    """The URL may not be called back; the message says why (and holds no secret, no address that a
    name resolved to)."""


def normalise(address: str) -> Address:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def embedded_ipv4(ip: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, translated, NAT64, 6to4, Teredo)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return []
    out: list[ipaddress.IPv4Address] = []
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        out.append(ip.ipv4_mapped)
    # ::/128 and ::1/128 are the unspecified and loopback addresses, not IPv4-compatible ones.
    if (ip in _COMPATIBLE and int(ip) > 1) or ip in _TRANSLATED or any(ip in n for n in _NAT64):
        out.append(low32)
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    return out


def parse(text: str) -> URL:
    """The one parse of a callback URL; raises :class:`UnsafeURL` on anything odd."""
    if not isinstance(text, str) or not text:
        raise UnsafeURL("not a URL")
    for ch in text:
        if ch.isspace() or unicodedata.category(ch)[0] in ("C", "Z"):
            raise UnsafeURL("the URL contains whitespace or a control character")
    try:
        url = URL(text)
        host = url.raw_host
        port = url.explicit_port
    except (ValueError, UnicodeError, TypeError):
        raise UnsafeURL("not a valid URL") from None
    if url.scheme not in ("http", "https"):
        raise UnsafeURL("only http and https URLs can receive callbacks")
    if not host:
        raise UnsafeURL("the URL has no host")
    if url.raw_user is not None or url.raw_password is not None or "@" in (url.raw_authority or ""):
        raise UnsafeURL("credentials in the URL are not allowed; use the signature to authenticate")
    if port is not None and not 1 <= port <= 65535:
        raise UnsafeURL("the port must be from 1 to 65535")
    if ":" in host:
        if "%" in host:
            raise UnsafeURL("an IPv6 zone id is not allowed")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UnsafeURL("not a valid IPv6 address") from None
        return url
    labels = host.lower().split(".")
    if _NUMERIC.match(labels[-1]):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise UnsafeURL("a numeric host must be a dotted-quad IPv4 address (like 192.0.2.10)") from None
        return url
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise UnsafeURL("the host is not a valid name")
    return url


def literal(url: URL) -> Address | None:
    """The URL's host as an address, when it is one."""
    try:
        return ipaddress.ip_address(url.raw_host or "")
    except ValueError:
        return None


class Policy:
    def __init__(self, allowed: Sequence[Network], blocked: Sequence[Network]) -> None:
        self.allowed = tuple(allowed)
        self.blocked = tuple(blocked)

    def address_allowed(self, address: str | Address) -> bool:
        ip = normalise(address) if isinstance(address, str) else address
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        for candidate in [ip, *embedded_ipv4(ip)]:
            if any(candidate.version == n.version and candidate in n for n in _ALWAYS_BLOCKED):
                return False
            if any(candidate.version == n.version and candidate in n for n in self.allowed):
                continue
            if any(candidate.version == n.version and candidate in n for n in self.blocked):
                return False
        return True

    def check_syntax(self, url: str) -> URL:
        """The parse, and the host when it is an address (a name is checked when it is resolved)."""
        parsed = parse(url)
        ip = literal(parsed)
        if ip is not None and not self.address_allowed(ip):
            raise UnsafeURL(f"{parsed.raw_host} is in a blocked network")
        return parsed

    async def check(self, url: str) -> URL:
        """The registration check: every address the name resolves to must be allowed."""
        parsed = self.check_syntax(url)
        if literal(parsed) is not None:
            return parsed
        host = parsed.raw_host or ""
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, parsed.port or 80, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise UnsafeURL(f"the host {host} does not resolve") from None
        blocked = sorted({str(info[4][0]) for info in infos if not self.address_allowed(str(info[4][0]))})
        if blocked:
            # The operator may see the addresses; the tenant who registered the name may not.
            log.info(
                "callback URL refused: a name resolves to a blocked address", host=host, addresses=blocked
            )
            raise UnsafeURL(f"the host {host} resolves to an address in a blocked network")
        return parsed


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
            log.warning(
                "callback refused: the name resolves only to blocked addresses",
                host=host,
                addresses=sorted({r["host"] for r in results}),
            )
            raise OSError(f"callback_url_not_allowed: {host} resolves only to addresses in a blocked network")
        return allowed

    async def close(self) -> None:
        await self._inner.close()
