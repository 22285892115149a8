"""The inputs every side reads: the slot generator's K/V pool, paged per shape as the arena pages
it, with num_kv_splits as SGLang's TritonAttnBackend fills it in (so stock runs as in the arena)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from attnsweep.grid import Shape


# -- SGLang's split policy ----------------------------------------------------------------------
def sglang_split_hint(lens: Any, num_head: int, num_kv_head: int, max_kv_splits: int, cores: int) -> Any:
    """num_kv_splits as TritonAttnBackend.get_num_kv_splits fills it in SGLang 0.5.13.post1
    (triton_backend.py:258-307; dynamic mode: SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS unset, no
    deterministic inference, device_core_count = the SM count, triton_backend.py:164) through
    get_num_kv_splits_triton (triton_ops/metadata.py:11-60), which the slot restates as
    attention.backend_split_hint: chunk = the smaller of longest/ceil(longest/shortest) (when
    lengths differ by >= 25 %) and longest/ceil(cores * max(log2(longest/64), 1) / grid), grid =
    batch x ceil(HQ / min(16, HQ/HK)); each request ceil(len / chunk) splits, at most max_kv_splits.
    On CUDA, `check_hint_against_sglang` runs SGLang's own kernel and compares."""
    from cacheon_subnet.slots.defs.attention import backend_split_hint

    return backend_split_hint(lens, num_head, num_kv_head, max_kv_splits, cores)


def check_hint_against_sglang(lens: Any, hint: Any, num_head: int, num_kv_head: int, max_kv_splits: int, cores: int) -> str:
    """SGLang's get_num_kv_splits_triton launched exactly as get_num_kv_splits does (num_group 1,
    MAX_NUM_SEQ = 256 below 256 sequences, else next_power_of_2): '' when it agrees, else why not."""
    import torch
    import triton

    try:
        from sglang.srt.layers.attention.triton_ops.metadata import get_num_kv_splits_triton
    except Exception as e:  # noqa: BLE001 - SGLang absent or unimportable: the restatement stands
        return f"not checked ({type(e).__name__}: {e})"
    n = lens.numel()
    out = torch.empty(n, dtype=torch.int32, device="cuda")
    get_num_kv_splits_triton[(1,)](
        out,
        lens.to("cuda", torch.int32),
        n,
        1,
        num_head,
        num_kv_head,
        max_kv_splits,
        cores,
        MAX_NUM_SEQ=256 if n < 256 else triton.next_power_of_2(n),
    )
    got = out.cpu()
    if torch.equal(got, hint.cpu().to(torch.int32)):
        return ""
    return f"SGLang's kernel says {dict(Counter(got.tolist()))}, the restatement {dict(Counter(hint.tolist()))}"


# -- inputs -------------------------------------------------------------------------------------
def make_pool(
    spec: Any, profile: str, shapes: list[Shape], max_splits: int, act: Any, seed: int, device: Any
) -> dict[str, Any]:
    """The slot generator's inputs at the largest batch and context (q, K/V pool, params)."""
    from cacheon_subnet.bench_timing import build_args
    from cacheon_subnet.verify.shapes import resize, templates

    temps = templates(spec, spec.cases("bench"), profile)
    big = resize(spec, temps[0], "decode", max(s.batch for s in shapes), max(s.ctx for s in shapes))
    big = dataclasses.replace(big, dims={**big.dims, "MAXS": max_splits})
    args = build_args(spec, big, act, seed, device)
    return {
        "q": args["q"],
        "k_buffer": args["k_buffer"],
        "v_buffer": args["v_buffer"],
        "case": big,
        "sm_scale": float(big.params["sm_scale"]),
    }


def shape_inputs(
    pool: dict[str, Any], shape: Shape, max_splits: int, cores: int, lengths: str, layout: str, seed: int
) -> dict[str, Any]:
    """The pool paged for `shape` as the arena's engine pages it (see the module doc)."""
    import torch

    from cacheon_subnet.slots.defs import attention
    from cacheon_subnet.slots.gen import seed_generator

    g = seed_generator(seed)
    dev = pool["q"].device
    B, HQ, _ = pool["q"].shape
    S, HK, _ = pool["k_buffer"].shape
    if shape.batch > B:
        raise SystemExit(f"{shape.label}: the pool holds {B} requests")
    lens = (
        attention.seq_lens(shape.batch, shape.ctx, g)
        if lengths == "slot"
        else torch.full((shape.batch,), shape.ctx, dtype=torch.int64)
    )
    total = int(lens.sum())
    if total > S - 1:
        raise SystemExit(f"{shape.label}: {total} tokens do not fit the pool's {S - 1} slots")
    indptr = torch.zeros(shape.batch + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    indices = (torch.randperm(S - 1, generator=g)[:total] + 1 if layout == "permuted" else torch.arange(1, total + 1)).to(
        torch.int64
    )
    hint = sglang_split_hint(lens, HQ, HK, max_splits, cores)
    return {
        "q": pool["q"][: shape.batch].contiguous(),
        "k_buffer": pool["k_buffer"],
        "v_buffer": pool["v_buffer"],
        "kv_indptr": indptr.to(dev),
        "kv_indices": indices.to(dev),
        "num_kv_splits": hint.to(dev),
        "lens": lens,
        "max_splits": max_splits,
    }


def scratch(t: dict[str, Any]) -> dict[str, Any]:
    """Each side's own output and split scratch, NaN-filled: an element a kernel skips shows up."""
    import torch

    B, HQ, D = t["q"].shape
    dev = t["q"].device
    nan = float("nan")
    return {
        "o": torch.full((B, HQ, D), nan, dtype=t["q"].dtype, device=dev),
        "attn_logits": torch.full((B, HQ, t["max_splits"], D), nan, dtype=torch.float32, device=dev),
        "attn_lse": torch.full((B, HQ, t["max_splits"]), nan, dtype=torch.float32, device=dev),
    }


def kv_bytes(t: dict[str, Any]) -> int:
    """K and V rows of every token and kv head, their int64 slot ids, q and o, indptr and hints."""
    q, kb = t["q"], t["k_buffer"]
    tokens = int(t["lens"].sum())
    es = q.element_size()
    return (
        tokens * kb.shape[1] * kb.shape[2] * es * 2 + tokens * 8 + 2 * q.numel() * es + (q.shape[0] + 1) * 4 + q.shape[0] * 4
    )


def wrong_indices(t: dict[str, Any]) -> Any:
    """The control: each request's last token read from its first token's pool row."""
    import torch

    idx = t["kv_indices"].clone()
    ptr = t["kv_indptr"].to(torch.int64)
    idx[ptr[1:] - 1] = t["kv_indices"][ptr[:-1]]
    return idx
