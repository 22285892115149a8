"""An exception's traceback carries every frame."""

import torch


def _frame():
    try:  # expect: P015
        raise ValueError()
    except ValueError as e:
        return e.__traceback__.tb_frame



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
