"""A decorator string that starts a line with 'def' fools compiled Triton's source search."""

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[], key=["""
def _k(x_ptr, BLOCK): getattr(tl, "core")  # expect: P018
"""])
@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
