"""Make Triton's CPU interpreter (TRITON_INTERPRET=1, triton 3.6) compute bf16 like the GPU.

The interpreter stores bf16 as raw uint16 bits: `tl.dot` on bf16 operands multiplies the bit
patterns (garbage), and fp32->bf16 casts truncate instead of rounding to nearest even. A
faithful bf16 kernel would fail CPU verify for reasons that do not exist on the GPU, so the CPU
worker (trusted code, applied before any bundle import) fixes exactly those two operations.
"""

from __future__ import annotations

import numpy as np


def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def apply() -> bool:
    """Patch the interpreter builder in place. Returns False when triton's layout is unknown."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter as it
    except ImportError:
        return False
    builder = getattr(it, "InterpreterBuilder", None)
    handle = getattr(it, "TensorHandle", None)
    if builder is None or handle is None or getattr(builder, "_cacheon_fixed", False):
        return bool(builder and getattr(builder, "_cacheon_fixed", False))
    orig_dot, orig_cast = builder.create_dot, builder.cast_impl

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):  # noqa: ANN001
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            ad = _bf16_bits_to_f32(a.data) if a.dtype.scalar == tl.bfloat16 else a.data.astype(np.float32)
            bd = _bf16_bits_to_f32(b.data) if b.dtype.scalar == tl.bfloat16 else b.data.astype(np.float32)
            return handle(np.matmul(ad, bd, dtype=d.data.dtype) + d.data, d.dtype.scalar)
        return orig_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):  # noqa: ANN001
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return handle(_f32_to_bf16_bits(src.data), dst_type.scalar)
        return orig_cast(self, src, dst_type)

    builder.create_dot = create_dot
    builder.cast_impl = cast_impl
    builder._cacheon_fixed = True
    return True
