"""match/case does attribute lookups and isinstance checks."""

import torch


def _m(x):
    match x:  # expect: P015
        case 1:
            return 1



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
