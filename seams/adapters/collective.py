"""Collective chokepoints: `GroupCoordinator.all_reduce` (parallel_state.py:573) ->
collective.all_reduce; `flashinfer_allreduce_residual_rmsnorm` (flashinfer_comm_fusion.py:614)
-> collective.ar_residual_rmsnorm. The candidate gets `group=` the GroupCoordinator's
`device_group`; across the custom op it travels as `sglang/<unique_name>` and is resolved back
through SGLang's own group registry (`parallel_state._groups`), as `inplace_all_reduce` does.

All-or-none. A collective completes only when every rank of the group enters the same one, so
every rank of a group must take the same route for the same call:
- eligibility depends only on what all ranks of the group see alike (world size, shape, dtype,
  contiguity, device kind, token count, group configuration), never on rank-local state;
- once routed, a failure on any rank raises (`SeamError` from the custom-op body, or whatever
  the candidate raised); this module never calls the original after routing. Falling back on
  one rank would leave its peers inside the candidate's collective (a hang, or a silently wrong
  pairing). This holds in serving mode too: seams/stock has no stock binding for a collective
  slot, so `guarded` has no fallback to take and is strict for collectives regardless of
  CACHEON_SEAM_STRICT;
- activation must be all-or-none across ranks as well: a rank whose activation failed would run
  stock collectives against candidate ones (requirement on activate.py: failing to activate a
  collective binding stops the engine even with CACHEON_SEAM_STRICT=0).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.groups import register_resolver
from seams.dispatch import run

PREFIX = "sglang/"
DEVICES = ("cuda",)  # CPU tensors take SGLang's shm / gloo path; tests widen this to run on CPU
_state: dict[str, Any] = {}  # parallel_state module, resolved once at install (never while Dynamo traces)


def _resolve(unique_name: str) -> Any:
    ps = _state.get("ps")
    ref = ps._groups.get(unique_name) if ps is not None else None
    coord = ref() if ref is not None else None
    return getattr(coord, "device_group", None)


def _verified(slot_id: str, coord: Any) -> bool:
    """Only groups of a world size verify checked (the slot's `world_sizes`): a kernel exact at 2
    ranks may sum pairs, or hang, at 4. The size is the group's, so every rank decides alike."""
    return getattr(coord, "world_size", 1) in get_slot(slot_id).world_sizes


def _plain(x: Any) -> bool:
    return x.device.type in DEVICES and x.dim() == 2 and x.numel() > 0 and x.is_contiguous()


def _stock_only(coord: Any) -> bool:
    """Group configurations SGLang routes to other hardware paths (or symmetric memory) stay stock."""
    for attr in ("hpu_communicator", "xpu_communicator", "npu_communicator"):
        comm = getattr(coord, attr, None)
        if comm is not None and not getattr(comm, "disabled", True):
            return True
    symm = getattr(coord, "is_symmetric_memory_enabled", None)
    return getattr(coord, "pynccl_comm", None) is not None and callable(symm) and bool(symm())


def _all_reduce_around(original: Callable[..., Any], self: Any, input_: Any) -> Any:
    if _verified("collective.all_reduce", self) and _plain(input_) and not _stock_only(self):
        got = run("collective.all_reduce", {"x": input_}, {"group": PREFIX + self.unique_name})
        if got is not None:
            return got["out"]  # SGLang's contract: use the returned tensor (out-of-place paths exist)
    return original(self, input_)


def _fusion_group(use_attn_tp_group: bool) -> Any:
    """The group the stock op reduces over (flashinfer_comm_fusion.py:648-657)."""
    ps = _state.get("ps")
    if ps is None:
        return None
    if use_attn_tp_group:
        return ps.get_attn_tp_group()
    return ps.get_moe_ep_group() if ps.get_moe_expert_parallel_world_size() > 1 else ps.get_moe_tp_group()


def _ar_rmsnorm_around(
    original: Callable[..., Any],
    input_tensor: Any,
    residual: Any,
    weight: Any,
    eps: float = 1e-6,
    max_token_num: int = 2048,
    use_oneshot: Any = None,
    trigger_completion_at_end: bool = False,
    fp32_acc: bool = False,
    use_attn_tp_group: bool = True,
) -> Any:
    coord = _fusion_group(bool(use_attn_tp_group))
    if (
        coord is not None
        and _verified("collective.ar_residual_rmsnorm", coord)
        and _plain(input_tensor)
        and input_tensor.shape[0] <= max_token_num
        and residual.is_contiguous()
        and weight.is_contiguous()
    ):
        got = run(
            "collective.ar_residual_rmsnorm",
            {"x": input_tensor, "residual": residual, "weight": weight},
            {"eps": float(eps), "group": PREFIX + coord.unique_name},
        )
        if got is not None:
            return got["norm_out"], got["residual_out"]
    return original(
        input_tensor,
        residual,
        weight,
        eps=eps,
        max_token_num=max_token_num,
        use_oneshot=use_oneshot,
        trigger_completion_at_end=trigger_completion_at_end,
        fp32_acc=fp32_acc,
        use_attn_tp_group=use_attn_tp_group,
    )


def _install() -> None:
    try:
        _state["ps"] = importlib.import_module("sglang.srt.distributed.parallel_state")
    except ImportError:
        _state["ps"] = None  # no SGLang here: every call stays stock (same outcome on every rank)
    register_resolver(PREFIX, _resolve)


def all_reduce_hooks() -> dict[str, Callable[..., Any]]:
    _install()
    return {"sglang.srt.distributed.parallel_state:GroupCoordinator.all_reduce": _all_reduce_around}


def ar_rmsnorm_hooks() -> dict[str, Callable[..., Any]]:
    _install()
    return {"sglang.srt.layers.flashinfer_comm_fusion:flashinfer_allreduce_residual_rmsnorm": _ar_rmsnorm_around}
