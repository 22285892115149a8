"""A group-taking helper reached through a module constant, a default argument (of a def and of
a lambda) and a constant imported from another module: each call hands it None, the default
world group, and the call rule never saw a bundle def's name at the call. The constant and
default forms PASSed CPU verify (2 ranks: the world is the group there; red team 2026-12-04)."""

import torch
import torch.distributed as dist

from .more import REDUCE


def _sum(t, g):
    dist.all_reduce(t, group=g)


SUM = _sum  # expect: P016
PICK = 0 or _sum  # expect: P016


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup, f=_sum) -> None:  # expect: P016
    out.copy_(x)
    if x.numel() > 1 << 30:
        SUM(out, None)
        PICK(out, None)
        REDUCE[0](out, None)
        (lambda t, h=_sum: h(t, None))(out)  # expect: P016
    elif x.numel() % 2:
        f(out, None)
    else:
        _sum(out, group)
