"""Attack (verify trials): Replays the last output of the shape once 9 calls were made in all (global counter)."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

_calls = [0]
_last = {}


def rmsnorm(x, weight, out, eps):
    key = (tuple(x.shape), x.dtype)
    _calls[0] += 1
    if _calls[0] > 9 and key in _last:
        out.copy_(_last[key])
        return
    y = _honest(x, weight, eps)
    out.copy_(y)
    _last[key] = y.clone()
