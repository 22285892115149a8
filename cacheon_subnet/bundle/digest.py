"""Canonical content identity of a bundle.

digest = SHA-256 over the files sorted by UTF-8 path bytes, each fed as
    u64be(len(path)) || path || u64be(len(data)) || data
Archive metadata (order, mtimes, owners, compression) never changes the digest.
hotkey-bound digest = SHA-256(utf8(digest_hex + hotkey_ss58)): a copy committed by another
hotkey gets a different bound digest, so it cannot claim the original's commit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def content_digest(files: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> str:
    items = files.items() if isinstance(files, Mapping) else files
    h = hashlib.sha256()
    for path, data in sorted(items, key=lambda kv: kv[0].encode("utf-8")):
        p = path.encode("utf-8")
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def hotkey_bound_digest(digest: str, hotkey: str) -> str:
    if not is_digest(digest):
        raise ValueError(f"not a lowercase hex SHA-256 digest: {digest!r}")
    if not hotkey:
        raise ValueError("hotkey must be non-empty")
    return hashlib.sha256((digest + hotkey).encode("utf-8")).hexdigest()


def is_digest(value: str) -> bool:
    return bool(_HEX64.fullmatch(value or ""))  # fullmatch: `$` also matches before a trailing newline
