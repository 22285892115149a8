"""MoE chokepoints of the unquantised Qwen3-MoE path (SGLang 0.5.13.post1).

- routing: `TopK.forward_cuda` -> `select_experts` -> `fused_topk` (topk.py:710) ->
  `sgl_kernel.topk_softmax(topk_weights, topk_ids, gating_output, renormalize)`: softmax over
  experts in fp32, top-K, optional renormalisation (Qwen3: norm_topk_prob=True). Ids int32,
  weights fp32.
- experts: `fused_experts` (moe_runner/triton_utils/fused_moe.py:218) -> fused_experts_impl:
  GEMM1 with w13 [E, 2I, H] (gate rows, then up rows), silu(gate) * up, GEMM2 with w2 [E, H, I]
  scaled by the router weight, then the sum over the K picks of each token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cacheon_subnet.slots import fixture_draw, gen, profiles
from cacheon_subnet.slots.spec import ArgSpec, ParamSpec, ShapeCase, SlotSpec, Tolerance, case

if TYPE_CHECKING:  # torch is imported by the functions that make or read tensors: loading the catalog needs none
    import torch

MIN_GAP = 0.25  # logit gap between the K-th and (K+1)-th expert; >= 4 bf16 ulps below |16|
_LOGIT_CLAMP = 14.0  # keeps every shifted logit under 16, where a bf16 ulp is <= 1/16


# ---- routing inputs ---------------------------------------------------------------------
def router_logits(T: int, E: int, K: int, g: torch.Generator, cold: int = 0) -> torch.Tensor:
    """Router logits (fp32) that look like a trained gate: a per-expert bias (a few hot
    experts), per-token confidence, `cold` experts that never win, and a gap of at least
    MIN_GAP between the K-th and (K+1)-th logit so the chosen set survives bf16 rounding."""
    import torch

    perm = torch.randperm(E, generator=g)
    bias = 0.5 * torch.randn((E,), generator=g)
    bias[perm[: max(1, E // 8)]] += 1.5
    conf = 0.5 + torch.rand((T, 1), generator=g)
    x = (bias + conf * torch.randn((T, E), generator=g)).clamp(-_LOGIT_CLAMP, _LOGIT_CLAMP)
    if cold:
        x[:, perm[E - cold :]] = -_LOGIT_CLAMP
    top = x.topk(K + 1, dim=-1)
    need = (MIN_GAP - (top.values[:, K - 1] - top.values[:, K])).clamp(min=0.0)
    mask = torch.zeros_like(x).scatter_(1, top.indices[:, :K], 1.0)
    return x + mask * need[:, None]


def softmax_topk(logits: torch.Tensor, K: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 softmax over experts, top-K, optional renormalisation to sum 1."""
    import torch

    p = torch.softmax(logits.to(torch.float32), dim=-1)
    w, ids = p.topk(K, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def sort_by_expert(out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The order of the K picks is not semantic downstream: sort each row by expert id."""
    import torch

    ids = out["topk_ids"].to(torch.int64)
    order = ids.argsort(dim=-1, stable=True)
    return {"topk_ids": ids.gather(1, order).to(torch.int32), "topk_weights": out["topk_weights"].gather(1, order)}


def _moe(name: str) -> profiles.MoEProfile:
    """The MoE shapes of a profile named in profiles.MOE (a dense one has none: a ValueError)."""
    m = profiles.get(name).moe
    if m is None:
        raise ValueError(f"model profile {name!r} has no MoE shapes")
    return m


# ---- moe.topk_softmax -------------------------------------------------------------------
def _topk_cases(tier: str) -> list[ShapeCase]:
    out = []
    for name in profiles.MOE:
        m = _moe(name)
        for label, tokens in profiles.token_counts(tier):
            dims = {"T": tokens, "E": m.n_experts, "K": m.top_k}
            out.append(case(f"{name}/{label}", name, dims, renormalize=m.norm_topk_prob, topk=m.top_k))
    m = _moe("qwen3-moe-mini")  # keep the flag meaningful: one case without it
    tokens = profiles.token_counts(tier)[1][1]
    out.append(
        case(
            f"qwen3-moe-mini/no-renorm-{tokens}",
            "qwen3-moe-mini",
            {"T": tokens, "E": m.n_experts, "K": m.top_k},
            renormalize=False,
            topk=m.top_k,
        )
    )
    return out


def _topk_ref(t: Mapping[str, torch.Tensor], p: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    w, ids = softmax_topk(t["gating_output"], int(p["topk"]), bool(p["renormalize"]))
    return {"topk_weights": w, "topk_ids": ids}


def _topk_inputs(c: ShapeCase, dt: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    return {"gating_output": router_logits(c.dims["T"], c.dims["E"], c.dims["K"], g).to(dt)}


TOPK_SOFTMAX = SlotSpec(
    id="moe.topk_softmax",
    version=1,
    summary="softmax(gating_output) in fp32 over experts, top-K ids + weights, optional renormalise",
    args=(
        ArgSpec("gating_output", "in", "act", ("T", "E"), graph_dynamic=True, doc="router logits"),
        ArgSpec("topk_weights", "out", "float32", ("T", "K"), doc="routing weights of the picks"),
        ArgSpec("topk_ids", "out", "int32", ("T", "K"), doc="expert ids of the picks (any order)"),
    ),
    params=(
        ParamSpec("renormalize", "bool", "divide the K weights by their sum (Qwen3 norm_topk_prob)"),
        # The reference only sees inputs and params, never dims: K must travel as a param
        # (fused_topk's `topk`); it always equals topk_ids.shape[1].
        ParamSpec("topk", "int", "K, equal to topk_ids.shape[1]"),
    ),
    dtypes=("bfloat16", "float16", "float32"),
    reference=_topk_ref,
    make_inputs=_topk_inputs,
    cases=_topk_cases,
    sglang_target="sglang.srt.layers.moe.topk.fused_topk -> sgl_kernel.topk_softmax",
    # ids exact (inputs keep a MIN_GAP margin at the K-th pick); weights are fp32 softmax
    # values, where only exp/divide rounding differs (fast exp2 included): ~1e-6 relative.
    arg_tolerances={
        "topk_ids": Tolerance(exact=True),
        "topk_weights": Tolerance(atol=1e-6, rtol=1e-4, max_rel_l2=1e-5),
    },
    canonicalize=sort_by_expert,
)


# ---- moe.fused_experts ------------------------------------------------------------------
def _expert_cases(tier: str) -> list[ShapeCase]:
    def mk(name: str, label: str, tokens: int) -> ShapeCase:
        p, m = profiles.get(name), _moe(name)
        dims = {"T": tokens, "H": p.hidden, "I": m.moe_intermediate, "E": m.n_experts, "K": m.top_k}
        return case(f"{name}/{label}", name, dims)

    mini = [mk("qwen3-moe-mini", label, n) for label, n in profiles.token_counts(tier)]
    if tier == "verify":  # the 30B-A3B weights are ~1.2 GB: never on a CPU interpreter
        return mini
    if tier == "gpu":  # one 30B-A3B point (E=128, I=768, uneven expert load); each call ships 1.2 GB
        return mini + [mk("qwen3-30b-a3b", "prefill-512", 512)]
    return [mk("qwen3-30b-a3b", label, n) for label, n in profiles.token_counts(tier)] + mini


def _silu(x: torch.Tensor) -> torch.Tensor:
    import torch

    return x * torch.sigmoid(x)


def _experts_ref(t: Mapping[str, torch.Tensor], p: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    import torch

    x = t["hidden_states"].to(torch.float32)
    w13, w2 = t["w13"], t["w2"]
    ids = t["topk_ids"].to(torch.int64)
    wts = t["topk_weights"].to(torch.float32)
    I = w2.shape[2]
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():  # one GEMM pair per active expert
        tok, slot = (ids == e).nonzero(as_tuple=True)
        h = x[tok] @ w13[e].to(torch.float32).T
        y = (_silu(h[:, :I]) * h[:, I:]) @ w2[e].to(torch.float32).T
        out.index_add_(0, tok, y * wts[tok, slot, None])
    return {"out": out}


def _experts_inputs(c: ShapeCase, dt: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    T, H, I, E, K = (c.dims[k] for k in ("T", "H", "I", "E", "K"))
    cold = max(1, E // 8) if E - max(1, E // 8) > K else 0
    # an arena's recorded tokens-per-expert load (bench --arena with a fixture), else a trained-looking gate
    weights, ids = fixture_draw.routing(c.constants, T, E, K, g) or softmax_topk(
        router_logits(T, E, K, g, cold=cold), K, renormalize=True
    )
    return {
        "hidden_states": gen.hidden_states((T, H), dt, g),
        "w13": gen.weights((E, 2 * I, H), dt, g, fan_in=H),
        "w2": gen.weights((E, H, I), dt, g, fan_in=I),
        "topk_weights": weights.contiguous(),
        "topk_ids": ids.contiguous(),
    }


def active_experts(c: ShapeCase) -> float:
    """Expected distinct experts hit by T tokens picking K of E (uniform routing)."""
    T, E, K = c.dims["T"], c.dims["E"], c.dims["K"]
    return E * (1.0 - (1.0 - K / E) ** T)


def _experts_bytes(c: ShapeCase, dt: torch.dtype) -> int:
    import torch

    T, H, I, K = (c.dims[k] for k in ("T", "H", "I", "K"))
    elt = torch.empty((), dtype=dt).element_size()
    weights = active_experts(c) * 3 * I * H * elt
    return int(weights + 2 * T * H * elt + T * K * 8)


def _experts_flops(c: ShapeCase) -> int:
    T, H, I, K = (c.dims[k] for k in ("T", "H", "I", "K"))
    return 2 * T * K * (2 * I * H + I * H)


# Two chained GEMMs, and the stock kernel rounds to act dtype three times on the way (GEMM1
# output, silu*up, each routed GEMM2 output before the fp32 sum). Each rounding is an
# independent ~2^-9 (bf16) / 2^-12 (fp16) relative error that partly averages out over the
# I-long and K-long sums: measured rel-L2 of a bf16 emulation of the stock numerics against
# this fp32 reference is ~4e-3 (fp16 ~5e-4), and ~1e-4 of the bf16 elements fall outside the
# elementwise bound. So: elementwise bound on 99.9% of elements, rel-L2 ~2.5-4x the measured
# error (a wrong weight, a dropped expert or a skipped silu moves rel-L2 by >10%).
_EXPERT_TOL = {
    "bfloat16": Tolerance(atol=1e-2, rtol=2e-2, min_matched=0.999, max_rel_l2=1e-2),
    "float16": Tolerance(atol=2e-3, rtol=5e-3, min_matched=0.999, max_rel_l2=2e-3),
}

FUSED_EXPERTS = SlotSpec(
    id="moe.fused_experts",
    version=1,
    summary="out[t] = sum_k w[t,k] * W2[e] @ (silu(W13[e,:I] @ x[t]) * (W13[e,I:] @ x[t])), e = ids[t,k]",
    args=(
        ArgSpec("hidden_states", "in", "act", ("T", "H"), graph_dynamic=True, doc="MoE input (post-norm)"),
        ArgSpec("w13", "in", "act", ("E", "2*I", "H"), doc="per expert: gate rows [0, I), up rows [I, 2I)"),
        ArgSpec("w2", "in", "act", ("E", "H", "I"), doc="per expert down projection"),
        ArgSpec("topk_weights", "in", "float32", ("T", "K"), graph_dynamic=True, doc="router weights"),
        ArgSpec("topk_ids", "in", "int32", ("T", "K"), graph_dynamic=True, doc="expert ids, distinct per row"),
        ArgSpec("out", "out", "act", ("T", "H"), doc="combined expert output"),
    ),
    params=(),
    dtypes=("bfloat16", "float16"),
    reference=_experts_ref,
    make_inputs=_experts_inputs,
    cases=_expert_cases,
    sglang_target=(
        "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe.fused_experts -> "
        "fused_experts_impl (Triton fused_moe_kernel x2 + silu_and_mul + moe_sum_reduce)"
    ),
    tolerances=_EXPERT_TOL,
    bytes_moved=_experts_bytes,
    flops=_experts_flops,
)

SLOTS = (TOPK_SOFTMAX, FUSED_EXPERTS)
