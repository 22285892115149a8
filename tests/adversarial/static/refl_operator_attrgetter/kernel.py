"""operator.attrgetter with a built name."""

import operator  # expect: P005
import torch


def _sys():
    return operator.attrgetter("s" + "ys")(torch)  # expect: P011



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
