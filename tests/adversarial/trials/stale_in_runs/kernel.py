"""Attack (verify trials): Stale only inside a run of same-shape calls (the engine's steady state: 57 norms per forward)."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

_prev = [None, 0]
_last = {}


def rmsnorm(x, weight, out, eps):
    key = (tuple(x.shape), x.dtype)
    _prev[1] = _prev[1] + 1 if _prev[0] == key else 1
    _prev[0] = key
    if _prev[1] >= 3 and key in _last:
        out.copy_(_last[key])
        return
    y = _honest(x, weight, eps)
    out.copy_(y)
    _last[key] = y.clone()
