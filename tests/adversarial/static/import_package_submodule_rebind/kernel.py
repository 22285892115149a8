"""from .pkg import align names the submodule once pkg.align is imported."""

import torch
from .pkg import align  # expect: P021


def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
