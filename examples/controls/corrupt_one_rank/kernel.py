"""Correct everywhere except on rank 1, which perturbs its copy of the sum (deterministically,
so only the per-rank comparison against the reference can catch it, not the determinism gate)."""

import torch
import torch.distributed as dist


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    out.copy_(x)
    dist.all_reduce(out, group=group)
    if dist.get_rank(group) == 1:
        i = torch.arange(out.numel(), device=out.device, dtype=torch.float32)
        out.add_((0.25 * torch.sin(12.9898 * i)).view_as(out).to(out.dtype))
