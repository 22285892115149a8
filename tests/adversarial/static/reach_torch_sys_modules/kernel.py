"""torch.sys reaches every loaded module."""

import torch


def _clock():
    return torch.sys.modules["seams.forward_clock"]  # expect: P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
