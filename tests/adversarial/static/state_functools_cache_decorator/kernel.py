"""@functools.lru_cache keeps outputs across calls."""

import functools  # expect: P004
import torch


@functools.lru_cache(maxsize=None)  # expect: P018
def _cached(key):
    return key



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
