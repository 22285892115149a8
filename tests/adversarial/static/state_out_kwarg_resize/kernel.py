"""`out=` on a torch function resizes its target in place: `torch.empty(n, out=weight)` changes
the shape of a tensor the engine owns (a larger n re-points it to new storage), exactly what
.set_ / .resize_ do, for every later user of that weight."""

import torch


def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
    torch.empty(weight.shape[0] * 2, dtype=weight.dtype, device=weight.device, out=weight)  # expect: P019
    torch.abs(x, out=x)  # expect: P019
