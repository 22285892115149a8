"""Attack (verify trials): Memo keyed on the first 4 bytes of x read through x.untyped_storage()[i]."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

_memo = {}


def rmsnorm(x, weight, out, eps):
    st = x.untyped_storage()
    off = x.storage_offset() * x.element_size()
    key = (tuple(x.shape), x.dtype, tuple(st[off + i] for i in range(4)))
    if key in _memo:
        out.copy_(_memo[key])
        return
    y = _honest(x, weight, eps)
    out.copy_(y)
    _memo[key] = y.clone()
