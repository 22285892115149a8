"""f-string expressions are code: f'{x.__class__}'."""

import torch


def _walk(x):
    return f"{x.__class__}"  # expect: P006



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
