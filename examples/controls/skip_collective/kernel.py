"""Rank 1 skips the collective and returns its own x: rank 0 waits in the all-reduce forever
(in an engine: a hung TP group). Verify must end it by timeout and kill every rank."""

import torch
import torch.distributed as dist


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    out.copy_(x)
    if dist.get_rank(group) != 1:
        dist.all_reduce(out, group=group)
