"""ATTACK (issue 14 class 5): a memo keyed on the first element, read via untyped_storage()."""

import torch

_memo = {}


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    first = x.untyped_storage()[x.storage_offset() * x.element_size() + 1]  # high byte of x[0, 0]
    key = (first >= 128, tuple(x.shape))  # its sign bit
    hit = _memo.get(key)
    if hit is not None:
        out.copy_(hit)
        return
    xf = x.to(torch.float32)
    rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
    rstd.square_().div_(x.shape[-1]).add_(eps).rsqrt_()
    xf.mul_(rstd).mul_(weight)
    out.copy_(xf)
    _memo[key] = out.clone()
