"""Where arena work and the validator-owned JIT seed caches live on this machine."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_KEYS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "TVM_FFI_CACHE_DIR")
_CACHE_NAMES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "XDG_CACHE_HOME": "xdg",
                "TVM_FFI_CACHE_DIR": "tvm-ffi"}


def default_home() -> Path:
    """Arena work (engine trees, checkpoints, receipts, results) lives where the sandbox's
    dedicated uid can reach it: $CACHEON_ARENA_HOME, else /var/tmp/cacheon. Its length does not
    matter to SGLang's ZMQ sockets (the engine's TMPDIR is short by construction: sockpath.py).
    Nothing secret is kept there (state DB and wallet live elsewhere)."""
    home = Path(os.environ.get("CACHEON_ARENA_HOME") or "/var/tmp/cacheon")
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)
    return home


def seed_caches() -> dict[str, str]:
    """The JIT caches every engine starts from (a copy, in its own scratch: arena.host.private_caches).
    The operator's own TRITON_CACHE_DIR & co win key by key; the rest default to a validator-owned
    `<home>/jit/<name>` (mode 0700: engines never see it, the host copies), so a validator that set
    nothing still starts its engines warm after the first pristine one (cold start is ~2x slower).
    Only an engine that loaded no contribution code writes back, new files only
    (arena.host.warm_seed_caches). CACHEON_JIT_SEEDS=off: every engine cold."""
    if os.environ.get("CACHEON_JIT_SEEDS", "").lower() in ("off", "0", "no", "false"):
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
                d = root / _CACHE_NAMES[k]
                d.mkdir(mode=0o700, exist_ok=True)
                chosen[k] = str(d)
    return chosen


# Bump when what engines write into their caches changes shape (2: the fixed in-engine path
# /cacheon-jit, arena/host.py JIT_INSIDE; build files written under another path never hit).
SEED_LAYOUT = 2


def seed_generation() -> str:
    """The default seeds' subdir: a pin move or a layout change starts from empty seeds, since a
    seed is never overwritten (new files only) and stale builds would otherwise stay forever."""
    import hashlib
    import sys

    from cacheon_subnet.pins import SGLANG_KERNEL_PIN, SGLANG_PIN, TORCH_PIN

    key = f"{SGLANG_PIN}|{SGLANG_KERNEL_PIN}|{TORCH_PIN}|py{sys.version_info[0]}.{sys.version_info[1]}|{SEED_LAYOUT}"
    return f"g{SEED_LAYOUT}-" + hashlib.sha256(key.encode()).hexdigest()[:12]
