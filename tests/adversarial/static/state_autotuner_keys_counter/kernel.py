"""A call counter kept in a Triton Autotuner's own `keys` list (a module-lifetime object the
decorator returns): faithful for its first 399 calls (more than any verify budget gives one
worker), biased after. `.keys` is a method name on dicts, so VALUE_ATTRS let it through as a
value; `.append` then mutated shared state."""

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])
@triton.jit
def _tally(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


def rmsnorm(x, weight, out, eps):
    calls = _tally.keys  # expect: P012
    calls.append(0)
    x32 = x.to(torch.float32)
    y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.to(torch.float32)
    if len(calls) > 400:
        y = y * 1.05
    out.copy_(y)
