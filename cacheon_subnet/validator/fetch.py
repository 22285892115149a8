"""Fetch a committed bundle archive into the validator's cache, trusting nothing on the way.

* URL policy: https anywhere, plain http only to loopback (the same `check_url` the commitment
  parser enforces), re-checked on every redirect hop (at most `max_redirects`), so a redirect
  cannot smuggle us to an internal http address.
* Size: the body is streamed with a hard cap; we abort at the first chunk over it (and before
  reading anything when Content-Length already says too much), so a huge or endless body
  costs at most cap + one chunk.
* Time: a connect timeout and one total deadline over all hops and the body.
* Atomicity: bytes go to a temp file under bundles/.tmp, are fsynced, loaded and digest-checked,
  then `os.replace`d to bundles/<digest>.tar.gz. A kill at any point leaves either no cache
  entry or a complete, verified one.

Errors carry a stable `reason` and `transient` (retry with backoff) vs permanent (fail now).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import aiohttp

from cacheon_subnet.bundle import DEFAULT_LIMITS, Bundle, load_bundle
from cacheon_subnet.chain.commitment import CommitmentError, check_url
from cacheon_subnet.errors import BundleError, CacheonError

_REDIRECTS = (301, 302, 303, 307, 308)
_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class FetchPolicy:
    max_bytes: int = DEFAULT_LIMITS.archive_bytes  # 64 MiB
    total_timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    max_redirects: int = 3
    chunk_bytes: int = 64 * 1024


class FetchError(CacheonError):
    """Fetching failed. reason: url | redirects | http_status | too_large | timeout | connect |
    io | bundle_invalid | digest_mismatch. transient: worth retrying later."""

    def __init__(self, reason: str, detail: str, transient: bool) -> None:
        self.reason = reason
        self.detail = detail
        self.transient = transient
        super().__init__(f"fetch [{reason}] {detail}")


def cache_path(cache_dir: Path, digest: str) -> Path:
    return cache_dir / f"{digest}.tar.gz"


def _check(url: str) -> str:
    try:
        return check_url(url)
    except CommitmentError as exc:
        raise FetchError("url", f"{url!r}: {exc.detail}", transient=False) from None


async def download(url: str, dest: Path, policy: FetchPolicy = FetchPolicy(),
                   session: aiohttp.ClientSession | None = None) -> int:
    """Stream `url` into `dest` under the policy; returns the byte count."""
    own = session is None
    if session is None:
        timeout = aiohttp.ClientTimeout(total=None, connect=policy.connect_timeout_s,
                                        sock_connect=policy.connect_timeout_s)
        session = aiohttp.ClientSession(timeout=timeout)
    try:
        async with asyncio.timeout(policy.total_timeout_s):
            return await _follow(session, url, dest, policy)
    except TimeoutError:
        raise FetchError("timeout", f"{url}: no complete response within {policy.total_timeout_s:g} s",
                         transient=True) from None
    finally:
        if own:
            await session.close()


async def _follow(session: aiohttp.ClientSession, url: str, dest: Path, policy: FetchPolicy) -> int:
    hops = 0
    while True:
        _check(url)
        try:
            async with session.get(url, allow_redirects=False, auto_decompress=False) as resp:
                if resp.status in _REDIRECTS:
                    hops += 1
                    if hops > policy.max_redirects:
                        raise FetchError("redirects", f"more than {policy.max_redirects} redirects "
                                         f"(last {url})", transient=False)
                    location = resp.headers.get("Location")
                    if not location:
                        raise FetchError("http_status", f"{url}: {resp.status} without Location",
                                         transient=False)
                    url = urljoin(url, location)
                    continue
                if resp.status != 200:
                    raise FetchError("http_status", f"{url}: HTTP {resp.status}",
                                     transient=resp.status in _TRANSIENT_STATUS)
                if resp.content_length is not None and resp.content_length > policy.max_bytes:
                    raise FetchError("too_large", f"{url}: Content-Length {resp.content_length} > "
                                     f"{policy.max_bytes} bytes", transient=False)
                return await _stream(resp, url, dest, policy)
        except (aiohttp.ServerTimeoutError, asyncio.TimeoutError) as exc:
            raise FetchError("timeout", f"{url}: {type(exc).__name__}: {exc}", transient=True) from None
        except aiohttp.ClientConnectorError as exc:
            raise FetchError("connect", f"{url}: {exc}", transient=True) from None
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise FetchError("connect", f"{url}: {type(exc).__name__}: {exc}", transient=True) from None


async def _stream(resp: aiohttp.ClientResponse, url: str, dest: Path, policy: FetchPolicy) -> int:
    total = 0
    with open(dest, "wb") as f:
        async for chunk in resp.content.iter_chunked(policy.chunk_bytes):
            total += len(chunk)
            if total > policy.max_bytes:
                raise FetchError("too_large", f"{url}: body exceeded {policy.max_bytes} bytes; "
                                 "aborted", transient=False)
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return total


def load_cached(cache_dir: Path, digest: str) -> Bundle | None:
    """The cached bundle for `digest`, or None (missing or, defensively, not matching)."""
    path = cache_path(cache_dir, digest)
    if not path.is_file():
        return None
    try:
        bundle = load_bundle(path)
    except BundleError:
        path.unlink(missing_ok=True)
        return None
    if bundle.digest != digest:
        path.unlink(missing_ok=True)
        return None
    return bundle


async def fetch_bundle(url: str, digest: str, cache_dir: Path, policy: FetchPolicy = FetchPolicy(),
                       session: aiohttp.ClientSession | None = None) -> Path:
    """Ensure bundles/<digest>.tar.gz exists and holds the committed content; returns its path."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_path(cache_dir, digest)
    if load_cached(cache_dir, digest) is not None:
        return final
    tmp_dir = cache_dir / ".tmp"
    tmp_dir.mkdir(exist_ok=True)
    tmp = tmp_dir / f"{digest}.{secrets.token_hex(6)}.tar.gz"
    try:
        try:
            await download(url, tmp, policy, session)
        except OSError as exc:
            raise FetchError("io", f"writing {tmp}: {exc}", transient=True) from None
        try:
            bundle = load_bundle(tmp)
        except BundleError as exc:
            raise FetchError("bundle_invalid", str(exc), transient=False) from None
        if bundle.digest != digest:
            raise FetchError("digest_mismatch", f"{url} holds content {bundle.digest}, the commitment "
                             f"says {digest}", transient=False)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def clear_partials(cache_dir: Path) -> int:
    """Remove temp files a killed process left behind (call once at startup)."""
    n = 0
    for p in (cache_dir / ".tmp").glob("*") if (cache_dir / ".tmp").is_dir() else ():
        p.unlink(missing_ok=True)
        n += 1
    return n
