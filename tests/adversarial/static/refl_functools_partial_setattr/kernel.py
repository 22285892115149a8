"""functools.partial(setattr, ...)."""

import functools  # expect: P004
import torch


def _patch(f):
    functools.partial(setattr, torch, "rsqrt")(f)  # expect: P011 P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
