"""The helper's collective names its group parameter as the rule asks, but its callers hand it
None (the default world group), through a keyword, and through a local alias; and a second
module's helper is reached through a relative import. Each caller is refused."""

import torch
import torch.distributed as dist

from .more import reduce_into


def _sum(t, g):
    dist.all_reduce(t, group=g)


def _twice(t, g):
    _sum(t, g)


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    out.copy_(x)
    if x.numel() > 1 << 30:
        _sum(out, None)  # expect: P019
        _twice(out, g=None)  # expect: P019
        reduce_into(out, None)  # expect: P019
        f = _sum  # expect: P016
        f(out, None)
        (lambda t: _sum(t, None))(out)  # expect: P019
        _sum(out, *[group])  # expect: P019
        _sum(out, g=x.numel())  # expect: P019
    else:
        _twice(out, group)
