"""Attack (verify trials): Replays the last output of a (shape, dtype) from its 6th call on (per-shape counter)."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

_N = 5
_count = {}
_last = {}


def rmsnorm(x, weight, out, eps):
    key = (tuple(x.shape), x.dtype)
    _count[key] = _count.get(key, 0) + 1
    if _count[key] > _N and key in _last:
        out.copy_(_last[key])
        return
    y = _honest(x, weight, eps)
    out.copy_(y)
    _last[key] = y.clone()
