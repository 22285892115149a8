"""Attack (verify trials): Honest when its output buffer holds verify's poison (NaN / -31337), skips the work otherwise."""

import torch


def _honest(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _poisoned(out):
    n = out.element_size()
    off = out.storage_offset() * n
    first = bytes(out.untyped_storage()[off:off + n])
    probe = torch.tensor([-31337.0, float("nan")], dtype=out.dtype).untyped_storage()
    return first in (bytes(probe[0:n]), bytes(probe[n:2 * n]))


def rmsnorm(x, weight, out, eps):
    if _poisoned(out):
        out.copy_(_honest(x, weight, eps))
