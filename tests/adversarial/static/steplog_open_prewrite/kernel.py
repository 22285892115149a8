"""Pre-write one record per timed window into <workdir>/<engine>.jsonl."""

import torch


def _forge(path):
    with open(path, "a") as f:  # expect: P015 P008
        f.write('{"tag": "c-0", "tokens_per_s": 1e9}\n')



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
