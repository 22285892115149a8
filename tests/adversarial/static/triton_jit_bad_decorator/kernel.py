"""A decorator that is not Triton's."""

import torch
import triton
import triton.language as tl


@torch.no_grad()  # expect: P018
def _k(x):
    return x



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
