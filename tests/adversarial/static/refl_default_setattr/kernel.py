"""A default argument holding setattr."""

import torch


def _patch(f, _s=setattr):  # expect: P014
    _s(torch.nn, "silu", f)



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
