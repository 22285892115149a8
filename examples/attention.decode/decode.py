"""Split-KV paged decode attention for slot attention.decode@2 (flash-decoding).

Pass 1, grid (B, HK * head_blocks, MAXS): a program takes one request, one kv head and one
split of the request's tokens, and serves every query head of that kv head's GQA group at
once, so each K/V row is read from HBM once per group instead of once per query head and
the q.K^T / P.V products are [heads x tokens] tensor-core dots. Online softmax in base 2 with
fp32 state; it writes the split's normalised partial output and log2-sum-exp into scratch.
Pass 2, grid (B, HK): merges the non-empty splits of each query head of a group by their
log-sum-exp.

Grids depend only on shapes; token counts and split hints are read on the device, so the
launch is CUDA-graph safe. Empty splits write nothing and pass 2 never reads them.
"""

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
# Measured on one H200 (docs/benchmarks.md, session 8; scripts/sweep_attention_decode.py):
#   at the dense arena's window (bs 256, ~1088 tokens a request, Qwen3-0.6B 16/8 x 128, bf16)
#   BLOCK_N 64, 2 warps, 3 stages, 1 split: 278 us vs stock's 392 us, 97.5 % of the measured
#   copy bandwidth (stock 69.1 %); bs 64-192: 1.27-1.71x stock. In the arena (TEST config,
#   2 cycles): decode step 11.75 -> 9.06 ms, C/B 1.2946 on the decode-step clock, quality PASS.
#   Below 512 (batch x kv heads) the older slot-shape sweep's choice stays: 4 warps, 3 stages,
#   64-token steps when only a few requests run, 32 otherwise (not re-timed at the arena's context).
# Shapes alone decide: graph safe.
_NUM_WARPS = 4
_NUM_STAGES = 3


def _block_n(batch: int, kv_heads: int) -> int:
    """Tokens per inner step (also the split granularity)."""
    return 64 if batch * kv_heads <= 16 else 32


def _launch_config(batch: int, kv_heads: int) -> tuple[int, int, int, int]:
    """(BLOCK_N, num_warps, num_stages, splits) for pass 1, from shapes alone (graph safe).
    splits 0: each request takes the backend's hint num_kv_splits[b] (at most MAXS splits);
    k > 0: every request takes exactly min(k, MAXS) splits and the hint is not read.
    scripts/sweep_attention_decode.py replaces this function to time other choices."""
    if batch * kv_heads >= 512:  # H200 sweep 2026-12-02, bs 64-256 x ctx 1024-1152: 1.27-1.71x stock
        return 64, 2, 3, 1
    return _block_n(batch, kv_heads), _NUM_WARPS, _NUM_STAGES, 0


@triton.jit
def _attend_block(q, k_base, v_base, idx_ptr, stride_kt, stride_vt, n0, hi, qk_scale, m_i, l_i, acc, d_mask,
                  BLOCK_N: tl.constexpr, COMPILED: tl.constexpr):
    """One BLOCK_N-token step of the online softmax for a whole head group (fp32 state).

    Dots take act-dtype operands and accumulate in fp32. The CPU interpreter (Triton 3.6)
    multiplies bf16 as raw uint16, so there the same rounded operands go in as fp32."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < hi
    slot = tl.load(idx_ptr + offs_n, mask=n_mask, other=0)
    kv_mask = n_mask[:, None] & d_mask[None, :]
    k = tl.load(k_base + slot[:, None] * stride_kt, mask=kv_mask, other=0.0)
    v = tl.load(v_base + slot[:, None] * stride_vt, mask=kv_mask, other=0.0)
    if COMPILED:
        s = tl.dot(q, tl.trans(k))
    else:
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
    s = tl.where(n_mask[None, :], s * qk_scale, float("-inf"))  # [BLOCK_H, BLOCK_N], log2 units
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if COMPILED:
        pv = tl.dot(p.to(v.dtype), v)
    else:
        pv = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32))
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, indptr_ptr, indices_ptr, splits_ptr, part_o_ptr, part_lse_ptr,
    qk_scale,
    stride_qb, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh,
    GROUP: tl.constexpr, HEAD_BLOCKS: tl.constexpr, MAXS: tl.constexpr,
    D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    HINTED: tl.constexpr, COMPILED: tl.constexpr,
):
    b = tl.program_id(0)
    pid_h = tl.program_id(1)
    split = tl.program_id(2)
    # Split geometry; _decode_merge_kernel repeats these lines exactly.
    kv_start = tl.load(indptr_ptr + b)
    seq_len = tl.load(indptr_ptr + b + 1) - kv_start
    if HINTED:
        n_split = tl.minimum(tl.maximum(tl.load(splits_ptr + b), 1), MAXS)
    else:
        n_split = MAXS
    chunk = tl.maximum(((seq_len + n_split - 1) // n_split + BLOCK_N - 1) // BLOCK_N * BLOCK_N, BLOCK_N)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seq_len)
    if hi > lo:
        kvh = pid_h // HEAD_BLOCKS
        offs_g = (pid_h % HEAD_BLOCKS) * BLOCK_H + tl.arange(0, BLOCK_H)
        heads = kvh * GROUP + offs_g  # the query heads h with h // GROUP == kvh
        h_mask = offs_g < GROUP
        offs_d = tl.arange(0, BLOCK_D)
        d_mask = offs_d < D
        q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=h_mask[:, None] & d_mask[None, :], other=0.0)
        m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
        k_base = k_ptr + kvh * stride_kh + offs_d[None, :]
        v_base = v_ptr + kvh * stride_vh + offs_d[None, :]
        idx_ptr = indices_ptr + kv_start
        if COMPILED:  # software-pipelined loop: the next block's gathers overlap this block's math
            for n0 in tl.range(lo, hi, BLOCK_N):
                m_i, l_i, acc = _attend_block(q, k_base, v_base, idx_ptr, stride_kt, stride_vt, n0, hi, qk_scale,
                                              m_i, l_i, acc, d_mask, BLOCK_N, COMPILED)
        else:  # the interpreter cannot take tensor bounds in range() under numpy >= 2.4
            n0 = lo
            while n0 < hi:
                m_i, l_i, acc = _attend_block(q, k_base, v_base, idx_ptr, stride_kt, stride_vt, n0, hi, qk_scale,
                                              m_i, l_i, acc, d_mask, BLOCK_N, COMPILED)
                n0 += BLOCK_N
        po = part_o_ptr + b * stride_pb + heads[:, None] * stride_ph + split * stride_ps + offs_d[None, :]
        tl.store(po, acc / l_i[:, None], mask=h_mask[:, None] & d_mask[None, :])
        tl.store(part_lse_ptr + b * stride_lb + heads * stride_lh + split, m_i + tl.log2(l_i), mask=h_mask)


@triton.jit
def _decode_merge_kernel(
    part_o_ptr, part_lse_ptr, o_ptr, indptr_ptr, splits_ptr,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
    GROUP: tl.constexpr, MAXS: tl.constexpr, D: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    HINTED: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    kv_start = tl.load(indptr_ptr + b)
    seq_len = tl.load(indptr_ptr + b + 1) - kv_start
    if HINTED:
        n_split = tl.minimum(tl.maximum(tl.load(splits_ptr + b), 1), MAXS)
    else:
        n_split = MAXS
    chunk = tl.maximum(((seq_len + n_split - 1) // n_split + BLOCK_N - 1) // BLOCK_N * BLOCK_N, BLOCK_N)
    offs_g = tl.arange(0, BLOCK_G)
    heads = kvh * GROUP + offs_g
    h_mask = offs_g < GROUP
    offs_s = tl.arange(0, BLOCK_S)
    s_mask = (offs_s < MAXS) & (offs_s * chunk < seq_len)  # exactly the splits pass 1 wrote
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    hs_mask = h_mask[:, None] & s_mask[None, :]
    lse = tl.load(part_lse_ptr + b * stride_lb + heads[:, None] * stride_lh + offs_s[None, :],
                  mask=hs_mask, other=float("-inf"))
    m = tl.max(lse, 1)
    w = tl.where(hs_mask, tl.exp2(lse - m[:, None]), 0.0)  # [BLOCK_G, BLOCK_S]
    total = tl.sum(w, 1)
    w = w / tl.where(total > 0.0, total, 1.0)[:, None]
    po = (part_o_ptr + b * stride_pb + heads[:, None, None] * stride_ph + offs_s[None, :, None] * stride_ps
          + offs_d[None, None, :])
    parts = tl.load(po, mask=hs_mask[:, :, None] & d_mask[None, None, :], other=0.0)
    out = tl.sum(w[:, :, None] * parts, 1)  # [BLOCK_G, BLOCK_D]
    tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=h_mask[:, None] & d_mask[None, :])


def decode_attention(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, o: torch.Tensor,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor, num_kv_splits: torch.Tensor,
                     attn_logits: torch.Tensor, attn_lse: torch.Tensor, sm_scale: float) -> None:
    B, HQ, D = q.shape
    HK = k_buffer.shape[1]
    block_n, num_warps, num_stages, splits = _launch_config(B, HK)
    MAXS = attn_logits.shape[2] if splits <= 0 else min(splits, attn_logits.shape[2])
    group = HQ // HK
    block_h = max(16, min(64, triton.next_power_of_2(group)))  # tl.dot needs M >= 16
    head_blocks = triton.cdiv(group, block_h)
    block_d = triton.next_power_of_2(D)
    _decode_split_kernel[(B, HK * head_blocks, MAXS)](
        q, k_buffer, v_buffer, kv_indptr, kv_indices, num_kv_splits, attn_logits, attn_lse,
        sm_scale * _LOG2E,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        attn_logits.stride(0), attn_logits.stride(1), attn_logits.stride(2), attn_lse.stride(0), attn_lse.stride(1),
        GROUP=group, HEAD_BLOCKS=head_blocks, MAXS=MAXS, D=D, BLOCK_D=block_d, BLOCK_H=block_h,
        BLOCK_N=block_n, HINTED=splits <= 0, COMPILED=q.is_cuda, num_warps=num_warps, num_stages=num_stages,
    )
    _decode_merge_kernel[(B, HK)](
        attn_logits, attn_lse, o, kv_indptr, num_kv_splits,
        attn_logits.stride(0), attn_logits.stride(1), attn_logits.stride(2), attn_lse.stride(0), attn_lse.stride(1),
        o.stride(0), o.stride(1),
        GROUP=group, MAXS=MAXS, D=D, BLOCK_G=triton.next_power_of_2(group), BLOCK_S=triton.next_power_of_2(MAXS),
        BLOCK_D=block_d, BLOCK_N=block_n, HINTED=splits <= 0, num_warps=4,
    )
