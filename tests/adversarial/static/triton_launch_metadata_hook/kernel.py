"""triton.jit(launch_metadata=...) is a per-launch hook."""

import torch
import triton
import triton.language as tl


def _hook(grid, metadata, args):
    return {}


@triton.jit(launch_metadata=_hook)  # expect: P018
def _k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
