"""Gated-MLP activation chokepoint (SGLang 0.5.13.post1 `SiluAndMul.forward_cuda`, activation.py:98).

On CUDA the dense MLP (Qwen2MLP/Qwen3MLP/LlamaMLP) turns the gate_up projection [T, 2*D] into
[T, D] with `sglang.jit_kernel.activation.silu_and_mul(x, out)`: gate = x[:, :D], up = x[:, D:],
out = silu(gate) * up, evaluated in fp32 and rounded once into the activation dtype
(`forward_native` computes the same product, but in the activation dtype).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cacheon_subnet.slots import gen, profiles
from cacheon_subnet.slots.spec import ArgSpec, ShapeCase, SlotSpec, case

if TYPE_CHECKING:  # torch is imported by the functions that make or read tensors: loading the catalog needs none
    import torch

ACT_DTYPES = ("bfloat16", "float16", "float32")


def _cases(tier: str) -> list[ShapeCase]:
    """Dense MLP widths (per-rank intermediate size at TP=1) x the tier's token counts."""
    out = []
    for name in profiles.DENSE:
        p = profiles.get(name)
        for label, tokens in profiles.token_counts(tier):
            out.append(case(f"{name}/{label}", name, {"T": tokens, "D": p.intermediate}))
    return out


def _reference(t: Mapping[str, torch.Tensor], p: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    import torch

    x = t["x"].to(torch.float32)
    d = x.shape[-1] // 2
    return {"out": torch.nn.functional.silu(x[:, :d]) * x[:, d:]}


def _inputs(c: ShapeCase, dt: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    """gate_up projection output: gate and up halves drawn separately (gate a little wider, so
    silu sees both its saturated tails), each with the heavy outlier channels of real MLPs."""
    import torch

    T, D = c.dims["T"], c.dims["D"]
    gate = gen.hidden_states((T, D), dt, g, scale=1.5)
    up = gen.hidden_states((T, D), dt, g, scale=1.0)
    return {"x": torch.cat((gate, up), dim=-1)}


def _flops(c: ShapeCase) -> int:
    # exp, add, divide (or reciprocal-multiply), multiply by gate, multiply by up.
    return 5 * c.dims["T"] * c.dims["D"]


SILU_AND_MUL = SlotSpec(
    id="activation.silu_and_mul",
    version=1,
    summary="out = silu(x[:, :D]) * x[:, D:] (fp32 math, one rounding into x.dtype)",
    args=(
        ArgSpec("x", "in", "act", ("T", "2*D"), graph_dynamic=True, doc="gate_up projection: [gate | up]"),
        ArgSpec("out", "out", "act", ("T", "D"), doc="activated MLP hidden states"),
    ),
    params=(),
    dtypes=ACT_DTYPES,
    reference=_reference,
    make_inputs=_inputs,
    cases=_cases,
    sglang_target="sglang.srt.layers.activation.SiluAndMul.forward_cuda -> sglang.jit_kernel.activation.silu_and_mul",
    flops=_flops,
)

SLOTS = (SILU_AND_MUL,)
