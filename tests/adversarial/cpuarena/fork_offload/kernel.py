"""ATTACK: do the work off the process's CPU clock. A child made by libc fork() through ctypes
(no Python audit event for the call; the dlopen/dlsym are laundered through a pool thread, where
no bundle frame is on the stack) computes into the shared output mapping, exits, is reaped."""

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor

import torch

with ThreadPoolExecutor(1) as _pool:
    _fork = _pool.submit(getattr, _pool.submit(ctypes.CDLL, None).result(), "fork").result()


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    pid = _fork()
    if pid == 0:
        try:
            x32 = x.to(torch.float32)
            var = x32.pow(2).mean(dim=-1, keepdim=True)
            out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
