"""A sealed package's Triton kernels get compile-cache keys no other kernel can have.

Triton keys a compiled kernel (in memory per function, on disk in TRITON_CACHE_DIR) by its
source text, its def line, the keys of the JIT functions it calls and the values of the
*constexpr* globals it reads (triton/runtime/jit.py `JITFunction.cache_key`). Every other global
the code generator accepts is read but left out of the key, and a module constant
`DT = tl.float16` (a dtype: the only policy-clean way to name one at module level, since
`tl.constexpr(...)` is a call) is one of them. So two policy-clean kernels with the same text at
the same line whose modules bind DT differently share one key, and a cache dir hands whichever
compiled first to the other (red team 2026-12-04: `triton.compile` of the fp32 kernel after the
fp16 one returned the fp16 binary, `truncf` and all). Every process of an engine shares its
private cache copy, and an engine holds the challenger, the incumbent and stock together: a
challenger that ships a copy of the incumbent's kernel with another DT (and launches it first:
an engine starts on the candidate route) chooses the binary the incumbent's B windows run, and a
bundle's own binaries could depend on the order its kernels first compile in, not on its text.

`salt_kernel_keys` mixes the defining module's qualified name (`cacheon_c_<digest>.<module>`:
unique to the bundle's content, and per module inside it) into the key of every Triton kernel of
a sealed package, right after its import and before anything can launch or compile it
(seams.activate; and the verify worker, so verify compiles what the engine compiles). Raises
when Triton's key can no longer be set (fail closed: the engine then loads nothing).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

SALT = "cacheon-module:"


def _jit_function(value: Any) -> Any:
    """The JITFunction a module attribute holds, through Autotuner / Heuristics wrappers."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    for _ in range(8):
        if isinstance(value, JITFunction):
            return value
        if not isinstance(value, (Autotuner, Heuristics)):
            return None
        value = value.fn
    return None


def salted_key(key: str, owner: str) -> str:
    return hashlib.sha256(f"{key}|{SALT}{owner}".encode()).hexdigest()


def salt_kernel_keys(package: str) -> int:
    """Salt every not-yet-salted Triton kernel defined in `package`'s imported modules; returns
    how many were salted now. Without Triton, or under its interpreter (no compile cache), 0."""
    try:
        from triton.runtime.jit import JITFunction  # noqa: F401
    except ImportError:
        return 0
    done = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")):
            continue
        for value in list(vars(mod).values()):
            jf = _jit_function(value)
            if jf is None:
                continue
            owner = getattr(jf.fn, "__module__", "")
            if not (owner == package or owner.startswith(package + ".")) or getattr(jf, "_cacheon_salted", None):
                continue
            salted = salted_key(jf.cache_key, f"{owner}:{jf.fn.__qualname__}")
            with jf._hash_lock:
                jf.hash = salted
            jf._cacheon_salted = salted
            if jf.cache_key != salted:
                raise RuntimeError(f"Triton kernel {owner}.{jf.fn.__qualname__}: its cache key could not be salted")
            done += 1
    return done
