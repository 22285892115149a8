"""Stock MoE kernels of SGLang 0.5.13.post1 behind the slot calling convention.

moe.topk_softmax: `sgl_kernel.topk_softmax(topk_weights, topk_ids, gating_output, renormalize)`,
the exact call `fused_topk` makes for Qwen3-MoE (topk.py:759; moe_softcapping 0, no bias).

moe.fused_experts: `fused_experts_impl` of moe_runner/triton_utils/fused_moe.py, the body that
both registered ops (`inplace_fused_experts` on the model path, `outplace_fused_experts`) run:
moe_align_block_size, Triton fused_moe_kernel for w13, JIT silu_and_mul, fused_moe_kernel for
w2 with MUL_ROUTED_WEIGHT, then moe_sum_reduce (or the torch.compile'd sum for <= 32 tokens).
Assumptions, read off the source (not run here: no GPU):
- Qwen3-MoE builds FusedMoE with inplace=True (layer.py:172 default), so the model writes the
  result over hidden_states. The slot's hidden_states is read-only, so the binding copies it
  into `out` and runs in place on `out` (GEMM1 has read all of it before the combine writes):
  one extra T*H copy against the model path, negligible next to the expert weights.
- filter_expert=False: `fused_experts` sets it when num_experts == num_local_experts (no
  expert parallelism), the single-GPU case the slot describes.
- fused_experts_impl reads `get_global_server_args()` (enable_fused_moe_sum_all_reduce,
  enable_deterministic_inference). Inside a running engine those are set; standalone (bench),
  when unset, a stand-in holding ServerArgs' declared defaults is installed, which keeps the
  default path (no fused all-reduce sum, tuned configs from the shipped JSON files).
- Tile configs come from the same JSON lookup as in the engine (E, N=I, device name, dtype).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable


def _topk_softmax() -> Callable[..., None]:
    """sgl_kernel.topk_softmax (softmax + top-k + optional renormalise in one CUDA kernel)"""
    from sgl_kernel import topk_softmax

    def run(gating_output, topk_weights, topk_ids, renormalize, topk):  # noqa: ANN001
        topk_softmax(topk_weights, topk_ids, gating_output, renormalize)

    return run


def _ensure_server_args() -> None:
    """Install ServerArgs' declared defaults as the global server args if none are set."""
    from sglang.srt import server_args as sa

    try:
        sa.get_global_server_args()
        return
    except ValueError:
        pass
    defaults = {}
    for f in dataclasses.fields(sa.ServerArgs):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    sa.set_global_server_args_for_scheduler(types.SimpleNamespace(**defaults))


def _fused_experts() -> Callable[..., None]:
    """sglang fused_experts_impl, in place on a copy (Triton fused_moe_kernel x2 + silu_and_mul + moe_sum_reduce)"""
    _ensure_server_args()
    from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe import fused_experts_impl

    def run(hidden_states, w13, w2, topk_weights, topk_ids, out):  # noqa: ANN001
        out.copy_(hidden_states)
        fused_experts_impl(
            out, w13, w2, topk_weights, topk_ids, inplace=True, activation="silu", is_gated=True, filter_expert=False
        )

    return run


STOCK = {"moe.topk_softmax": _topk_softmax, "moe.fused_experts": _fused_experts}
