"""One-pass paged decode attention for slot attention.decode@2, for the large-batch regime.

Grid (B, HK * head_blocks): a program takes one request and one kv head, serves every query
head of that kv head's GQA group at once (each K/V row is read from HBM once per group; the
q.K^T and P.V products are [heads x tokens] tensor-core dots), runs the fp32 online softmax
in base 2 over the request's whole context and writes the normalised output in the act dtype.
There are no splits: no fp32 partials go through HBM and no second (merge) kernel runs, one
launch per layer instead of two. That is the whole difference from examples/attention.decode,
whose split-KV pass at 1 split is this loop followed by a merge of one split.

When it pays: at batch x kv heads >= 512 (the dense arena's windows: bs 256 x 8 kv heads) there
are enough programs to fill the GPU without splitting the context. At small batches and long
contexts a split-KV kernel keeps more SMs busy (bs 1 runs only HK programs, each over the whole
context): a miner who serves those starts from examples/attention.decode instead.

Measured on one H200 (docs/benchmarks.md, session 10, 2026-12-03): in the dense arena head to
head against examples/attention.decode as the incumbent, C/B 1.0179 on the decode-step clock
(noise 0.12 %, bar 1.0050), confirmed 1.0171 in a fresh engine, quality PASS, the candidate
fired in all 840 captured calls of every swap; `cacheon bench --arena configs/arena/dense.toml`
against stock: 1.258x at the window's bs 256 (81 % of the measured copy bandwidth by the slot's
byte count), 1.13-1.20x at bs 32-192, 1.6-2.9x at bs 1-16 (at the arena's 1088-token context).

The grid depends only on shapes; token counts are read on the device: CUDA-graph safe. The
backend's split hint and the scratch buffers are not used (the slot allows that).
"""

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
# BLOCK_N 64, 2 warps, 3 stages: the best 1-split config of the H200 sweep at the dense arena's
# window (scripts/sweep_attention_decode.py, docs/benchmarks.md session 8: 97.5 % of the copy
# bandwidth for the split pass at 1 split).
BLOCK_N = 64
NUM_WARPS = 2
NUM_STAGES = 3


@triton.jit
def _onepass_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, indptr_ptr, indices_ptr, qk_scale,
    stride_qb, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ob, stride_oh,
    GROUP: tl.constexpr, HEAD_BLOCKS: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, COMPILED: tl.constexpr,
):
    b = tl.program_id(0)
    pid_h = tl.program_id(1)
    kv_start = tl.load(indptr_ptr + b)
    seq_len = tl.load(indptr_ptr + b + 1) - kv_start
    kvh = pid_h // HEAD_BLOCKS
    offs_g = (pid_h % HEAD_BLOCKS) * BLOCK_H + tl.arange(0, BLOCK_H)
    heads = kvh * GROUP + offs_g  # query heads h with h // GROUP == kvh
    h_mask = offs_g < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    hd_mask = h_mask[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=hd_mask, other=0.0)
    if not COMPILED:  # Triton 3.6's CPU interpreter multiplies bf16 as raw uint16: same operands, fp32
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
    k_rows = k_ptr + kvh * stride_kh + offs_d[None, :]
    v_rows = v_ptr + kvh * stride_vh + offs_d[None, :]
    idx_ptr = indices_ptr + kv_start
    n_blocks = tl.cdiv(seq_len, BLOCK_N)
    for i in tl.range(0, n_blocks):  # software-pipelined when compiled: gathers overlap the math
        offs_n = i * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < seq_len
        slot = tl.load(idx_ptr + offs_n, mask=n_mask, other=0)
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_rows + slot[:, None] * stride_kt, mask=kv_mask, other=0.0)
        v = tl.load(v_rows + slot[:, None] * stride_vt, mask=kv_mask, other=0.0)
        if not COMPILED:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k))
        s = tl.where(n_mask[None, :], s * qk_scale, float("-inf"))  # [BLOCK_H, BLOCK_N], log2 units
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p = p.to(v.dtype)  # the act dtype, as the stock kernel rounds before P.V
        if not COMPILED:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=hd_mask)


def decode_attention(q: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, o: torch.Tensor,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor, num_kv_splits: torch.Tensor,
                     attn_logits: torch.Tensor, attn_lse: torch.Tensor, sm_scale: float) -> None:
    B, HQ, D = q.shape
    HK = k_buffer.shape[1]
    group = HQ // HK
    block_h = max(16, min(64, triton.next_power_of_2(group)))  # tl.dot needs M >= 16
    head_blocks = triton.cdiv(group, block_h)
    _onepass_kernel[(B, HK * head_blocks)](
        q, k_buffer, v_buffer, o, kv_indptr, kv_indices, sm_scale * _LOG2E,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        o.stride(0), o.stride(1),
        GROUP=group, HEAD_BLOCKS=head_blocks, D=D, BLOCK_D=triton.next_power_of_2(D), BLOCK_H=block_h,
        BLOCK_N=BLOCK_N, COMPILED=q.is_cuda, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
