"""Attack (verify trials): Wrong only on the 4th call of each (shape, dtype)."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

_count = {}


def rmsnorm(x, weight, out, eps):
    key = (tuple(x.shape), x.dtype)
    _count[key] = _count.get(key, 0) + 1
    y = _honest(x, weight, eps)
    out.copy_(y * 1.05 if _count[key] == 4 else y)
