"""A module-level dict memoises outputs across calls (class 5)."""

import torch

_MEMO = {}  # expect: P014


def _remember(key, out):
    _MEMO[key] = out  # expect: P017



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
