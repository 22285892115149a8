"""Attack (verify trials, policy-clean): a device-to-host copy written `x.to(device="cpu")`.
HostSyncWatch only looked at positional arguments of `.to`, so `x.to("cpu")` was flagged and
this spelling was not (graph-unsafe on CUDA: a sync on every call)."""

import torch


def rmsnorm(x, weight, out, eps):
    x32 = x.to(device="cpu").float()
    out.copy_((x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
