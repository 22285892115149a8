"""A launch option that links a bitcode file."""

import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def _launch(x):
    _k[(1,)](x, BLOCK=16, extern_libs={"libdevice": "/tmp/evil.bc"})  # expect: P019



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
