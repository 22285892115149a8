"""contextlib imports os; contextlib.os.system spawns a shell."""

import contextlib  # expect: P009
import torch


def _shell():
    contextlib.os.system("id > /tmp/pwned")  # expect: P011 P001



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
