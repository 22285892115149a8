"""Where arena work and the validator-owned JIT seed caches live on this machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from cacheon_subnet.env import ARENA_HOME, JIT_SEEDS


class JitCache(NamedTuple):
    """One JIT cache an engine writes at start, seeded like the others (the one table: seed_caches,
    arena.engine.jit_copies.private_caches / warm_seed_caches / the /cacheon-jit mapping, arena.engine.startdiag)."""

    key: str  # the variable the engine's JIT reads
    name: str  # the default seed's dir, the engine's private copy and /cacheon-jit/<name> inside
    # the only part of the dir that is copied in and back ("": all of it). FlashInfer's variable
    # names a base it writes <base>/.cache/flashinfer under (flashinfer/jit/env.py): an operator
    # who points it at their HOME must not have that whole HOME copied into every engine
    sub: str = ""


JIT_CACHES = (
    JitCache("TRITON_CACHE_DIR", "triton"),
    JitCache("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    JitCache("XDG_CACHE_HOME", "xdg"),
    JitCache("TVM_FFI_CACHE_DIR", "tvm-ffi"),
    JitCache("FLASHINFER_WORKSPACE_BASE", "flashinfer", ".cache/flashinfer"),
)
CACHE_KEYS = tuple(c.key for c in JIT_CACHES)
_BY_KEY = {c.key: c for c in JIT_CACHES}


def cache_part(key: str, d: str | os.PathLike[str]) -> Path:
    """The part of cache dir `d` (for variable `key`) that is copied: `d` itself, or FlashInfer's
    .cache/flashinfer under its base."""
    c = _BY_KEY.get(key)
    return Path(d) / c.sub if c and c.sub else Path(d)


def default_home() -> Path:
    """Arena work (engine trees, checkpoints, receipts, results) lives where the sandbox's
    dedicated uid can reach it: $CACHEON_ARENA_HOME, else /var/tmp/cacheon. Its length does not
    matter to SGLang's ZMQ sockets (the engine's TMPDIR is short by construction: sockpath.py).
    Nothing secret is kept there (state DB and wallet live elsewhere)."""
    home = Path(ARENA_HOME.get())
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)
    return home


def seed_caches() -> dict[str, str]:
    """The JIT caches every engine starts from (a copy, in its own scratch: arena.engine.jit_copies.private_caches).
    The operator's own TRITON_CACHE_DIR & co (JIT_CACHES) win key by key; the rest default to a
    validator-owned `<home>/jit/<name>` (mode 0700: engines never see it, the host copies), so a validator that set
    nothing still starts its engines warm after the first pristine one (cold start is ~2x slower).
    Only an engine that loaded no contribution code writes back, new files only
    (arena.engine.jit_copies.warm_seed_caches). CACHEON_JIT_SEEDS=off: every engine cold."""
    if not JIT_SEEDS.get():
        return {}
    chosen = {k: os.environ[k] for k in CACHE_KEYS if os.environ.get(k)}
    if len(chosen) < len(CACHE_KEYS):
        top = default_home() / "jit"
        top.mkdir(mode=0o700, exist_ok=True)
        top.chmod(0o700)
        root = top / seed_generation()
        root.mkdir(mode=0o700, exist_ok=True)
        for k in CACHE_KEYS:
            if k not in chosen:
                d = root / _BY_KEY[k].name
                d.mkdir(mode=0o700, exist_ok=True)
                chosen[k] = str(d)
    return chosen


# Bump when what engines write into their caches changes shape (2: the fixed in-engine path
# /cacheon-jit, arena/engine/jit_copies.py JIT_INSIDE; build files written under another path never hit.
# 3: FlashInfer's JIT workspace is a seed too, /cacheon-jit/flashinfer, FLASHINFER_WORKSPACE_BASE).
SEED_LAYOUT = 3


def seed_generation() -> str:
    """The default seeds' subdir: a pin move or a layout change starts from empty seeds, since a
    seed is never overwritten (new files only) and stale builds would otherwise stay forever."""
    import hashlib
    import sys

    from cacheon_subnet.pins import SGLANG_KERNEL_PIN, SGLANG_PIN, TORCH_PIN

    key = f"{SGLANG_PIN}|{SGLANG_KERNEL_PIN}|{TORCH_PIN}|py{sys.version_info[0]}.{sys.version_info[1]}|{SEED_LAYOUT}"
    return f"g{SEED_LAYOUT}-" + hashlib.sha256(key.encode()).hexdigest()[:12]
