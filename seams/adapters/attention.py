"""Triton decode_attention_fwd (decode_attention.py:745) -> attention.decode.

SGLang passes graph-padded metadata: kv_indptr / num_kv_splits / attn_logits / attn_lse may
be longer than the batch in q; the slot sees exactly B rows (views, no copies). Eligible: no
logit cap, sinks, xai temperature or MLA, and unit KV scales given as Python numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seams.dispatch import run


def _unit(x: Any) -> bool:
    return isinstance(x, (int, float)) and float(x) == 1.0


def _around(
    original: Callable[..., Any],
    q: Any,
    k_buffer: Any,
    v_buffer: Any,
    o: Any,
    kv_indptr: Any,
    kv_indices: Any,
    attn_logits: Any,
    attn_lse: Any,
    num_kv_splits: Any,
    max_kv_splits: int,
    sm_scale: float,
    k_scale: Any,
    v_scale: Any,
    logit_cap: float = 0.0,
    sinks: Any = None,
    xai_temperature_len: int = -1,
    has_mla: bool = False,
    use_pdl: bool = False,
) -> Any:
    b = q.shape[0]
    if (
        not logit_cap
        and sinks is None
        and xai_temperature_len == -1
        and not has_mla
        and _unit(k_scale)
        and _unit(v_scale)
        and attn_logits.shape[2] == max_kv_splits
        and kv_indptr.shape[0] > b
    ):
        tensors = {
            "q": q,
            "k_buffer": k_buffer,
            "v_buffer": v_buffer,
            "o": o,
            "kv_indptr": kv_indptr[: b + 1],
            "kv_indices": kv_indices,
            "num_kv_splits": num_kv_splits[:b],
            "attn_logits": attn_logits[:b],
            "attn_lse": attn_lse[:b],
        }
        if run("attention.decode", tensors, {"sm_scale": float(sm_scale)}) is not None:
            return None
    return original(
        q,
        k_buffer,
        v_buffer,
        o,
        kv_indptr,
        kv_indices,
        attn_logits,
        attn_lse,
        num_kv_splits,
        max_kv_splits,
        sm_scale,
        k_scale,
        v_scale,
        logit_cap=logit_cap,
        sinks=sinks,
        xai_temperature_len=xai_temperature_len,
        has_mla=has_mla,
        use_pdl=use_pdl,
    )


def hooks() -> dict[str, Callable[..., Any]]:
    return {"sglang.srt.layers.attention.triton_ops.decode_attention:decode_attention_fwd": _around}
