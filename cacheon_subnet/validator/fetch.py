"""Fetch a committed bundle archive into the validator's cache, trusting nothing on the way.

* The download itself (URL and address policy, redirects, size cap, deadline) is
  cacheon_subnet.netfetch, the same code the miner's URL check runs.
* Unpacking is load_bundle, which bounds memory before reading any tar header
  (bundle/tarscan.py): fetch + unpack of a hostile archive peaks at a tested number.
* Atomicity: bytes go to a temp file under bundles/.tmp, are fsynced, loaded and digest-checked,
  then `os.replace`d to bundles/<digest>.tar.gz. A kill at any point leaves either no cache
  entry or a complete, verified one.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import aiohttp

from cacheon_subnet.bundle import Bundle, load_bundle
from cacheon_subnet.errors import BundleError
from cacheon_subnet.netfetch import FetchError, FetchPolicy, download, guarded_session

__all__ = [
    "FetchError",
    "FetchPolicy",
    "cache_path",
    "clear_partials",
    "download",
    "fetch_bundle",
    "guarded_session",
    "load_cached",
]


ARCHIVE_SUFFIX = ".tar.gz"


def cache_path(cache_dir: Path, digest: str) -> Path:
    return cache_dir / f"{digest}{ARCHIVE_SUFFIX}"


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


async def fetch_bundle(
    url: str, digest: str, cache_dir: Path, policy: FetchPolicy = FetchPolicy(), session: aiohttp.ClientSession | None = None
) -> Path:
    """Ensure bundles/<digest>.tar.gz exists and holds the committed content; returns its path."""
    cache_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 -- one mkdir before any I/O starts
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
            raise FetchError(
                "digest_mismatch", f"{url} holds content {bundle.digest}, the commitment says {digest}", transient=False
            )
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
