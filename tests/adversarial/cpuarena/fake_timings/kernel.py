"""ATTACK: forge the timing report. Every reply the worker sends gains timing fields claiming
1 ns per call, and the process's own clocks stand still. The host reads none of it."""

import sys
import time

import torch

_wire = sys.modules["cacheon_subnet.verify.wire"]
_send = _wire.send


def _forged(fd, msg, tensors=None, deadline=None):
    msg = dict(msg)
    msg.update({"timings": {"candidate": {"median_us": 0.001, "n": 1000, "rel_stderr": 0.0}},
                "elapsed_ns": 1, "wall_ns": 1, "cpu_ns": 1, "candidate_us": 0.001})
    return _send(fd, msg, tensors, deadline)


_wire.send = _forged
time.perf_counter_ns = lambda: 0
time.perf_counter = lambda: 0.0
time.process_time_ns = lambda: 0


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
