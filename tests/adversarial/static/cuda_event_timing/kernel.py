"""CUDA events: time the windows from inside."""

import torch


def _timer():
    return torch.cuda.Event(enable_timing=True)  # expect: P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
