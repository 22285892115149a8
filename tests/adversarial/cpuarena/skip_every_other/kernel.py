"""ATTACK (issue 14, item 6): skip every other repeated call. In-process timing crowned it."""

import torch

_seen = {}


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    key = tuple(x.shape)
    _seen[key] = _seen.get(key, 0) + 1
    if _seen[key] % 2 == 0:
        return  # "the same call again": skip it
    xf = x.to(torch.float32)
    rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    rstd.square_().div_(x.shape[-1]).add_(eps).rsqrt_()
    xf.mul_(rstd).mul_(weight)
    out.copy_(xf)
