"""Downloading a committed archive under the URL policy: the one implementation the validator's
fetch and the miner's URL check (`miner submit --check-url`, `probe`) both run, so a miner sees
exactly what validators will get.

* URL policy (netpolicy): every hop's URL is checked, the resolver refuses names that resolve
  to non-public addresses, and each new connection's peer is checked before the request.
* Redirects: followed up to `max_redirects` (netpolicy.MAX_REDIRECTS), each hop re-checked.
* Encoding: the archive must come as sent (no Content-Encoding): clients differ on unzipping it.
* Size: streamed with a hard cap (Content-Length checked first); at most cap + one chunk read.
* Time: a connect timeout and one total deadline over all hops and the body.

Errors carry a stable `reason` and `transient` (retry with backoff) vs permanent (fail now).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin

import aiohttp

from cacheon_subnet.bundle.limits import DEFAULT_LIMITS
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.netpolicy import (
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    STRICT,
    GuardedConnector,
    UrlPolicy,
    UrlRefused,
    check_url,
)
from cacheon_subnet.resources import is_resource_error

_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class FetchPolicy:
    max_bytes: int = DEFAULT_LIMITS.archive_bytes  # 64 MiB
    total_timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    max_redirects: int = MAX_REDIRECTS
    chunk_bytes: int = 64 * 1024
    urls: UrlPolicy = field(default=STRICT)  # LOCAL only on a local chain


class FetchError(CacheonError):
    """Fetching failed. reason: url | url_address | redirects | http_status | content_encoding |
    too_large | timeout | connect | io | bundle_invalid | digest_mismatch. transient: worth
    retrying later."""

    def __init__(self, reason: str, detail: str, transient: bool, status: int | None = None) -> None:
        self.reason = reason
        self.detail = detail
        self.transient = transient
        self.status = status  # the HTTP status, when there was one
        super().__init__(f"fetch [{reason}] {detail}")


def _check(url: str, policy: FetchPolicy) -> str:
    try:
        return check_url(url, policy.urls)
    except UrlRefused as exc:
        reason = "url_address" if exc.reason == "url_address" else "url"
        raise FetchError(reason, f"{url!r}: {exc.detail}", transient=False) from None


def guarded_session(policy: FetchPolicy) -> aiohttp.ClientSession:
    """A session whose connector resolves through the policy (call inside a running loop).
    trust_env stays False: no proxy from the environment can route around the address checks."""
    timeout = aiohttp.ClientTimeout(total=None, connect=policy.connect_timeout_s, sock_connect=policy.connect_timeout_s)
    connector = GuardedConnector(policy.urls)
    return aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=False)


async def download(
    url: str, dest: Path, policy: FetchPolicy = FetchPolicy(), session: aiohttp.ClientSession | None = None
) -> int:
    """Stream `url` into `dest` under the policy; returns the byte count. A caller-made session
    must come from `guarded_session` (its connector does the address checks)."""
    own = session is None
    if session is None:
        session = guarded_session(policy)
    try:
        async with asyncio.timeout(policy.total_timeout_s):
            return await _follow(session, url, dest, policy)
    except TimeoutError:
        raise FetchError(
            "timeout", f"{url}: no complete response within {policy.total_timeout_s:g} s", transient=True
        ) from None
    finally:
        if own:
            await session.close()


def _refused(exc: BaseException | None) -> UrlRefused | None:
    """The policy refusal behind a connector error (aiohttp / happy-eyeballs wrap it, and merge
    several addresses' errors into one message)."""
    for _ in range(8):
        if exc is None:
            return None
        if isinstance(exc, UrlRefused):
            return exc
        if "[url_address]" in str(exc):
            return UrlRefused("url_address", str(exc).split("[url_address]", 1)[1].strip())
        exc = getattr(exc, "os_error", None) or exc.__cause__
    return None


async def _follow(session: aiohttp.ClientSession, url: str, dest: Path, policy: FetchPolicy) -> int:
    hops = 0
    while True:
        _check(url, policy)
        try:
            async with session.get(url, allow_redirects=False, auto_decompress=False) as resp:
                if resp.status in REDIRECT_STATUSES:
                    hops += 1
                    if hops > policy.max_redirects:
                        raise FetchError(
                            "redirects", f"more than {policy.max_redirects} redirects (last {url})", transient=False
                        )
                    location = resp.headers.get("Location")
                    if not location:
                        raise FetchError("http_status", f"{url}: {resp.status} without Location", transient=False)
                    url = urljoin(url, location)
                    continue
                if resp.status != 200:
                    raise FetchError(
                        "http_status",
                        f"{url}: HTTP {resp.status}",
                        transient=resp.status in _TRANSIENT_STATUS,
                        status=resp.status,
                    )
                enc = resp.headers.get(aiohttp.hdrs.CONTENT_ENCODING, "identity").lower()
                if enc != "identity":
                    raise FetchError(
                        "content_encoding",
                        f"{url}: server sends Content-Encoding: {enc}; "
                        "serve the archive as application/gzip without Content-Encoding",
                        transient=False,
                    )
                if resp.content_length is not None and resp.content_length > policy.max_bytes:
                    raise FetchError(
                        "too_large",
                        f"{url}: Content-Length {resp.content_length} > {policy.max_bytes} bytes",
                        transient=False,
                    )
                return await _stream(resp, url, dest, policy)
        except UrlRefused as exc:
            raise FetchError("url_address", f"{url}: {exc.detail}", transient=False) from None
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise FetchError("timeout", f"{url}: {type(exc).__name__}: {exc}", transient=True) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            if is_resource_error(exc):
                raise  # EMFILE/ENOBUFS on our side: the validator's trouble, not the miner's server
            refused = _refused(exc)
            if refused is not None:  # the resolver refused the address the name resolves to
                raise FetchError("url_address", f"{url}: {refused.detail}", transient=False) from None
            raise FetchError("connect", f"{url}: {type(exc).__name__}: {exc}", transient=True) from None


async def _stream(resp: aiohttp.ClientResponse, url: str, dest: Path, policy: FetchPolicy) -> int:
    total = 0
    with open(dest, "wb") as f:  # noqa: ASYNC230 -- chunk-sized writes to a local file, bounded by max_bytes
        async for chunk in resp.content.iter_chunked(policy.chunk_bytes):
            total += len(chunk)
            if total > policy.max_bytes:
                raise FetchError("too_large", f"{url}: body exceeded {policy.max_bytes} bytes; aborted", transient=False)
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return total
