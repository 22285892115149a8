"""One rank of a two-rank gloo group driving the collective adapters (test_seam_collective.py).

    python collective_child.py RANK WORLD RENDEZVOUS_FILE OUT_DIR

A stand-in `sglang.srt.distributed.parallel_state` holds one GroupCoordinator over the real
gloo group; candidates (the faithful example bundles) are registered the way activation does
(guarded body behind a custom op) and reached through the adapters, as SGLang would call them.
Scenario 1 (strict): both slots route, results saved for the parent to judge. Scenario 2 (serving
mode, CACHEON_SEAM_STRICT=0 semantics): rank 1's candidate raises before the collective; both
ranks must raise, neither may call SGLang's original.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import sys
import types
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"


def _load(path: Path, attr: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, attr)


def _parallel_state(group: object, world: int) -> types.ModuleType:
    ps = types.ModuleType("sglang.srt.distributed.parallel_state")
    coord = types.SimpleNamespace(
        unique_name="tp:0",
        world_size=world,
        device_group=group,
        pynccl_comm=None,
        hpu_communicator=None,
        xpu_communicator=None,
        npu_communicator=None,
    )
    ps._coord = coord
    ps._groups = {"tp:0": lambda: coord}  # SGLang keeps weakref.ref(coord) here: same call shape
    ps.get_attn_tp_group = lambda: coord
    ps.get_moe_tp_group = lambda: coord
    ps.get_moe_ep_group = lambda: coord
    ps.get_moe_expert_parallel_world_size = lambda: 1
    for name in ("sglang", "sglang.srt", "sglang.srt.distributed"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[ps.__name__] = ps
    return ps


def main() -> int:
    rank, world, rdv, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    timeout = datetime.timedelta(seconds=4)
    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=rank, world_size=world, timeout=timeout)
    group = dist.new_group(ranks=list(range(world)), backend="gloo", timeout=timeout)
    ps = _parallel_state(group, world)

    from seam_harness import register_candidate

    from cacheon_subnet.slots import get_slot
    from seams.adapters import collective
    from seams.dispatch import REGISTRY, SeamError
    from seams.receipts import Receipts
    from seams.stock import stock_kernel

    collective.all_reduce_hooks()
    collective.ar_rmsnorm_hooks()
    collective.DEVICES = ("cpu",)
    ar, fused = get_slot("collective.all_reduce"), get_slot("collective.ar_residual_rmsnorm")
    REGISTRY.receipts = Receipts(None, "scheduler", rank)
    REGISTRY.strict = True
    register_candidate(ar, _load(EXAMPLES / "collective.all_reduce" / "allreduce.py", "all_reduce"), REGISTRY)
    register_candidate(
        fused, _load(EXAMPLES / "collective.ar_residual_rmsnorm" / "ar_rmsnorm.py", "ar_residual_rmsnorm"), REGISTRY
    )
    REGISTRY.enabled = True
    original_calls: list[str] = []

    def original(*args: object, **kwargs: object) -> None:
        original_calls.append("called")
        raise AssertionError("SGLang's original must not run for an eligible collective")

    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(5, 64, generator=g).to(torch.bfloat16)
    residual = torch.randn(5, 64, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)  # replicated
    weight = (1 + 0.1 * torch.randn(64, generator=torch.Generator().manual_seed(8))).to(torch.bfloat16)
    saved = {"x": x.clone(), "residual": residual.clone(), "weight": weight.clone()}
    saved["out"] = collective._all_reduce_around(original, ps._coord, x)
    saved["norm_out"], saved["residual_out"] = collective._ar_rmsnorm_around(
        original, input_tensor=x, residual=residual, weight=weight, eps=1e-6, max_token_num=2048, use_attn_tp_group=True
    )
    saved["x_after"] = x
    counts = {s: dict(REGISTRY.receipts.counts[s]) for s in (ar.id, fused.id)}

    # serving mode: a failing candidate on rank 1; stock_kernel has nothing for collectives
    REGISTRY.strict = False
    assert stock_kernel(ar.id)[0] is None
    good = _load(EXAMPLES / "collective.all_reduce" / "allreduce.py", "all_reduce")

    def flaky(x: torch.Tensor, out: torch.Tensor, group: object) -> None:
        if dist.get_rank(group) == 1:
            raise RuntimeError("rank 1 candidate failure")
        good(x=x, out=out, group=group)

    REGISTRY.candidates[ar.id] = []
    register_candidate(ar, flaky, REGISTRY, stock=stock_kernel(ar.id)[0], variant="flaky")
    try:
        collective._all_reduce_around(original, ps._coord, x)
        raised = ""
    except SeamError as e:
        raised = f"SeamError: {e}"
    saved["meta"] = {"counts": counts, "original_calls": len(original_calls), "raised": raised}
    torch.save(saved, out / f"rank{rank}.pt")
    print("RESULT ok", flush=True)
    os._exit(0)  # the group may be broken after scenario 2: skip teardown


if __name__ == "__main__":
    sys.exit(main())
