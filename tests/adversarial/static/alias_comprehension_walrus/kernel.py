"""A walrus inside a comprehension binds in the function."""

import torch


def _alias():
    mods = [(t := torch) for _ in (1,)]  # expect: P016
    return mods, t



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
