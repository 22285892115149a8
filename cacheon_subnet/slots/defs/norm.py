"""RMSNorm chokepoints (SGLang 0.5.13.post1 `RMSNorm.forward_cuda`, layernorm.py:248).

- plain path: `rmsnorm(x, weight, eps)` -> out = x / sqrt(mean(x^2) + eps) * weight
- residual path: `fused_add_rmsnorm(x, residual, weight, eps)` in place:
  residual <- x + residual; x <- residual / rms(residual) * weight
  (the sum is normalised at fp32, before it is rounded into `residual`; forward_native agrees).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cacheon_subnet.slots import gen, profiles
from cacheon_subnet.slots.spec import ArgSpec, ParamSpec, ShapeCase, SlotSpec, case

if TYPE_CHECKING:  # torch is imported by the functions that make or read tensors: loading the catalog needs none
    import torch

ACT_DTYPES = ("bfloat16", "float16", "float32")
_EPS = ParamSpec("eps", "float", "variance epsilon (model rms_norm_eps)")


def _rms(x32: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    import torch

    var = x32.pow(2).mean(dim=-1, keepdim=True)
    return x32 * torch.rsqrt(var + eps) * w.to(torch.float32)


def _cases(tier: str) -> list[ShapeCase]:
    out = []
    for name in profiles.DENSE + profiles.MOE[:1]:
        p = profiles.get(name)
        for label, tokens in profiles.token_counts(tier):
            out.append(case(f"{name}/{label}", name, {"T": tokens, "H": p.hidden}, eps=p.rms_eps))
    return out


# ---- norm.rmsnorm -----------------------------------------------------------------------
def _rmsnorm_ref(t: Mapping[str, torch.Tensor], p: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    import torch

    return {"out": _rms(t["x"].to(torch.float32), t["weight"], float(p["eps"]))}


def _rmsnorm_inputs(c: ShapeCase, dt: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    T, H = c.dims["T"], c.dims["H"]
    return {"x": gen.hidden_states((T, H), dt, g), "weight": gen.norm_weight(H, dt, g)}


RMSNORM = SlotSpec(
    id="norm.rmsnorm",
    version=1,
    summary="out = x * rsqrt(mean(x^2, -1) + eps) * weight (fp32 math, cast to x.dtype)",
    args=(
        ArgSpec("x", "in", "act", ("T", "H"), graph_dynamic=True, doc="hidden states"),
        ArgSpec("weight", "in", "act", ("H",), doc="norm gain"),
        ArgSpec("out", "out", "act", ("T", "H"), doc="normalised states"),
    ),
    params=(_EPS,),
    dtypes=ACT_DTYPES,
    reference=_rmsnorm_ref,
    make_inputs=_rmsnorm_inputs,
    cases=_cases,
    sglang_target="sglang.srt.layers.layernorm.RMSNorm.forward_cuda -> sgl_kernel.rmsnorm",
)


# ---- norm.fused_add_rmsnorm -------------------------------------------------------------
def _fused_ref(t: Mapping[str, torch.Tensor], p: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    import torch

    s = t["x"].to(torch.float32) + t["residual"].to(torch.float32)
    return {"x": _rms(s, t["weight"], float(p["eps"])), "residual": s}


def _fused_inputs(c: ShapeCase, dt: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    T, H = c.dims["T"], c.dims["H"]
    return {
        "x": gen.hidden_states((T, H), dt, g, scale=0.5),
        "residual": gen.hidden_states((T, H), dt, g, scale=2.0),
        "weight": gen.norm_weight(H, dt, g),
    }


FUSED_ADD_RMSNORM = SlotSpec(
    id="norm.fused_add_rmsnorm",
    version=1,
    summary="in place: residual += x; x = residual * rsqrt(mean(residual^2) + eps) * weight",
    args=(
        ArgSpec("x", "inout", "act", ("T", "H"), graph_dynamic=True, doc="in: layer output; out: normalised"),
        ArgSpec("residual", "inout", "act", ("T", "H"), graph_dynamic=True, doc="in: residual; out: x + residual"),
        ArgSpec("weight", "in", "act", ("H",), doc="norm gain"),
    ),
    params=(_EPS,),
    dtypes=ACT_DTYPES,
    reference=_fused_ref,
    make_inputs=_fused_inputs,
    cases=_cases,
    sglang_target="sglang.srt.layers.layernorm.RMSNorm.forward_cuda(residual=...) -> sgl_kernel.fused_add_rmsnorm",
)

SLOTS = (RMSNORM, FUSED_ADD_RMSNORM)
