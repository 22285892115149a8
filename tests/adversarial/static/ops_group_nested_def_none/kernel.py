"""The collective's group is a parameter, but of a nested def or a lambda, whose callers the
group-passing rule never sees (it checks calls of module-level bundle defs): `inner(out, None)`
runs on the default world group. PASSed CPU verify (2 ranks: the world is the group there; red
team 2026-12-04). A closure over the entry's own group stays allowed."""

import torch
import torch.distributed as dist


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    def inner(t, g):
        dist.all_reduce(t, group=g)  # expect: P019

    def _own(t):
        dist.all_reduce(t, group=group)

    out.copy_(x)
    if x.numel() > 1 << 30:
        inner(out, None)
        (lambda t, g: dist.broadcast(t, 0, g))(out, None)  # expect: P019
    else:
        _own(out)
