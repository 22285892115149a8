"""TRITON_INTERPRET takes the LAST line starting with 'def ' as the kernel's source."""

import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    """
    def _k(x_ptr, BLOCK): getattr(tl, "core")  # expect: P018
    """
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
