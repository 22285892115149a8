"""torch.importlib imports sqlite3 to crown a hotkey in the state DB."""

import torch


def _db():
    return torch.importlib.import_module("sqlite3")  # expect: P012



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
