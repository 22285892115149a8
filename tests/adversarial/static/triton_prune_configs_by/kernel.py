"""autotune(prune_configs_by=...) calls bundle code with Triton objects."""

import torch
import triton
import triton.language as tl


def _prune(configs, nargs, **kw):
    return configs


@triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=[], prune_configs_by={"early_config_prune": _prune})  # expect: P018
@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)



def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
