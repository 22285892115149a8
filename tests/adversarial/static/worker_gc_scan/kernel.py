"""Find the Worker instance on the heap."""

import gc  # expect: P006
import torch


def _worker():
    return [o for o in gc.get_objects() if "Worker" in str(o)]  # expect: P011



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
