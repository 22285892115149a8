"""Reach the stock kernels through torch.ops."""

import torch


def _stock(out, x, w, eps):
    torch.ops.sgl_kernel.rmsnorm.default(out, x, w, eps)  # expect: P003



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
