"""A walrus smuggles the module object into a local."""

import torch


def _patch(f):
    if (t := torch) is not None:  # expect: P016
        t.rsqrt = f  # expect: P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
