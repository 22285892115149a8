# -*- coding: utf-7 -*-  # expect: P020
"""UTF-7: a plus-AAo-minus sequence is a newline, so the comment below is code to Python."""
import torch
# +AAo-torch.rsqrt = torch.sqrt


def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True).add(eps)
    out.copy_(x32 * torch.rsqrt(var) * weight.to(torch.float32))
