"""Rotary position embedding chokepoint (SGLang 0.5.13.post1 `RotaryEmbedding.forward_cuda`,
rotary_embedding/base.py:340 -> `sglang.jit_kernel.rope.apply_rope_with_cos_sin_cache_inplace`).

NeoX style with rotary_dim == head_size (Qwen3, Llama): for every token t and head h, with
c, s = cos_sin_cache[positions[t]] split in halves and x1, x2 the two halves of the head,
  x1 <- x1*c - x2*s,  x2 <- x2*c + x1*s   (fp32 math, in place on q and k).
q and k are views into the packed qkv projection output (`qkv.split([q, kv, kv], -1)`), so
their token stride is (HQ + 2*HK) * D, not HQ * D; a kernel must honour the strides and must
not touch the v part of the buffer.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cacheon_subnet.slots import gen, profiles
from cacheon_subnet.slots.spec import ArgSpec, ShapeCase, SlotSpec, case

if TYPE_CHECKING:  # torch is imported by the functions that make or read tensors: loading the catalog needs none
    import torch

ACT_DTYPES = ("bfloat16", "float16", "float32")
VERIFY_CACHE_LEN = 4096  # the CPU tier keeps the cos/sin table small; GPU tiers use max_position


def _cases(tier: str) -> list[ShapeCase]:
    """Attention geometry of each profile (TP=1) x the tier's token counts."""
    out = []
    for name in profiles.DENSE + profiles.MOE[:1]:
        p = profiles.get(name)
        P = min(p.max_position, VERIFY_CACHE_LEN) if tier == "verify" else p.max_position
        dims = {"T": 0, "HQ": p.n_heads, "HK": p.n_kv_heads, "D": p.head_dim, "P": P}
        for label, tokens in profiles.token_counts(tier):
            out.append(case(f"{name}/{label}", name, {**dims, "T": tokens}))
    return out


@lru_cache(maxsize=8)
def _cos_sin_table(P: int, D: int, theta: float) -> torch.Tensor:
    """[P, D] fp32: cos of every (position, frequency) in the first D/2 columns, sin in the rest;
    frequencies theta^(-2i/D), built the way `_compute_cos_sin_cache` builds SGLang's buffer.
    Always on the host (the cache outlives a `with torch.device(...)` that bench draws inputs in)."""
    import torch

    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32, device="cpu") / D))
    freqs = torch.outer(torch.arange(P, dtype=torch.float32, device="cpu"), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def cos_sin_cache(P: int, D: int, theta: float) -> torch.Tensor:
    return _cos_sin_table(P, D, float(theta)).clone()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    import torch

    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _reference(t: Mapping[str, torch.Tensor], p: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    import torch

    cs = t["cos_sin_cache"].to(torch.float32)[t["positions"].long()]  # [T, D]
    h = cs.shape[-1] // 2
    cos, sin = cs[:, None, :h], cs[:, None, h:]
    return {"q": _rotate(t["q"].to(torch.float32), cos, sin), "k": _rotate(t["k"].to(torch.float32), cos, sin)}


def _inputs(c: ShapeCase, dt: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    """q and k as SGLang hands them over: views into one packed [T, (HQ+2*HK)*D] qkv buffer
    (post QK-norm scale, with outlier channels); positions anywhere in the cache."""
    import torch

    T, HQ, HK, D, P = (c.dims[k] for k in ("T", "HQ", "HK", "D", "P"))
    qkv = gen.hidden_states((T, (HQ + 2 * HK) * D), dt, g)
    q = qkv[:, : HQ * D].view(T, HQ, D)
    k = qkv[:, HQ * D : (HQ + HK) * D].view(T, HK, D)
    positions = torch.randint(0, P, (T,), generator=g, dtype=torch.int64)
    theta = c.constants["rope_theta"] if "rope_theta" in c.constants else profiles.get(c.profile).rope_theta
    return {"positions": positions, "q": q, "k": k, "cos_sin_cache": cos_sin_cache(P, D, theta)}


def _bytes(c: ShapeCase, act: torch.dtype) -> int:
    """q/k read and written once, positions once, one cos/sin row per token (not the table)."""
    import torch

    T, HQ, HK, D = (c.dims[k] for k in ("T", "HQ", "HK", "D"))
    size = torch.empty((), dtype=act).element_size()
    return 2 * T * (HQ + HK) * D * size + T * 8 + T * D * 4


def _flops(c: ShapeCase) -> int:
    # Per rotated pair: 4 multiplies + 2 adds.
    return 3 * c.dims["T"] * (c.dims["HQ"] + c.dims["HK"]) * c.dims["D"]


ROPE_NEOX = SlotSpec(
    id="rope.neox",
    version=1,
    summary="in place NeoX RoPE on q/k views: halves (x1, x2) <- (x1*cos - x2*sin, x2*cos + x1*sin)",
    args=(
        ArgSpec("positions", "in", "int64", ("T",), graph_dynamic=True, doc="position of each token"),
        ArgSpec(
            "q",
            "inout",
            "act",
            ("T", "HQ", "D"),
            layout="rows",
            graph_dynamic=True,
            doc="query heads, a view into the packed qkv buffer",
        ),
        ArgSpec(
            "k",
            "inout",
            "act",
            ("T", "HK", "D"),
            layout="rows",
            graph_dynamic=True,
            doc="key heads, a view into the same qkv buffer",
        ),
        ArgSpec("cos_sin_cache", "in", "float32", ("P", "D"), doc="[cos | sin] per position, fp32"),
    ),
    params=(),
    dtypes=ACT_DTYPES,
    reference=_reference,
    make_inputs=_inputs,
    cases=_cases,
    sglang_target=(
        "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.forward_cuda"
        " -> sglang.jit_kernel.rope.apply_rope_with_cos_sin_cache_inplace(is_neox=True)"
    ),
    bytes_moved=_bytes,
    flops=_flops,
)

SLOTS = (ROPE_NEOX,)
