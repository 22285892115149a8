"""Per-entry decoding for the SDK's bulk commitment read (internal hook, SDK 11.3.0).

Why it exists: `subnets.commitments(netuid)` decodes every hotkey's commitment in one call, and
its decoders raise on data a miner controls: `metagraph._revealed_entry` reads a revealed payload
that the transport handed over as text starting with "0x" as hex (`bytes.fromhex`), so a
12-byte commitment whose SCALE prefix is the byte "0" followed by "x" and non-hex text raises
ValueError (checked offline against the installed SDK), and `_decode_fields` does the same on
`Raw*` fields. One such entry would fail the read for the whole subnet, on every validator,
every pass: no challenger would ever be taken in again (red team 2026-12-01). These wrappers
make a failure cost only its own entry: it decodes to UNDECODABLE, which the commitment parser
refuses like any malformed row. Both names are in compat.SURFACE, so `cacheon chain-compat`
says when a new SDK moves them (and this file must be reviewed with every SDK pin move)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

UNDECODABLE = "\x00cacheon: undecodable commitment"
_MARK = "_cacheon_tolerant"


def _wrap(fn: Callable[..., Any], fallback: Callable[..., Any]) -> Callable[..., Any]:
    def tolerant(*args: Any) -> Any:
        try:
            return fn(*args)
        except (ValueError, TypeError, IndexError, UnicodeError, OverflowError):
            return fallback(*args)

    setattr(tolerant, _MARK, fn)
    return tolerant


def _reveal_fallback(entry: Any) -> tuple[int, str]:
    try:
        block = int(entry[1])
    except (TypeError, ValueError, IndexError, OverflowError):
        block = -1
    return block, UNDECODABLE


def install(metagraph: Any, revealed_entry: Any, decode_fields: Any) -> None:
    """Idempotent: wrap the two decoders in bittensor.metagraph, the module whose bulk read calls
    them by global name (bittensor_backend.install_sdk_hooks passes them in through compat.sdk)."""
    for attr, fn, fallback in (
        ("_revealed_entry", revealed_entry, _reveal_fallback),
        ("_decode_fields", decode_fields, lambda fields: UNDECODABLE),
    ):
        if not getattr(fn, _MARK, None):
            setattr(metagraph, attr, _wrap(fn, fallback))
