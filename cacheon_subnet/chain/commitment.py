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

from cacheon_subnet import netpolicy
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.netpolicy import LOOPBACK_HOSTS, MAX_URL_LENGTH, STRICT, UrlPolicy, UrlRefused

__all__ = ["LOOPBACK_HOSTS", "MAX_URL_LENGTH", "CommitmentError", "Payload", "check_url", "encode", "parse"]

VERSION = 1
MAX_PAYLOAD_BYTES = 1024
KEYS = ("v", "d", "b", "u")

_HEX64 = re.compile(r"[0-9a-f]{64}")

REASONS = (
    "type",
    "too_large",
    "not_json",
    "not_object",
    "duplicate_key",
    "missing_key",
    "unknown_key",
    "version",
    "digest",
    "bound_digest",
    "bound_mismatch",
    "url_type",
    "url_too_long",
    "url_chars",
    "url_scheme",
    "url_http_not_loopback",
    "url_credentials",
    "url_host",
    "url_port",
    "not_canonical",
    "encoding",
    "url_address",
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


def check_url(url: Any, urls: UrlPolicy = STRICT) -> str:
    """https to a public host; loopback (and http to it) only under a local chain's policy.
    The rules live in cacheon_subnet.netpolicy, shared with the fetch's connect-time checks."""
    try:
        return netpolicy.check_url(url, urls)
    except UrlRefused as exc:
        raise CommitmentError(exc.reason, exc.detail) from None


def _check_digest(value: Any, key: str, reason: str) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise CommitmentError(reason, f"{key} must be 64 lowercase hex chars, got {value!r:.80}")
    return value


def encode(digest: str, hotkey: str, url: str, urls: UrlPolicy = STRICT) -> str:
    """The canonical payload for `hotkey` committing bundle `digest` served at `url`."""
    _check_digest(digest, "d", "digest")
    check_url(url, urls)
    obj = {"v": VERSION, "d": digest, "b": _bound(digest, hotkey), "u": url}
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=True)
    if len(data.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise CommitmentError("too_large", f"payload would be {len(data)} bytes; at most {MAX_PAYLOAD_BYTES}")
    return data


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise CommitmentError("duplicate_key", f"key {key!r} appears twice")
        seen[key] = value
    return seen


def parse(data: Any, hotkey: str, urls: UrlPolicy = STRICT) -> Payload:
    """Validate a revealed commitment of `hotkey`; raises CommitmentError naming the rule.
    `urls`: STRICT (public https only) unless the chain is local."""
    if not isinstance(data, str):
        raise CommitmentError("type", f"commitment must be str, got {type(data).__name__}")
    try:
        size = len(data.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate (undecodable bytes from the chain)
        raise CommitmentError("encoding", f"not valid UTF-8 text ({exc.reason} at char {exc.start})") from None
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
    url = check_url(obj["u"], urls)
    if not hotkey:
        raise CommitmentError("bound_mismatch", "no hotkey to bind the digest to")
    expected = _bound(digest, hotkey)
    if bound != expected:
        raise CommitmentError("bound_mismatch", f"b does not bind d to hotkey {hotkey!r} (copied commitment?)")
    canonical = json.dumps({"v": v, "d": digest, "b": bound, "u": url}, separators=(",", ":"), ensure_ascii=True)
    if data != canonical:
        raise CommitmentError(
            "not_canonical",
            "payload is valid but not in canonical form (key order v,d,b,u; no spaces); build it with encode()",
        )
    return Payload(digest=digest, bound=bound, url=url, version=v)
