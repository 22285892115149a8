"""weight.set_(...) re-points a tensor the engine owns: every later user of that weight (the
stock baseline route too) reads the new storage, in the new layout, long after this call."""

import torch


def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
    wide = torch.empty(weight.shape[0] * 2, dtype=weight.dtype, device=weight.device)
    wide.narrow(0, 0, weight.shape[0]).copy_(weight)
    weight.set_(wide.narrow(0, 0, weight.shape[0]))  # expect: P012
