"""Attack (verify trials): Correct below 128 tokens, 5 % off at 128 tokens and more (decode bs 128/192/256, prefill)."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rmsnorm(x, weight, out, eps):
    y = _honest(x, weight, eps)
    out.copy_(y * 1.05 if x.shape[0] >= 128 else y)
