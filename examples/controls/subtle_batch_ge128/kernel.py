"""Faithful below 128 rows; ignores the norm weight for 128..256 rows (decode batches >= 128; prefills are larger).

Subtle-error control for the arena's quality gate (docs/arena.md "Calibrating the quality gate"):
slot norm.fused_add_rmsnorm@1, otherwise the faithful example (examples/norm.fused_add_rmsnorm).
Kept for GPU measurement of what the gate catches; no result is recorded yet.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, r_ptr, w_ptr, x_row_stride, r_row_stride, H, eps, BROKEN: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x_row = x_ptr + row * x_row_stride
    r_row = r_ptr + row * r_row_stride
    s = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32) + tl.load(r_row + cols, mask=mask, other=0.0).to(
        tl.float32)
    tl.store(r_row + cols, s.to(r_ptr.dtype.element_ty), mask=mask)
    var = tl.sum(s * s, axis=0) / H
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if BROKEN:
        w = w * 0.0 + 1.0  # the norm weight is ignored
    tl.store(x_row + cols, (s * rstd * w).to(x_ptr.dtype.element_ty), mask=mask)


def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    T, H = x.shape
    if T == 0:
        return
    block = triton.next_power_of_2(H)
    _kernel[(T,)](x, residual, weight, x.stride(0), residual.stride(0), H, eps, BROKEN=128 <= T <= 256, BLOCK=block,
                  num_warps=max(1, min(16, block // 256)))
