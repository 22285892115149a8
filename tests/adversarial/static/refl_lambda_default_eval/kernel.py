"""A lambda default keeps eval."""

import torch


def _run(code):
    f = lambda _e=eval: _e(code)  # expect: P014
    return f()



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
