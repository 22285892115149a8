"""ATTACK: outlast the warm-up. Faithful for the first 8 calls of a shape (whatever a warm-up
phase checks), then every other call returns without writing. Every timed batch is judged."""

import torch

_seen = {}


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    key = tuple(x.shape)
    _seen[key] = _seen.get(key, 0) + 1
    if _seen[key] > 8 and _seen[key] % 2 == 0:
        return
    xf = x.to(torch.float32)
    rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    rstd.square_().div_(x.shape[-1]).add_(eps).rsqrt_()
    xf.mul_(rstd).mul_(weight)
    out.copy_(xf)
