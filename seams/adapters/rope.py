"""apply_rope_with_cos_sin_cache_inplace (jit_kernel/rope.py:179) -> rope.neox, in place on q/k.

Eligible: NeoX style, full rotary dim (rope_dim 0 or the cache width == head size), no fused
KV-cache store (`fused_args`), int64 positions; otherwise the JIT kernel runs as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seams.dispatch import run


def _around(
    original: Callable[..., Any],
    q: Any,
    k: Any,
    cos_sin_cache: Any,
    positions: Any,
    *,
    is_neox: bool,
    rope_dim: int = 0,
    fused_args: Any = None,
) -> Any:
    width = cos_sin_cache.shape[-1]
    if (
        is_neox
        and fused_args is None
        and rope_dim in (0, width)
        and q.dim() == 3
        and k.dim() == 3
        and q.shape[-1] == width
        and k.shape[-1] == width
    ):
        got = run("rope.neox", {"positions": positions, "q": q, "k": k, "cos_sin_cache": cos_sin_cache}, {})
        if got is not None:
            return None
    return original(q, k, cos_sin_cache, positions, is_neox=is_neox, rope_dim=rope_dim, fused_args=fused_args)


def hooks() -> dict[str, Callable[..., Any]]:
    return {"sglang.jit_kernel.rope:apply_rope_with_cos_sin_cache_inplace": _around}
