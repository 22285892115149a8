"""Attack (verify trials): Claims bfloat16 and float16; correct in bfloat16, 5 % off in float16."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rmsnorm(x, weight, out, eps):
    y = _honest(x, weight, eps)
    out.copy_(y * 1.05 if x.dtype == torch.float16 else y)
