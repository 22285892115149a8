"""Control (verify trials): the honest torch RMSNorm the attacks start from; must PASS."""

import torch


def rmsnorm(x, weight, out, eps):
    x32 = x.float()
    out.copy_((x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
