"""A generator's gi_frame walks back to the caller."""

import torch


def _frame():
    return (v for v in (1,)).gi_frame.f_back  # expect: P006



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
