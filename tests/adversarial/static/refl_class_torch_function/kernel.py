"""A class with __torch_function__ intercepts every torch call."""

import torch


class Spy:  # expect: P015
    pass



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
