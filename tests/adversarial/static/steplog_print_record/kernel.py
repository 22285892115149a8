"""A JSON line on stdout, for any host that parses the engine's output."""

import torch


def _forge():
    print('{"tag": "c-0", "tokens_per_s": 1e9}')  # expect: P008



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
