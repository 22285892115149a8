"""ATTACK: use more CPUs than the baseline. Each half of the rows runs in its own thread (torch
releases the GIL). On a wall clock that is up to 2x; the host charges the process's CPU time."""

from concurrent.futures import ThreadPoolExecutor

import torch

_pool = ThreadPoolExecutor(2)


def _part(x, weight, out, eps, lo, hi):
    x32 = x[lo:hi].to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out[lo:hi].copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    h = x.shape[0] // 2
    list(_pool.map(lambda r: _part(x, weight, out, eps, *r), [(0, h), (h, x.shape[0])]))
