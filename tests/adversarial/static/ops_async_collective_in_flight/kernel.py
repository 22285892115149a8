"""Collectives left in flight: async_op=True returns a Work handle (no allowlisted method waits
on it), so the call returns while NCCL's stream is still writing `out`. A CUDA verify call ends
with a device-wide synchronize, which completes it; the engine's next kernel on the compute
stream reads `out` unordered with it. Passed by keyword and positionally (red team 2026-12-04;
on CPU gloo the race showed as a mismatch, the CUDA case was not run: no two-GPU machine)."""

import torch
import torch.distributed as dist


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    out.copy_(x)
    if x.numel() > 1 << 30:
        dist.all_reduce(out, dist.ReduceOp.SUM, group, True)  # expect: P019
        dist.broadcast(out, 0, group, True)  # expect: P019
    else:
        dist.all_reduce(out, group=group, async_op=True)  # expect: P019
