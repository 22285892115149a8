"""SEAM_ADAPTERS: the single table every seam concern derives from.

Installation (which adapters exist and what they patch), activation (the closed vocabulary of
binding ids and their fixed env gates) and the compat canary (symbols and signatures that
must exist in the pinned SGLang) all read this table. Adding an adapter = one row here + its
module in seams/adapters/ + tests.

Each row names the *defining* symbol (what the canary checks) and the *patch points* (where the
adapter rebinds: the defining symbol or a consumer's by-value import, see
sglang_chokepoints.md §12 on by-value bindings and construction-time capture).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cacheon_subnet.env import SEAM_GATE
from cacheon_subnet.pins import SGLANG_PIN


@dataclass(frozen=True)
class SeamAdapter:
    binding: str  # public binding id (closed vocabulary)
    slots: tuple[str, ...]  # slot ids this adapter can route
    module: str  # defining module of the chokepoint in the pinned SGLang
    symbol: str  # "Class.method" or "function" inside `module`
    params: tuple[str, ...]  # expected parameter names, in order (the canary's signature check)
    patch_points: tuple[str, ...]  # "module:attr" / "module:Class.method" hooked (AROUND) by the adapter
    install: str  # "seams.adapters.x:hooks" -> {patch point: around(original, *args, **kwargs)}
    requires: tuple[str, ...] = ("sglang",)  # packages needed to assess / install
    reason: str = ""  # why this chokepoint (shown by `cacheon compat`)

    @property
    def env_gate(self) -> str:
        """Fixed gate per binding: the host sets exactly the gates of the bindings it selects."""
        return SEAM_GATE.of(self.binding)

    @property
    def target(self) -> str:
        return f"{self.module}:{self.symbol}"


SEAM_ADAPTERS: tuple[SeamAdapter, ...] = (
    SeamAdapter(
        binding="norm",
        slots=("norm.rmsnorm", "norm.fused_add_rmsnorm"),
        module="sglang.srt.layers.layernorm",
        symbol="RMSNorm.forward_cuda",
        params=("self", "x", "residual", "post_residual_addition"),
        patch_points=("sglang.srt.layers.layernorm:RMSNorm.forward_cuda",),
        install="seams.adapters.norm:hooks",
        reason="every decoder layer: input/post-attention norms and the final norm (layernorm.py:248)",
    ),
    SeamAdapter(
        binding="activation",
        slots=("activation.silu_and_mul",),
        module="sglang.srt.layers.activation",
        symbol="SiluAndMul.forward_cuda",
        params=("self", "x"),
        patch_points=("sglang.srt.layers.activation:SiluAndMul.forward_cuda",),
        install="seams.adapters.activation:hooks",
        reason="dense MLP gate*up activation (activation.py:98)",
    ),
    SeamAdapter(
        binding="rope",
        slots=("rope.neox",),
        module="sglang.jit_kernel.rope",
        symbol="apply_rope_with_cos_sin_cache_inplace",
        params=("q", "k", "cos_sin_cache", "positions", "is_neox", "rope_dim", "fused_args"),
        patch_points=("sglang.jit_kernel.rope:apply_rope_with_cos_sin_cache_inplace",),
        install="seams.adapters.rope:hooks",
        reason="JIT rope entry; bound by value in rotary_embedding/base.py:38 (HookRegistry propagation "
        "rebinds it there), called by RotaryEmbedding.forward_cuda (base.py:348-362)",
    ),
    SeamAdapter(
        binding="attention",
        slots=("attention.decode",),
        module="sglang.srt.layers.attention.triton_ops.decode_attention",
        symbol="decode_attention_fwd",
        params=(
            "q",
            "k_buffer",
            "v_buffer",
            "o",
            "kv_indptr",
            "kv_indices",
            "attn_logits",
            "attn_lse",
            "num_kv_splits",
            "max_kv_splits",
            "sm_scale",
            "k_scale",
            "v_scale",
            "logit_cap",
            "sinks",
            "xai_temperature_len",
            "has_mla",
            "use_pdl",
        ),
        patch_points=("sglang.srt.layers.attention.triton_ops.decode_attention:decode_attention_fwd",),
        install="seams.adapters.attention:hooks",
        reason="triton backend decode; imported lazily by TritonAttnBackend.__init__ (triton_backend.py:99-116)",
    ),
    SeamAdapter(
        binding="moe_topk",
        slots=("moe.topk_softmax",),
        module="sgl_kernel.moe",
        symbol="topk_softmax",
        params=("topk_weights", "topk_ids", "gating_output", "renormalize", "moe_softcapping", "correction_bias"),
        patch_points=("sgl_kernel.moe:topk_softmax",),
        install="seams.adapters.moe:topk_hooks",
        requires=("sglang", "sgl_kernel"),
        reason="router top-k; bound by value in moe/topk.py:177 (rebound by propagation), called from fused_topk",
    ),
    SeamAdapter(
        binding="moe_experts",
        slots=("moe.fused_experts",),
        module="sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe",
        symbol="fused_experts",
        params=(
            "hidden_states",
            "w1",
            "w2",
            "topk_output",
            "moe_runner_config",
            "b1",
            "b2",
            "use_fp8_w8a8",
            "use_int8_w8a8",
            "use_int8_w8a16",
            "use_int4_w4a16",
            "per_channel_quant",
            "w1_scale",
            "w2_scale",
            "w1_zp",
            "w2_zp",
            "a1_scale",
            "a2_scale",
            "block_shape",
        ),
        patch_points=("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe:fused_experts",),
        install="seams.adapters.moe:experts_hooks",
        reason="unquantised Triton MoE; looked up at call time by fused_experts_none_to_triton (triton.py:139-150)",
    ),
    # Collectives: all-or-none across the ranks of a group, strict even in serving mode
    # (seams/adapters/collective.py says why and how).
    SeamAdapter(
        binding="collective_all_reduce",
        slots=("collective.all_reduce",),
        module="sglang.srt.distributed.parallel_state",
        symbol="GroupCoordinator.all_reduce",
        params=("self", "input_"),
        patch_points=("sglang.srt.distributed.parallel_state:GroupCoordinator.all_reduce",),
        install="seams.adapters.collective:all_reduce_hooks",
        reason="every TP all-reduce (row-parallel outputs, vocab-parallel embedding) via "
        "tensor_model_parallel_all_reduce (communication_op.py:18) -> parallel_state.py:573",
    ),
    SeamAdapter(
        binding="collective_ar_rmsnorm",
        slots=("collective.ar_residual_rmsnorm",),
        module="sglang.srt.layers.flashinfer_comm_fusion",
        symbol="flashinfer_allreduce_residual_rmsnorm",
        params=(
            "input_tensor",
            "residual",
            "weight",
            "eps",
            "max_token_num",
            "use_oneshot",
            "trigger_completion_at_end",
            "fp32_acc",
            "use_attn_tp_group",
        ),
        patch_points=("sglang.srt.layers.flashinfer_comm_fusion:flashinfer_allreduce_residual_rmsnorm",),
        install="seams.adapters.collective:ar_rmsnorm_hooks",
        reason="fused AR+residual+RMSNorm (flashinfer_comm_fusion.py:614); imported at call time by "
        "_forward_with_allreduce_fusion (layernorm.py:157-188) when the flashinfer fusion is on",
    ),
)

# Entry points the seam relies on (released plugin interface + the one internal hook).
PLUGIN_GROUP = "sglang.srt.plugins"
HOOK_TARGETS: Mapping[str, str] = MappingProxyType(
    {
        "sglang.srt.plugins.hook_registry:HookRegistry.register": "released hook registry used to install the scheduler gate",
        "sglang.srt.managers.scheduler:Scheduler.__init__": "internal: AROUND hook = positive scheduler-rank identification; "
        "the model is built inside it, after plugins load (no released per-role callback exists in 0.5.13.post1)",
    }
)

BINDINGS: tuple[str, ...] = tuple(sorted({a.binding for a in SEAM_ADAPTERS}))
PINNED = SGLANG_PIN


def adapters_for_slot(slot_id: str) -> tuple[SeamAdapter, ...]:
    return tuple(a for a in SEAM_ADAPTERS if slot_id in a.slots)


def by_binding(binding: str) -> SeamAdapter:
    for a in SEAM_ADAPTERS:
        if a.binding == binding:
            return a
    raise KeyError(f"unknown seam binding {binding!r} (known: {', '.join(BINDINGS)})")


def normalize_bindings(requested: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Closed vocabulary: reject unknown, duplicated or non-canonical ids; return sorted."""
    seen: set[str] = set()
    for b in requested:
        if b != b.strip().lower():
            raise ValueError(f"binding {b!r} is not canonical (lowercase, no spaces)")
        if b not in BINDINGS:
            raise ValueError(f"unknown seam binding {b!r} (known: {', '.join(BINDINGS)})")
        if b in seen:
            raise ValueError(f"binding {b!r} requested twice")
        seen.add(b)
    return tuple(sorted(seen))


def local_bindings() -> tuple[str, ...]:
    """Every adapter that acts at tp_size 1 (collective adapters pass through there): what a
    resident timed engine arms, so one engine serves every local slot's contributions."""
    from cacheon_subnet.slots import get_slot

    return tuple(sorted({a.binding for a in SEAM_ADAPTERS if not any(get_slot(s).collective for s in a.slots)}))


def seam_environment(selected: tuple[str, ...]) -> dict[str, str]:
    """The complete, fixed gate environment for a launch: every gate set to 0 or 1, so stale
    ambient values can never arm an adapter the host did not select."""
    chosen = set(normalize_bindings(list(selected)))
    return {a.env_gate: "1" if a.binding in chosen else "0" for a in SEAM_ADAPTERS}
