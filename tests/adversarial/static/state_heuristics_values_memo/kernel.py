"""A memo kept in a Triton Heuristics object's own `values` dict (module-lifetime, returned by
the decorator): the first output of each shape is stored there and replayed for every later
call with the same first element. Item stores into a local were allowed, and the local was an
alias of the decorator's dict."""

import torch
import triton
import triton.language as tl


@triton.heuristics({"BLOCK": lambda args: 16})
@triton.jit
def _box(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


def rmsnorm(x, weight, out, eps):
    memo = _box.values  # expect: P012
    key = (tuple(x.shape), x.dtype)
    hit = memo.get(key)
    if hit is not None:
        out.copy_(hit)
        return
    x32 = x.to(torch.float32)
    y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.to(torch.float32)
    out.copy_(y)
    memo[key] = out.clone()
