"""Replace Worker._invoke so every call reports ok."""

import __main__  # expect: P009
import torch


def _patch(f):
    __main__.Worker._invoke = f  # expect: P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
