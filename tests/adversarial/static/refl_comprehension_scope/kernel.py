"""A comprehension target named like a builtin does not make it local."""

import torch


def _sys(x):
    y = [0 for getattr in ()]  # expect: P017
    return getattr(x, "__class__"), y  # expect: P005



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
