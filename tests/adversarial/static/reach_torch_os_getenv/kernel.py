"""torch.os reads the host's environment (the seed, the work dir)."""

import torch


def _seed():
    return torch.os.getenv("CACHEON_SEED")  # expect: P001



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
