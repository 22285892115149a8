"""Paged decode attention (SGLang 0.5.13.post1 triton backend).

`TritonAttnBackend.forward_decode` (triton_backend.py:1305) calls
`decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse,
num_kv_splits, max_kv_splits, sm_scale, k_scale, v_scale, ...)` (decode_attention.py:745)
once per layer per decode step. Slot `attention.decode@2` is the plain GQA case Qwen3 uses:
no logit cap, no sinks, no MLA, bf16/fp16 KV without scales.

For request b the keys/values are the pool rows kv_indices[kv_indptr[b]:kv_indptr[b+1]]
(page size 1, any order); query head h reads kv head h // (HQ // HK):
    o[b, h] = softmax(sm_scale * q[b, h] . K_b[:, h // G]) @ V_b[:, h // G]
`num_kv_splits[b]` is the backend's split hint (get_num_kv_splits, 1..MAXS); `attn_logits` /
`attn_lse` are the backend's per-split partial buffers, here free scratch. The result must
not depend on how (or whether) the hint is used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cacheon_subnet.slots import fixture_draw, gen, profiles
from cacheon_subnet.slots.spec import ArgSpec, ParamSpec, ShapeCase, SlotSpec, Tolerance, case

if TYPE_CHECKING:  # torch is imported by the functions that make or read tensors: loading the catalog needs none
    import torch

PROFILES = ("qwen3-0.6b", "qwen3-8b", "qwen3-30b-a3b")
H200_SMS = 132  # device_core_count the backend's split policy sees on the target GPU
# (batch, max context) per tier. "verify" stays tiny so a Triton kernel under TRITON_INTERPRET
# verifies in seconds on CPU; "bench" is what an H200 serving Qwen3 decodes (B=256 x 1k
# context is ~256k KV tokens per layer, about what fits next to the weights).
SHAPES: Mapping[str, tuple[tuple[int, int], ...]] = {
    "verify": ((1, 192), (4, 96)),
    "gpu": ((1, 2048), (8, 1024), (64, 512)),
    "bench": ((1, 8192), (32, 4096), (256, 1024)),
}
# MAXS = --triton-attention-num-kv-splits: 8 is SGLang's default (server_args.py:775). The
# verify tier uses 4, a legal setting that halves the interpreter's programs and catches
# kernels that hard-code 8.
MAX_KV_SPLITS: Mapping[str, int] = {"verify": 4, "gpu": 8, "bench": 8}

# Why these bounds: a correct fp32-accumulating kernel differs from the fp32 reference by the
# output rounding (bf16: 2^-9 relative, fp16: 2^-11) plus the rounding of probabilities to the
# act dtype before the P@V dot (the stock kernel does this), which averages out over tokens.
# Measured rel_l2 on an H200, stock SGLang and the example alike: bf16 0.9e-3..1.9e-3, fp16
# 1.1e-4..2.3e-4; under TRITON_INTERPRET bf16 reaches 4.2e-3 (the interpreter truncates
# fp32->bf16 instead of rounding). Outputs are averages of V rows, so |o| shrinks like
# 1/sqrt(context) and an elementwise atol alone would accept dropping tokens; the rel-L2
# bound is the real check: dropping one of L tokens moves o by ~1/sqrt(L) relative (and a
# length-1 request completely), a wrong GQA mapping by ~100%. min_matched < 1 tolerates the
# rare element where two roundings line up against it.
TOLERANCES: Mapping[str, Tolerance] = {
    "bfloat16": Tolerance(atol=1e-2, rtol=2e-2, min_matched=0.999, max_rel_l2=8e-3),
    "float16": Tolerance(atol=2e-3, rtol=1e-2, min_matched=0.999, max_rel_l2=2e-3),
}


# ---- shapes -----------------------------------------------------------------------------
def _cases(tier: str) -> list[ShapeCase]:
    """Shape-major order, so any prefix (--max-cases) covers every GQA ratio (2, 4, 8) first."""
    out = []
    for batch, ctx in SHAPES[tier]:
        for name in PROFILES:
            p = profiles.get(name)
            n = batch * ctx  # kv_indices buffer: the graph buffer holds max_bs * context_len
            dims = {
                "B": batch,
                "HQ": p.n_heads,
                "HK": p.n_kv_heads,
                "D": p.head_dim,
                "S": n + n // 4 + 1,
                "N": n,
                "MAXS": MAX_KV_SPLITS[tier],
            }
            out.append(case(f"{name}/decode-bs{batch}-ctx{ctx}", name, dims, sm_scale=p.head_dim**-0.5))
    return out


def max_context(c: ShapeCase) -> int:
    return c.dims["N"] // c.dims["B"]


def expected_tokens(c: ShapeCase) -> float:
    """Mean of sum(seq_lens) under `seq_lens` below (bytes/flops need a number, lengths are random)."""
    b, ctx = c.dims["B"], max_context(c)
    if b == 1:
        return (ctx // 2 + ctx) / 2
    return 1 + ctx + (b - 2) * (ctx + 1) / 2


# ---- inputs -----------------------------------------------------------------------------
def seq_lens(batch: int, ctx: int, g: torch.Generator) -> torch.Tensor:
    """Varied lengths in [1, ctx]; with B >= 2 one request is brand new (length 1) and one is
    at the full context, so both extremes are in every batch. A lone request is long."""
    import torch

    if batch == 1:
        return torch.randint(ctx // 2, ctx + 1, (1,), generator=g)
    lens = torch.randint(1, ctx + 1, (batch,), generator=g)
    pick = torch.randperm(batch, generator=g)[:2]
    lens[pick[0]], lens[pick[1]] = 1, ctx
    return lens


def _cdiv(a: torch.Tensor | int, b: torch.Tensor | int) -> torch.Tensor | int:
    return -(-a // b)


def backend_split_hint(lens: torch.Tensor, hq: int, hk: int, maxs: int, cores: int = H200_SMS) -> torch.Tensor:
    """The split counts get_num_kv_splits (triton_ops/metadata.py) hands the kernel, restated:
    one chunk size per batch, from the longest request, small enough that (a) requests much
    shorter than the longest still split and (b) the stage-1 grid fills `cores` SMs, scaled up
    by log2(max_len / 64); each request then gets ceil(len / chunk) splits, at most `maxs`."""
    import torch

    longest, shortest = int(lens.max()), int(lens.min())
    if longest * 8 < shortest * 10:  # nearly equal lengths: no ratio-driven splitting
        shortest = longest
    by_ratio = min(_cdiv(longest, shortest), maxs)
    boost = max(math.log2(longest / 64.0), 1.0) if longest > 0 else 1.0
    grid = lens.numel() * _cdiv(hq, min(16, hq // hk)) if hq // hk > 1 else lens.numel() * hq
    by_cores = min(_cdiv(int(cores * boost), grid), maxs)
    chunk = min(_cdiv(longest, by_ratio), _cdiv(longest, by_cores))
    return torch.clamp(_cdiv(lens, chunk), 1, maxs).to(torch.int32)


def split_hint(lens: torch.Tensor, ctx: int, hq: int, hk: int, maxs: int, g: torch.Generator) -> torch.Tensor:
    """The backend's hint. Verify-sized cases (max context <= 256) also replace about half the
    hints with random values in [1, maxs] (SGLang's static mode fills maxs everywhere), so
    kernels meet every split count and splits that cover no token; larger tiers keep the
    backend's policy, so timings are stable and representative."""
    import torch

    hint = backend_split_hint(lens, hq, hk, maxs)
    if ctx > 256:
        return hint
    rand = torch.randint(1, maxs + 1, lens.shape, generator=g, dtype=torch.int32)
    return torch.where(torch.rand(lens.shape, generator=g) < 0.5, rand, hint)


def _channel_scale(shape: tuple[int, ...], sigma: float, g: torch.Generator) -> torch.Tensor:
    import torch

    return torch.exp(sigma * torch.randn(shape, generator=g))


def _inputs(c: ShapeCase, dt: torch.dtype, g: torch.Generator) -> dict[str, torch.Tensor]:
    import torch

    d = c.dims
    B, HQ, HK, D, S, N = d["B"], d["HQ"], d["HK"], d["D"], d["S"], d["N"]
    lens = fixture_draw.kv_lengths(c.constants, B, max_context(c), g)  # an arena's recorded lengths
    lens = seq_lens(B, max_context(c), g) if lens is None else lens
    total = int(lens.sum())
    indptr = torch.zeros(B + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    # Slot 0 is SGLang's padding slot; real tokens live anywhere else, in allocator order.
    indices = torch.randint(1, S, (N,), generator=g)  # tail: stale but in-range entries
    indices[:total] = torch.randperm(S - 1, generator=g)[:total] + 1
    # Post-qk-norm/RoPE keys: O(1) with per-channel spread and a shared per-head offset.
    k_chan = _channel_scale((HK, D), 0.5, g)
    k = gen.randn((S, HK, D), dt, g).mul_(k_chan.to(dt))  # in place: pools are GBs in "bench"
    k.add_((0.3 * torch.randn((HK, D), generator=g)).to(dt))
    v = gen.randn((S, HK, D), dt, g).mul_(_channel_scale((HK, D), 0.3, g).to(dt))
    # Logit std ~2: a few hundred tokens give a peaked but not one-hot softmax.
    q_scale = 2.0 / float(k_chan.pow(2).mean().sqrt())
    # q as Qwen3 hands it over on CUDA: SGLang's fused in-place QK-norm leaves it a view into the
    # packed [B, (HQ + 2 HK) D] qkv projection, so rows are (HQ + 2 HK) D apart (slot version 2)
    qkv = (torch.randn((B, (HQ + 2 * HK) * D), generator=g) * q_scale).to(dt)
    q = qkv[:, : HQ * D].view(B, HQ, D)
    return {
        "q": q,
        "k_buffer": k,
        "v_buffer": v,
        "kv_indptr": indptr,
        "kv_indices": indices,
        "num_kv_splits": split_hint(lens, max_context(c), HQ, HK, d["MAXS"], g),
    }


# ---- reference --------------------------------------------------------------------------
def _reference(t: Mapping[str, torch.Tensor], p: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    import torch

    q, kb, vb = t["q"], t["k_buffer"], t["v_buffer"]
    B, HQ, D = q.shape
    HK = kb.shape[1]
    G = HQ // HK
    bounds = t["kv_indptr"].to(torch.int64).tolist()
    idx_all = t["kv_indices"]
    scale = float(p["sm_scale"])
    out = torch.empty((B, HQ, D), dtype=torch.float32)
    for b in range(B):
        idx = idx_all[bounds[b] : bounds[b + 1]].to(torch.int64)
        k = kb.index_select(0, idx).to(torch.float32)  # [L, HK, D]
        v = vb.index_select(0, idx).to(torch.float32)
        qb = q[b].to(torch.float32).view(HK, G, D)
        s = torch.einsum("kgd,lkd->kgl", qb, k) * scale
        pr = torch.softmax(s, dim=-1)
        out[b] = torch.einsum("kgl,lkd->kgd", pr, v).reshape(HQ, D)
    return {"o": out}


def _bytes(c: ShapeCase, dt: torch.dtype) -> int:
    import torch

    d = c.dims
    es = torch.empty((), dtype=dt).element_size()
    tokens = expected_tokens(c)
    kv = tokens * d["HK"] * d["D"] * es * 2 + tokens * 8  # K and V rows + their int64 slot ids
    qo = 2 * d["B"] * d["HQ"] * d["D"] * es
    meta = (d["B"] + 1) * 4 + d["B"] * 4
    return int(kv + qo + meta)


def _flops(c: ShapeCase) -> int:
    return int(4 * expected_tokens(c) * c.dims["HQ"] * c.dims["D"])  # q.k and p.v, 2 flops/MAC


DECODE = SlotSpec(
    id="attention.decode",
    # 2: q is a view with any row strides ("rows"); @1 declared it contiguous, and the engine's
    # strided q then kept every decode graph but bs 1 on stock (H200, 2026-12-02)
    version=2,
    summary="paged GQA decode attention: o[b,h] = softmax(sm_scale * q[b,h] K_b^T) V_b over pool slots "
    "kv_indices[kv_indptr[b]:kv_indptr[b+1]], kv head h // (HQ/HK)",
    args=(
        ArgSpec(
            "q",
            "in",
            "act",
            ("B", "HQ", "D"),
            layout="rows",
            graph_dynamic=True,
            doc="one query token per request; a view into the packed qkv projection (use its strides)",
        ),
        ArgSpec("k_buffer", "in", "act", ("S", "HK", "D"), graph_dynamic=True, doc="the layer's whole key pool"),
        ArgSpec("v_buffer", "in", "act", ("S", "HK", "D"), graph_dynamic=True, doc="the layer's whole value pool"),
        ArgSpec("o", "out", "act", ("B", "HQ", "D"), doc="attention output"),
        ArgSpec("kv_indptr", "in", "int32", ("B+1",), graph_dynamic=True, doc="request b owns kv_indices[ptr[b]:ptr[b+1]]"),
        ArgSpec(
            "kv_indices",
            "in",
            "int64",
            ("N",),
            graph_dynamic=True,
            doc="token slots into the pool; sized for the max context, only the first ptr[B] are live",
        ),
        ArgSpec("num_kv_splits", "in", "int32", ("B",), graph_dynamic=True, doc="backend split hint, 1..MAXS"),
        ArgSpec("attn_logits", "scratch", "float32", ("B", "HQ", "MAXS", "D"), doc="per-split partial outputs"),
        ArgSpec("attn_lse", "scratch", "float32", ("B", "HQ", "MAXS"), doc="per-split log-sum-exp"),
    ),
    params=(ParamSpec("sm_scale", "float", "softmax scale (layer.scaling = head_dim**-0.5)"),),
    dtypes=("bfloat16", "float16"),
    reference=_reference,
    make_inputs=_inputs,
    cases=_cases,
    sglang_target="sglang.srt.layers.attention.triton_backend.TritonAttnBackend.forward_decode -> "
    "triton_ops.decode_attention.decode_attention_fwd",
    tolerances=TOLERANCES,
    bytes_moved=_bytes,
    flops=_flops,
)

SLOTS = (DECODE,)
