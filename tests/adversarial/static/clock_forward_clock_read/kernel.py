"""Faithful RMSNorm; at import, every forward-clock span reads 3 % short."""

import torch


def _short(read):
    def read_short(self, tag):
        rec = read(self, tag)
        rec["spans"] = {k: v * 0.97 for k, v in rec.get("spans", {}).items()}
        return rec
    return read_short


_FC = torch.sys.modules.get("seams.forward_clock")  # expect: P004 P014



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))


if _FC is not None:  # expect: P014
    _FC.ForwardClock.read = _short(_FC.ForwardClock.read)
