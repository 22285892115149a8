"""x.untyped_storage()[i] as a memo key."""

import torch


def _key(x):
    return x.untyped_storage()[0]  # expect: P012



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
