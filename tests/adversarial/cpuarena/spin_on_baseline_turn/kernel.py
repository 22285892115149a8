"""ATTACK: sabotage B. A daemon thread spins while the kernel is not being called (that is when
the baseline runs), to steal its CPU and caches. The host keeps this process SIGSTOPped while B
runs, so the thread cannot run then; while the candidate runs, its CPU is charged to it."""

import threading

import torch

_busy = [False]


def _spin() -> None:
    n = 0
    while True:
        if not _busy[0]:
            n += 1


threading.Thread(target=_spin, daemon=True).start()


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    _busy[0] = True
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
    _busy[0] = False
