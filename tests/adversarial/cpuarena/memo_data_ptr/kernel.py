"""ATTACK: memoise by data_ptr. The host reuses each call's buffer with fresh contents."""

import torch

_memo = {}


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    key = (x.data_ptr(), tuple(x.shape))
    hit = _memo.get(key)
    if hit is not None:
        out.copy_(hit)
        return
    xf = x.to(torch.float32)
    rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    rstd.square_().div_(x.shape[-1]).add_(eps).rsqrt_()
    xf.mul_(rstd).mul_(weight)
    out.copy_(xf)
    _memo[key] = out.clone()
