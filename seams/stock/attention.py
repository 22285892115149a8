"""Stock paged decode attention exactly as TritonAttnBackend.forward_decode reaches it
(triton_backend.py:1383-1402 -> triton_ops/decode_attention.py:745)."""

from __future__ import annotations

from collections.abc import Callable


def _decode() -> Callable[..., None]:
    """sglang triton_ops.decode_attention.decode_attention_fwd (split-KV stage 1 + stage 2)"""
    from sglang.srt.layers.attention.triton_ops.decode_attention import decode_attention_fwd

    def run(
        q,
        k_buffer,
        v_buffer,
        o,
        kv_indptr,
        kv_indices,
        num_kv_splits,
        attn_logits,
        attn_lse,  # noqa: ANN001
        sm_scale,
    ):
        # max_kv_splits must equal attn_logits.shape[2] (asserted by decode_attention_fwd); the
        # slot has no KV scales, so k_scale = v_scale = 1.0 like an unquantised layer.
        decode_attention_fwd(
            q,
            k_buffer,
            v_buffer,
            o,
            kv_indptr,
            kv_indices,
            attn_logits,
            attn_lse,
            num_kv_splits,
            attn_logits.shape[2],
            sm_scale,
            1.0,
            1.0,
            logit_cap=0.0,
            sinks=None,
            xai_temperature_len=-1,
            has_mla=False,
        )

    return run


STOCK = {"attention.decode": _decode}
