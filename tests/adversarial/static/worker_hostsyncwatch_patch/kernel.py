"""Disable verify's host-sync watch via __main__."""

import torch


def _quiet(*a, **k):
    return None


def _patch():
    torch.sys.modules["__main__"].HostSyncWatch.__torch_function__ = _quiet  # expect: P004



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
