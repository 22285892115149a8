"""Stock RoPE exactly as RotaryEmbedding.forward_cuda reaches it for head_size in {64, 128, 256,
512} and rotary_dim == head_size (rotary_embedding/base.py:340-362): the fused in-place JIT
kernel `apply_rope_with_cos_sin_cache_inplace` from sglang.jit_kernel.rope (imported by value at
base.py:38-39), NeoX style, no fused KV-cache store."""

from __future__ import annotations

from collections.abc import Callable


def _rope_neox() -> Callable[..., None]:
    """sglang.jit_kernel.rope.apply_rope_with_cos_sin_cache_inplace(is_neox=True) (in place on q, k)"""
    from sglang.jit_kernel.rope import apply_rope_with_cos_sin_cache_inplace

    def run(positions, q, k, cos_sin_cache):  # noqa: ANN001
        apply_rope_with_cos_sin_cache_inplace(
            positions=positions,
            q=q,
            k=k,
            cos_sin_cache=cos_sin_cache,
            is_neox=True,
            fused_args=None,
        )

    return run


STOCK = {"rope.neox": _rope_neox}
