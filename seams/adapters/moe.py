"""MoE chokepoints: sgl_kernel.topk_softmax -> moe.topk_softmax; Triton fused_experts ->
moe.fused_experts (unquantised, bias-free, gated silu, router weights after GEMM2, combined)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seams.dispatch import run


def _topk_around(
    original: Callable[..., Any],
    topk_weights: Any,
    topk_ids: Any,
    gating_output: Any,
    renormalize: bool = False,
    moe_softcapping: float = 0.0,
    correction_bias: Any = None,
) -> Any:
    if not moe_softcapping and correction_bias is None:
        got = run(
            "moe.topk_softmax",
            {"gating_output": gating_output, "topk_weights": topk_weights, "topk_ids": topk_ids},
            {"renormalize": bool(renormalize), "topk": int(topk_ids.shape[1])},
        )
        if got is not None:
            return None
    return original(topk_weights, topk_ids, gating_output, renormalize, moe_softcapping, correction_bias)


_QUANT_FLAGS = ("use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "per_channel_quant")
_EXTRAS = ("b1", "b2", "w1_scale", "w2_scale", "w1_zp", "w2_zp", "a1_scale", "a2_scale", "block_shape")


def _plain_config(cfg: Any) -> bool:
    return (
        getattr(cfg, "activation", "silu") == "silu"
        and getattr(cfg, "is_gated", True)
        and not getattr(cfg, "apply_router_weight_on_input", False)
        and getattr(cfg, "routed_scaling_factor", None) in (None, 1.0)
        and getattr(cfg, "gemm1_alpha", None) is None
        and getattr(cfg, "gemm1_clamp_limit", None) is None
        and getattr(cfg, "swiglu_limit", None) is None
        and not getattr(cfg, "no_combine", False)
        and (
            getattr(cfg, "num_experts", None) is None
            or getattr(cfg, "num_experts", None) == getattr(cfg, "num_local_experts", None)
        )
    )


def _experts_around(
    original: Callable[..., Any], hidden_states: Any, w1: Any, w2: Any, topk_output: Any, moe_runner_config: Any, **kw: Any
) -> Any:
    plain = not any(kw.get(f) for f in _QUANT_FLAGS) and all(kw.get(e) is None for e in _EXTRAS)
    if plain and _plain_config(moe_runner_config):
        topk_weights, topk_ids = topk_output[0], topk_output[1]
        got = run(
            "moe.fused_experts",
            {"hidden_states": hidden_states, "w13": w1, "w2": w2, "topk_weights": topk_weights, "topk_ids": topk_ids},
            {},
        )
        if got is not None:
            if getattr(moe_runner_config, "inplace", False):
                hidden_states.copy_(got["out"])
                return hidden_states
            return got["out"]
    return original(hidden_states, w1, w2, topk_output, moe_runner_config, **kw)


def topk_hooks() -> dict[str, Callable[..., Any]]:
    return {"sgl_kernel.moe:topk_softmax": _topk_around}


def experts_hooks() -> dict[str, Callable[..., Any]]:
    return {"sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe:fused_experts": _experts_around}
