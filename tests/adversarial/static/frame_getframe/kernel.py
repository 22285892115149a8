"""sys._getframe reaches the worker's frames."""

import torch


def _frame():
    return getattr(torch.sys, "_getframe")(1).f_locals  # expect: P005 P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
