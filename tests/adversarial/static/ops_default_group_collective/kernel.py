"""Collectives on the default (world) group: the kernel ignores the group it was handed. In
verify (and a TP-only arena) the world is the same set of ranks, so the sum is right; under PP
or DP attention the world is every rank of the engine, which this stalls or mixes in."""

import torch
import torch.distributed as dist


def _sum(t, g=None):
    dist.all_reduce(t, group=g)  # expect: P019


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    out.copy_(x)
    if dist.get_world_size() > 1:  # expect: P019
        dist.all_reduce(out)  # expect: P019
    else:
        _sum(out)  # expect: P019
        dist.broadcast(out, 0, None)  # expect: P019
