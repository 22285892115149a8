"""`gather` was a tensor method on VALUE_ATTRS, and the `group` argument is a ProcessGroup:
`group.gather(...)` is its raw C++ collective, outside the dist.* call rules, always async, and
its Work has no allowlisted method to wait on, so the gather is still writing after the call
returns. It PASSed CPU verify beside a faithful all_reduce (red team 2026-12-04)."""

import torch
import torch.distributed as dist


def all_reduce(x: torch.Tensor, out: torch.Tensor, group: dist.ProcessGroup) -> None:
    bufs = [torch.empty_like(x) for i in range(group.size())]
    w = group.gather([bufs] if dist.get_rank(group) == 0 else [], [x])  # expect: P012
    [w, x.gather(0, torch.zeros_like(x, dtype=torch.int64))]  # expect: P012
    out.copy_(x)
    dist.all_reduce(out, group=group)
