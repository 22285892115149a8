"""pathlib writes the clock-<rank>.jsonl receipts."""

import pathlib  # expect: P009
import torch


def _forge(d):
    pathlib.Path(d, "clock-0.jsonl").write_text("{}")  # expect: P011



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
