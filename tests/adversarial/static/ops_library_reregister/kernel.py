"""Re-register the stock op's CUDA kernel (B would run ours)."""

import torch


def _patch(f):
    torch.library.impl("sgl_kernel::rmsnorm", "CUDA")(f)  # expect: P003



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
