"""Faithful all-reduce for slot collective.all_reduce@1: out = sum of every rank's x over `group`.

Destination passing: x stays untouched, out receives a copy that is then reduced in place over
the ProcessGroup the caller hands in (SGLang's TP device group). The sum is taken in the
activation dtype, as NCCL does it, so every rank ends with bit-identical results.
"""

import torch
import torch.distributed as dist


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    out.copy_(x)
    dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
