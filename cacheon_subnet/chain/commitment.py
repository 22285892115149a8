"""The on-chain commitment payload: what a miner publishes, what a validator accepts.

    {"v":1,"d":"<64-hex content digest>","b":"<64-hex hotkey-bound digest>","u":"<fetch URL>"}

Compact JSON with keys in this order and no spaces, so one payload has exactly one byte form.
`b` = hotkey_bound_digest(d, hotkey): a commitment copied to another hotkey fails `parse`
for that hotkey, so a copier cannot claim the original's content. Every rejection carries a
stable `reason`; nothing in a commitment is trusted before `parse` returns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cacheon_subnet.errors import CacheonError

VERSION = 1
MAX_PAYLOAD_BYTES = 1024
MAX_URL_LENGTH = 512
KEYS = ("v", "d", "b", "u")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

_HEX64 = re.compile(r"[0-9a-f]{64}")
_URL_CHARS = re.compile(r"[!-~]+")  # printable ASCII, no spaces or controls

REASONS = (
    "type", "too_large", "not_json", "not_object", "duplicate_key", "missing_key", "unknown_key",
    "version", "digest", "bound_digest", "bound_mismatch", "url_type", "url_too_long",
    "url_chars", "url_scheme", "url_http_not_loopback", "url_credentials", "url_host",
    "url_port", "not_canonical",
)


class CommitmentError(CacheonError):
    """A commitment payload was rejected. `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REASONS, reason
        self.reason = reason
        self.detail = detail
        super().__init__(f"commitment [{reason}] {detail}")


@dataclass(frozen=True)
class Payload:
    digest: str  # content digest of the bundle (bundle.digest.content_digest)
    bound: str  # hotkey_bound_digest(digest, committing hotkey)
    url: str  # where the bundle archive is fetched from
    version: int = VERSION


def _bound(digest: str, hotkey: str) -> str:
    # Imported here: cacheon_subnet.bundle pulls torch in through its package __init__.
    from cacheon_subnet.bundle.digest import hotkey_bound_digest

    return hotkey_bound_digest(digest, hotkey)


def check_url(url: Any) -> str:
    """https anywhere; http only to a loopback host (the local demo). No credentials."""
    if not isinstance(url, str):
        raise CommitmentError("url_type", f"u must be a string, got {type(url).__name__}")
    if len(url) > MAX_URL_LENGTH:
        raise CommitmentError("url_too_long", f"u is {len(url)} chars; at most {MAX_URL_LENGTH}")
    if not _URL_CHARS.fullmatch(url):
        raise CommitmentError("url_chars", "u must be printable ASCII without spaces "
                              "(punycode international hosts)")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise CommitmentError("url_port", f"u has a bad host or port: {exc}") from exc
    if parts.scheme not in ("https", "http"):
        raise CommitmentError("url_scheme", f"u scheme {parts.scheme!r}; must be https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise CommitmentError("url_credentials", "u must not carry user:password@")
    if not host:
        raise CommitmentError("url_host", "u has no host")
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS:
        raise CommitmentError("url_http_not_loopback",
                              f"u uses http to {host!r}; http is allowed only for "
                              f"{sorted(LOOPBACK_HOSTS)}, use https")
    if port == 0:
        raise CommitmentError("url_port", "u port 0 is not a real port")
    return url


def _check_digest(value: Any, key: str, reason: str) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise CommitmentError(reason, f"{key} must be 64 lowercase hex chars, got {value!r:.80}")
    return value


def encode(digest: str, hotkey: str, url: str) -> str:
    """The canonical payload for `hotkey` committing bundle `digest` served at `url`."""
    _check_digest(digest, "d", "digest")
    check_url(url)
    obj = {"v": VERSION, "d": digest, "b": _bound(digest, hotkey), "u": url}
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=True)
    if len(data.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise CommitmentError("too_large", f"payload would be {len(data)} bytes; "
                              f"at most {MAX_PAYLOAD_BYTES}")
    return data


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise CommitmentError("duplicate_key", f"key {key!r} appears twice")
        seen[key] = value
    return seen


def parse(data: Any, hotkey: str) -> Payload:
    """Validate a revealed commitment of `hotkey`; raises CommitmentError naming the rule."""
    if not isinstance(data, str):
        raise CommitmentError("type", f"commitment must be str, got {type(data).__name__}")
    size = len(data.encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise CommitmentError("too_large", f"{size} bytes; at most {MAX_PAYLOAD_BYTES}")
    try:
        obj = json.loads(data, object_pairs_hook=_no_duplicates)
    except CommitmentError:
        raise
    except (ValueError, RecursionError) as exc:
        raise CommitmentError("not_json", f"not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise CommitmentError("not_object", f"JSON {type(obj).__name__}, expected an object")
    unknown = sorted(set(obj) - set(KEYS))
    if unknown:
        raise CommitmentError("unknown_key", f"unknown keys {unknown}; allowed {list(KEYS)}")
    missing = [k for k in KEYS if k not in obj]
    if missing:
        raise CommitmentError("missing_key", f"missing keys {missing}")
    v = obj["v"]
    if type(v) is not int or v != VERSION:
        raise CommitmentError("version", f"v={v!r}; this validator reads v={VERSION}")
    digest = _check_digest(obj["d"], "d", "digest")
    bound = _check_digest(obj["b"], "b", "bound_digest")
    url = check_url(obj["u"])
    if not hotkey:
        raise CommitmentError("bound_mismatch", "no hotkey to bind the digest to")
    expected = _bound(digest, hotkey)
    if bound != expected:
        raise CommitmentError("bound_mismatch",
                              f"b does not bind d to hotkey {hotkey!r} (copied commitment?)")
    canonical = json.dumps({"v": v, "d": digest, "b": bound, "u": url}, separators=(",", ":"),
                           ensure_ascii=True)
    if data != canonical:
        raise CommitmentError("not_canonical", "payload is valid but not in canonical form "
                              "(key order v,d,b,u; no spaces); build it with encode()")
    return Payload(digest=digest, bound=bound, url=url, version=v)
