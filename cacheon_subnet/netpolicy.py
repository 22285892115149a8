"""Which fetch URLs a commitment may name, and which addresses a fetch may connect to.

A miner is a paid adversary who chooses the URL every validator fetches, so a URL is a
request to make *from the operator's network*. Three layers, one policy:

1. `check_url` (syntax, at parse/commit time): https required; a literal IP host must be a
   public (global unicast) address; host names must end in an alphabetic TLD (so `2130706433`,
   `0x7f.1` or `127.1`, which resolvers turn into 127.0.0.1, are refused as names).
2. `GuardedResolver` (after DNS, at connect time): every address a name resolves to must be
   public, else the connection is never opened. aiohttp connects to exactly the addresses the
   resolver returns, so a name that re-binds between our check and the connect cannot slip in.
3. `GuardedConnector` (after connect): the socket's actual peer address is checked again
   before the request is written (covers literal IPs, which aiohttp does not resolve).

On a local chain (the demo, tests: `LOCAL`) loopback addresses are allowed and plain http too,
only to loopback; private, link-local, multicast and reserved addresses never are.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import TCPConnector
from aiohttp.abc import AbstractResolver, ResolveResult

from cacheon_subnet.dnspool import PooledResolver

MAX_URL_LENGTH = 512
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})  # what plain http may name (local chain)
MAX_REDIRECTS = 3  # the one redirect budget: the validator's fetch and the miner's probe
REDIRECT_STATUSES = (301, 302, 303, 307, 308)

_URL_CHARS = re.compile(r"[!-~]+")  # printable ASCII, no spaces or controls
_TLD = re.compile(r"(?:[a-z][a-z0-9-]*|xn--[a-z0-9-]+)")


@dataclass(frozen=True)
class UrlPolicy:
    """allow_loopback: a local chain (LocalChain, or the SDK's `local` network)."""

    allow_loopback: bool = False

    @property
    def label(self) -> str:
        return "local chain (loopback allowed)" if self.allow_loopback else "public addresses only"


STRICT = UrlPolicy(False)
LOCAL = UrlPolicy(True)


class UrlRefused(OSError):
    """A URL or address the policy refuses. `reason` is a commitment REASONS id."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"[{reason}] {detail}")


def policy_for_backend(backend: Any) -> UrlPolicy:
    """The backend's own `url_policy()` (LocalChain: LOCAL; BittensorChain: LOCAL only on the
    `local` network); STRICT for anything that does not say, or fails to (fail closed)."""
    fn = getattr(backend, "url_policy", None)
    try:
        got = fn() if callable(fn) else None
    except Exception:  # noqa: BLE001 - a backend that cannot say gets the strict policy
        return STRICT
    return got if isinstance(got, UrlPolicy) else STRICT


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
    return ip


def address_allowed(addr: str, policy: UrlPolicy) -> bool:
    """Public unicast, or loopback when the policy allows it. Unparsable: refused."""
    ip = _ip(addr)
    if ip is None:
        return False
    if ip.is_loopback:
        return policy.allow_loopback
    site_local = isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local  # fec0::/10, not in is_private
    return bool(
        ip.is_global
        and not (ip.is_multicast or ip.is_private or ip.is_reserved or ip.is_link_local or ip.is_unspecified or site_local)
    )


def check_address(addr: str, policy: UrlPolicy, what: str = "address") -> None:
    if not address_allowed(addr, policy):
        raise UrlRefused(
            "url_address",
            f"{what} {addr} is not a public address (loopback, private, "
            f"link-local, multicast or reserved); policy: {policy.label}",
        )


def check_url(url: Any, policy: UrlPolicy = STRICT) -> str:
    """The URL rules (syntax and literal addresses); returns `url` or raises UrlRefused."""
    if not isinstance(url, str):
        raise UrlRefused("url_type", f"u must be a string, got {type(url).__name__}")
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefused("url_too_long", f"u is {len(url)} chars; at most {MAX_URL_LENGTH}")
    if not _URL_CHARS.fullmatch(url):
        raise UrlRefused("url_chars", "u must be printable ASCII without spaces (punycode international hosts)")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise UrlRefused("url_port", f"u has a bad host or port: {exc}") from None
    if parts.scheme not in ("https", "http"):
        raise UrlRefused("url_scheme", f"u scheme {parts.scheme!r}; must be https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UrlRefused("url_credentials", "u must not carry user:password@")
    if not host:
        raise UrlRefused("url_host", "u has no host")
    if port == 0:
        raise UrlRefused("url_port", "u port 0 is not a real port")
    if parts.scheme == "http" and not (policy.allow_loopback and host in LOOPBACK_HOSTS):
        where = f"{sorted(LOOPBACK_HOSTS)} on a local chain" if policy.allow_loopback else "a local chain's loopback"
        raise UrlRefused("url_http_not_loopback", f"u uses http to {host!r}; http is allowed only for {where}, use https")
    ip = _ip(host)
    if ip is not None:
        check_address(host, policy, "host")
    elif host == "localhost" or host.endswith(".localhost"):
        if not policy.allow_loopback:
            raise UrlRefused("url_address", f"host {host!r} is loopback; policy: {policy.label}")
    elif "." not in host.rstrip(".") or not _TLD.fullmatch(host.rstrip(".").rsplit(".", 1)[-1]):
        raise UrlRefused(
            "url_host",
            f"host {host!r} is not a public DNS name (needs a dotted name "
            "ending in an alphabetic TLD; numeric forms are refused)",
        )
    return url


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that refuses a name if any address it resolves to is not allowed."""

    def __init__(self, policy: UrlPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner or PooledResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        for r in results:
            check_address(r["host"], self.policy, f"{host} resolves to")
        return results

    async def close(self) -> None:
        await self.inner.close()


def check_peer(transport: Any, policy: UrlPolicy) -> None:
    """The connected socket's peer must be allowed too (literal IPs skip the resolver)."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    if not peer:
        raise UrlRefused("url_address", "cannot tell which address the connection reached")
    check_address(str(peer[0]), policy, "connected peer")


class GuardedConnector(TCPConnector):
    """TCPConnector that resolves through GuardedResolver, creates a socket only for an allowed
    address (its socket factory sees the exact address about to be connected, before TCP or
    TLS starts), and checks each new connection's peer before a request is written on it."""

    def __init__(self, policy: UrlPolicy, inner: AbstractResolver | None = None, **kw: Any) -> None:
        super().__init__(resolver=GuardedResolver(policy, inner), socket_factory=self._socket, **kw)
        self.policy = policy

    def _socket(self, addr_info: Any) -> socket.socket:
        family, type_, proto, _, address = addr_info
        check_address(str(address[0]), self.policy, "connecting to")
        return socket.socket(family=family, type=type_, proto=proto)

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:  # noqa: ASYNC109 -- aiohttp's own signature
        proto = await super()._create_connection(req, traces, timeout)
        try:
            check_peer(proto.transport, self.policy)
        except UrlRefused:
            proto.close()
            raise
        return proto
