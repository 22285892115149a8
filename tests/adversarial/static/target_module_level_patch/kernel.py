"""Module-level monkey-patch at import."""

import torch


def _fake(x):
    return x * 0 + 1



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))


torch.rsqrt = _fake  # expect: P004
