"""A stand-in SGLang 0.5.13.post1 runtime for the seam role tests (fresh interpreters): the sources
of only what the seam touches, as module name -> text (runtime_sources) or written out as files
(write_runtime). Split from seam_harness.py, which re-exports both."""

from __future__ import annotations

from pathlib import Path

from standin_collective import FLASHINFER_COMM_FUSION, PARALLEL_STATE

# ---- stand-in SGLang runtime for role tests (fresh interpreters) ------------------------------
# Only what the seam touches, shaped like 0.5.13.post1: the released HookRegistry (AROUND +
# propagation of by-value bindings, failures logged and swallowed), load_plugins, a Scheduler
# with the real __init__ signature that builds its "model" inside __init__ (layers bind
# forward_cuda at construction like MultiPlatformOp), and every adapter's patch point with the
# consumers that call it. Stock bodies compute the slot reference and log to sglang._calls.CALLS.
HOOK_REGISTRY = '''"""Minimal stand-in for sglang/srt/plugins/hook_registry.py (0.5.13.post1)."""
import enum
import functools
import logging
import pkgutil
import sys
import types
from collections import defaultdict

logger = logging.getLogger(__name__)


class HookType(enum.Enum):
    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


class HookRegistry:
    _hooks = defaultdict(list)
    _patched = set()

    @classmethod
    def register(cls, target, hook, hook_type=HookType.AFTER, *, source=None):
        cls._hooks[target].append((hook_type, hook, source))

    @classmethod
    def apply_hooks(cls):
        for target, hooks in sorted(cls._hooks.items()):
            if target in cls._patched:
                continue
            try:
                cls._apply_target(target, hooks)
                cls._patched.add(target)
            except Exception:
                logger.exception("Failed to apply hooks to %s", target)

    @classmethod
    def _apply_target(cls, target, hooks):
        obj_path, attr_name = target.rsplit(".", 1)
        obj = pkgutil.resolve_name(obj_path)
        original = getattr(obj, attr_name)
        wrapped = original
        for hook_type, hook, _src in hooks:
            if hook_type is not HookType.AROUND:
                raise NotImplementedError(hook_type)
            wrapped = _wrap_around(wrapped, hook)
        setattr(obj, attr_name, wrapped)
        if wrapped is not original:
            _propagate_patch(original, wrapped, obj)


def _propagate_patch(original, wrapped, source_module):
    n = 0
    for mod in list(sys.modules.values()):
        if mod is source_module or not isinstance(mod, types.ModuleType):
            continue
        for name, value in list(vars(mod).items()):
            if value is original:
                setattr(mod, name, wrapped)
                n += 1
    return n


def _wrap_around(original_fn, hook):
    @functools.wraps(original_fn)
    def wrapper(*args, **kwargs):
        return hook(original_fn, *args, **kwargs)

    wrapper.__wrapped__ = original_fn
    return wrapper
'''

PLUGINS = '''import os

from sglang.srt.plugins.hook_registry import HookRegistry, HookType

GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
_plugins_loaded = False


def _other_plugin():
    """Another installed plugin that hooks a target of its own choosing (test knob)."""
    target = os.environ.get("CACHEON_TEST_OTHER_PLUGIN_TARGET")
    if target:
        HookRegistry.register(target, lambda original, *a, **k: original(*a, **k), HookType.AROUND)


def load_plugins():
    """Idempotent per process; calls each plugin's load(), then applies hooks. (The real one finds
    plugins through importlib.metadata entry points of GENERAL_PLUGINS_GROUP; here the plugins
    are called directly.)"""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    _other_plugin()
    import seams.plugin

    seams.plugin.load()
    HookRegistry.apply_hooks()
'''

SCHEDULER = """from sglang.srt.plugins import load_plugins
# consumers holding by-value bindings, imported before hooks apply (propagation must fix them)
import sglang.srt.layers.moe.topk  # noqa: F401
import sglang.srt.layers.rotary_embedding.base  # noqa: F401


class Scheduler:
    def __init__(self, server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, attn_cp_rank,
                 moe_dp_rank, dp_rank):
        self.tp_rank = tp_rank
        self.model = _build_model(server_args)  # TpModelWorker builds the model inside __init__


def _build_model(server_args):
    import types

    from sglang.srt.layers.activation import SiluAndMul
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding

    h = server_args.get("hidden", 64)
    return types.SimpleNamespace(norm=RMSNorm(h), act=SiluAndMul(), rope=RotaryEmbedding(server_args["head_size"],
                                 server_args["cos_sin_cache"]), attn=TritonAttnBackend(server_args["max_kv_splits"]))


def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, attn_cp_rank, moe_dp_rank, moe_ep_rank,
                          pp_rank, dp_rank, pipe_writer):
    load_plugins()
    return Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, attn_cp_rank,
                     moe_dp_rank, dp_rank)
"""

MULTI_PLATFORM = """import torch


class MultiPlatformOp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._forward_method = self.forward_cuda  # bound once, at construction (multi_platform.py:38)

    def forward(self, *args, **kwargs):
        return self._forward_method(*args, **kwargs)
"""

STOCK = '''from cacheon_subnet.slots import get_slot
from sglang._calls import CALLS


def stock(name, slot_id, tensors, params):
    """Stock kernel stand-in: log the call, return the slot reference."""
    CALLS.append(name)
    return get_slot(slot_id).reference(tensors, params)
'''

LAYERNORM = """import torch

from sglang._stock import stock
from sglang.srt.layers.utils.multi_platform import MultiPlatformOp


class RMSNorm(MultiPlatformOp):
    def __init__(self, hidden_size, eps=1e-6, cast_x_before_out_mul=False):
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size).to(torch.bfloat16))
        self.variance_epsilon = eps
        self.variance_size_override = None
        self.cast_x_before_out_mul = cast_x_before_out_mul

    def forward_cuda(self, x, residual=None, post_residual_addition=None):
        if residual is not None:
            if post_residual_addition is not None:
                residual = residual + post_residual_addition
            r = stock("fused_add_rmsnorm", "norm.fused_add_rmsnorm",
                      {"x": x, "residual": residual, "weight": self.weight.data}, {"eps": self.variance_epsilon})
            x.copy_(r["x"])
            residual.copy_(r["residual"])
            return x, residual
        r = stock("rmsnorm", "norm.rmsnorm", {"x": x.reshape(-1, x.shape[-1]), "weight": self.weight.data},
                  {"eps": self.variance_epsilon})
        return r["out"].to(x.dtype).reshape(x.shape)
"""

ACTIVATION = """from sglang._stock import stock
from sglang.srt.layers.utils.multi_platform import MultiPlatformOp


class SiluAndMul(MultiPlatformOp):
    def forward_cuda(self, x):
        d = x.shape[-1] // 2
        r = stock("silu_and_mul", "activation.silu_and_mul", {"x": x.reshape(-1, 2 * d)}, {})
        return r["out"].to(x.dtype).reshape(*x.shape[:-1], d)
"""

JIT_ROPE = """from sglang._stock import stock


def apply_rope_with_cos_sin_cache_inplace(q, k, cos_sin_cache, positions, *, is_neox, rope_dim=0, fused_args=None):
    assert is_neox and fused_args is None, "stand-in covers NeoX without fused KV store only"
    r = stock("apply_rope", "rope.neox", {"positions": positions, "q": q, "k": k, "cos_sin_cache": cos_sin_cache}, {})
    q.copy_(r["q"])
    k.copy_(r["k"])
"""

ROPE_BASE = """from sglang.jit_kernel.rope import apply_rope_with_cos_sin_cache_inplace  # by value (base.py:38-39)
from sglang.srt.layers.utils.multi_platform import MultiPlatformOp


class RotaryEmbedding(MultiPlatformOp):
    def __init__(self, head_size, cos_sin_cache, is_neox_style=True):
        super().__init__()
        self.head_size = head_size
        self.cos_sin_cache = cos_sin_cache
        self.is_neox_style = is_neox_style

    def forward_cuda(self, positions, query, key, offsets=None, fused_set_kv_buffer_arg=None):
        batch_size = positions.size(0)
        q_rope = query.view(batch_size, -1, self.head_size)
        k_rope = key.view(batch_size, -1, self.head_size)
        apply_rope_with_cos_sin_cache_inplace(positions=positions, q=q_rope, k=k_rope, cos_sin_cache=self.cos_sin_cache,
                                              is_neox=self.is_neox_style, fused_args=fused_set_kv_buffer_arg)
        return query, key
"""

DECODE = """from sglang._stock import stock


def decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits,
                         max_kv_splits, sm_scale, k_scale, v_scale, logit_cap=0.0, sinks=None,
                         xai_temperature_len=-1, has_mla=False, use_pdl=False):
    b = q.shape[0]
    r = stock("decode_attention_fwd", "attention.decode",
              {"q": q, "k_buffer": k_buffer, "v_buffer": v_buffer, "kv_indptr": kv_indptr[: b + 1],
               "kv_indices": kv_indices}, {"sm_scale": sm_scale})
    o.copy_(r["o"])
"""

TRITON_BACKEND = """class TritonAttnBackend:
    def __init__(self, max_kv_splits):
        # lazy import, captured on the instance at construction (triton_backend.py:99-116)
        from sglang.srt.layers.attention.triton_ops.decode_attention import decode_attention_fwd

        self.decode_attention_fwd = decode_attention_fwd
        self.max_kv_splits = max_kv_splits

    def forward_decode(self, q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits,
                       scaling):
        self.decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse,
                                  num_kv_splits, self.max_kv_splits, scaling, 1.0, 1.0, logit_cap=0.0, sinks=None,
                                  xai_temperature_len=-1, has_mla=False, use_pdl=False)
        return o
"""

SGL_MOE = """from sglang._stock import stock


def topk_softmax(topk_weights, topk_ids, gating_output, renormalize=False, moe_softcapping=0.0, correction_bias=None):
    r = stock("topk_softmax", "moe.topk_softmax", {"gating_output": gating_output},
              {"renormalize": renormalize, "topk": topk_ids.shape[1]})
    topk_weights.copy_(r["topk_weights"])
    topk_ids.copy_(r["topk_ids"])
"""

TOPK = """import torch

from sgl_kernel import topk_softmax  # by value (topk.py:177)


def fused_topk(hidden_states, gating_output, topk, renormalize):
    M = hidden_states.shape[0]
    topk_weights = torch.empty(M, topk, dtype=torch.float32)
    topk_ids = torch.empty(M, topk, dtype=torch.int32)
    topk_softmax(topk_weights, topk_ids, gating_output, renormalize)
    return topk_weights, topk_ids
"""

FUSED_MOE = """from sglang._stock import stock


def fused_experts(hidden_states, w1, w2, topk_output, moe_runner_config, b1=None, b2=None, use_fp8_w8a8=False,
                  use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
                  w1_scale=None, w2_scale=None, w1_zp=None, w2_zp=None, a1_scale=None, a2_scale=None,
                  block_shape=None):
    topk_weights, topk_ids, _ = topk_output
    r = stock("fused_experts", "moe.fused_experts", {"hidden_states": hidden_states, "w13": w1, "w2": w2,
              "topk_weights": topk_weights, "topk_ids": topk_ids}, {})
    out = r["out"].to(hidden_states.dtype)
    if moe_runner_config.inplace:
        hidden_states.copy_(out)
        return hidden_states
    return out
"""

MOE_RUNNER_BASE = """from dataclasses import dataclass
from typing import Optional


@dataclass
class MoeRunnerConfig:
    num_experts: Optional[int] = None
    num_local_experts: Optional[int] = None
    top_k: Optional[int] = None
    activation: str = "silu"
    is_gated: bool = True
    apply_router_weight_on_input: bool = False
    inplace: bool = True
    no_combine: bool = False
    routed_scaling_factor: Optional[float] = None
    gemm1_alpha: Optional[float] = None
    gemm1_clamp_limit: Optional[float] = None
    swiglu_limit: Optional[float] = None
"""

MOE_TRITON = """def fused_experts_none_to_triton(hidden_states, w13, w2, topk_output, runner_config):
    # looked up at call time, all keywords (moe_runner/triton.py:139-160)
    from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe import fused_experts

    return fused_experts(hidden_states=hidden_states, w1=w13, w2=w2, topk_output=topk_output,
                         moe_runner_config=runner_config, b1=None, b2=None, use_fp8_w8a8=False, use_int8_w8a8=False,
                         use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False, w1_scale=None,
                         w2_scale=None, w1_zp=None, w2_zp=None, a1_scale=None, a2_scale=None, block_shape=None)
"""


def runtime_sources(version: str = "0.5.13.post1") -> dict[str, str]:
    return {
        "sglang": f"__version__ = {version!r}\n",
        "sglang._calls": "CALLS = []\n",
        "sglang._stock": STOCK,
        "sglang.srt.plugins": PLUGINS,
        "sglang.srt.plugins.hook_registry": HOOK_REGISTRY,
        "sglang.srt.managers.scheduler": SCHEDULER,
        "sglang.srt.layers.utils.multi_platform": MULTI_PLATFORM,
        "sglang.srt.layers.layernorm": LAYERNORM,
        "sglang.srt.layers.activation": ACTIVATION,
        "sglang.jit_kernel.rope": JIT_ROPE,
        "sglang.srt.layers.rotary_embedding.base": ROPE_BASE,
        "sglang.srt.layers.attention.triton_ops.decode_attention": DECODE,
        "sglang.srt.layers.attention.triton_backend": TRITON_BACKEND,
        "sgl_kernel": "from sgl_kernel.moe import topk_softmax  # noqa: F401\n",
        "sgl_kernel.moe": SGL_MOE,
        "sglang.srt.layers.moe.topk": TOPK,
        "sglang.srt.layers.moe.moe_runner.base": MOE_RUNNER_BASE,
        "sglang.srt.layers.moe.moe_runner.triton": MOE_TRITON,
        "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe": FUSED_MOE,
        "sglang.srt.distributed.parallel_state": PARALLEL_STATE,
        "sglang.srt.layers.flashinfer_comm_fusion": FLASHINFER_COMM_FUSION,
    }


def write_runtime(root: Path) -> Path:
    """Write the stand-in as files (fake_sglang.write: a module that prefixes another becomes a package)."""
    from fake_sglang import write

    return write(root, runtime_sources())
