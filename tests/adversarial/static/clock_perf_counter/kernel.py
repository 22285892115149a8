"""The CPU clock: time.perf_counter."""

import time  # expect: P004
import torch


def _now():
    return time.perf_counter()  # expect: P011



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
