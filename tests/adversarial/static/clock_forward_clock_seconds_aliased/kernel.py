"""Same attack through an alias and ForwardClock._seconds."""

import torch


def _patch():
    m = torch  # expect: P016
    fc = m.sys.modules["seams.forward_clock"].ForwardClock
    fc._seconds = lambda self, span: 0.97 * span  # expect: P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))


_patch()  # expect: P014
