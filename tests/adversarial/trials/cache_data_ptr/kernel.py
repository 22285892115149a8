"""Attack (verify trials): Output cache keyed on (x.data_ptr(), shape, dtype): stale when the allocator reuses an address."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

_cache = {}


def rmsnorm(x, weight, out, eps):
    key = (x.data_ptr(), tuple(x.shape), x.dtype)
    if key in _cache:
        out.copy_(_cache[key])
        return
    y = _honest(x, weight, eps)
    out.copy_(y)
    _cache[key] = y.clone()
