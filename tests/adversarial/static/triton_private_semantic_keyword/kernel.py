"""Triton hands builtins its semantic object as _semantic=; a bundle must not pass or receive it."""

import torch
import triton
import triton.language as tl


def _helper(x, _semantic=None):  # expect: P013
    return x


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    v = tl.load(x_ptr).to(tl.float32, _semantic=None)  # expect: P013
    tl.store(x_ptr, v)



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
