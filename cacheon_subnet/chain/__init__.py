"""The chain: one small protocol (ChainBackend), a local SQLite chain and the real one.

`make_backend("local", path=...)` for the demo and tests, `make_backend("bittensor",
network=..., wallet_name=..., wallet_hotkey=...)` for testnet/mainnet. bittensor is imported
only when the bittensor backend is first used.
"""

from __future__ import annotations

from typing import Any, Literal

from cacheon_subnet.chain.backend import (
    ChainBackend,
    ChainError,
    ChainUnavailable,
    Commitment,
    Metagraph,
    Neuron,
    NotRegistered,
    RateLimited,
    VersionKeyTooLow,
    WeightsReceipt,
)
from cacheon_subnet.chain.bittensor_backend import BittensorChain
from cacheon_subnet.chain.commitment import CommitmentError, Payload, encode, parse
from cacheon_subnet.chain.compat import PIN as SDK_PIN
from cacheon_subnet.chain.compat import CompatReport, check_sdk, render
from cacheon_subnet.chain.local import LocalChain


def make_backend(kind: Literal["local", "bittensor"], **kw: Any) -> ChainBackend:
    """local: path (required), create=False plus LocalChain.create options when create=True.
    bittensor: network, wallet_name, wallet_hotkey, wallet_path (BittensorChain arguments)."""
    if kind == "local":
        path = kw.pop("path", None)
        if path is None:
            raise ChainError("make_backend('local'): path= is required", "usage")
        if kw.pop("create", False):
            return LocalChain.create(path, **kw)
        if kw:
            raise ChainError(f"make_backend('local'): unexpected {sorted(kw)} without create=True", "usage")
        return LocalChain.open(path)
    if kind == "bittensor":
        return BittensorChain(**kw)
    raise ChainError(f"make_backend: unknown kind {kind!r}; use 'local' or 'bittensor'", "usage")


__all__ = [
    "SDK_PIN",
    "BittensorChain",
    "ChainBackend",
    "ChainError",
    "ChainUnavailable",
    "Commitment",
    "CommitmentError",
    "CompatReport",
    "LocalChain",
    "Metagraph",
    "Neuron",
    "NotRegistered",
    "Payload",
    "RateLimited",
    "VersionKeyTooLow",
    "WeightsReceipt",
    "check_sdk",
    "encode",
    "make_backend",
    "parse",
    "render",
]
