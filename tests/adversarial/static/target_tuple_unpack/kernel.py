"""Tuple unpacking with an attribute target."""

import torch


def _patch(f):
    a, torch.nn.functional.silu = 1, f  # expect: P004
    return a



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
