"""Stream objects: wait on, or record, the host's work."""

import torch


def _stream():
    return torch.cuda.current_stream()  # expect: P012



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
