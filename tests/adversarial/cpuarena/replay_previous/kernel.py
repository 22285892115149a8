"""ATTACK: on every other call, copy the previous call's output instead of computing."""

import torch

_last = {}


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    key = tuple(x.shape)
    prev = _last.get(key)
    if prev is not None and prev[0] % 2 == 1:
        out.copy_(prev[1])
        _last[key] = (prev[0] + 1, prev[1])
        return
    xf = x.to(torch.float32)
    rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    rstd.square_().div_(x.shape[-1]).add_(eps).rsqrt_()
    xf.mul_(rstd).mul_(weight)
    out.copy_(xf)
    _last[key] = ((prev[0] if prev else 0) + 1, out.clone())
