"""Faithful AR + residual + RMSNorm for slot collective.ar_residual_rmsnorm@1.

residual_out <- all_reduce(x) over `group` (in the activation dtype, like the stock one-shot
kernels), then one Triton program per row: s = residual_out + residual at fp32,
residual_out = s, norm_out = s * rsqrt(mean(s^2) + eps) * weight. The inputs are read only;
residual and weight are the same on every rank, so every rank writes the same bits.
"""

import torch
import torch.distributed as dist
import triton
import triton.language as tl


@triton.jit
def _add_rmsnorm_kernel(sum_ptr, res_ptr, w_ptr, norm_ptr, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    s = tl.load(sum_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
    s += tl.load(res_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(sum_ptr + row * H + cols, s.to(sum_ptr.dtype.element_ty), mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(norm_ptr + row * H + cols, (s * rstd * w).to(norm_ptr.dtype.element_ty), mask=mask)


def ar_residual_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, norm_out: torch.Tensor,
                        residual_out: torch.Tensor, eps: float, group: dist.ProcessGroup) -> None:
    residual_out.copy_(x)
    dist.all_reduce(residual_out, op=dist.ReduceOp.SUM, group=group)
    T, H = x.shape
    block = triton.next_power_of_2(H)
    _add_rmsnorm_kernel[(T,)](residual_out, residual, weight, norm_out, H, eps, BLOCK=block,
                              num_warps=min(16, max(1, block // 256)))
