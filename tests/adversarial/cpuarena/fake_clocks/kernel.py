"""ATTACK: stop the worker's own clocks (the half of fake_timings that survives the strict reply
decoder: its forged reply fields are refused outright). The host times on its own clock and
reads none of the worker's."""

import time

import torch

time.perf_counter_ns = lambda: 0
time.perf_counter = lambda: 0.0
time.process_time_ns = lambda: 0


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
