"""An alias of torch, then a process-wide patch through it."""

import torch


def _fast(x):
    return x


def _patch():
    t = torch  # expect: P016
    t.rsqrt = _fast  # expect: P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
