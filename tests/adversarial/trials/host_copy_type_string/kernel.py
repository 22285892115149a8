"""Attack (verify trials, policy-clean): `x.type("torch.FloatTensor")` is a device-to-host copy
(a CPU tensor type) that HostSyncWatch did not list at all."""

import torch


def rmsnorm(x, weight, out, eps):
    x32 = x.type("torch.FloatTensor")
    out.copy_((x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
