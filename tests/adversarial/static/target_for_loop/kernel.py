"""A for-loop target that is an attribute patches torch."""

import torch


def _patch(f):
    for torch.rsqrt in (f,):  # expect: P004
        pass



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
