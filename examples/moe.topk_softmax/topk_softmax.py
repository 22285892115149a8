"""Triton top-k softmax for slot moe.topk_softmax@1.

Each program owns ROWS tokens: it loads their logits once, takes an fp32 softmax over the
experts, then peels off the K largest probabilities with K argmax passes (lowest expert id
wins ties) and writes weights (renormalised to sum 1 when asked) and int32 ids.

ROWS=1 on one warp (up to 256 experts): every reduction stays inside the warp (shuffles, no
barriers). Measured on an H200 with ROWS=16 on 4 warps, Triton split each row over the warps,
and the 2(K+1) cross-warp reductions per row made 2048 tokens take ~25 us (stock: ~7 us).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _topk_softmax_kernel(logits_ptr, w_ptr, ids_ptr, T, E, stride_t,
                         K: tl.constexpr, K_POW2: tl.constexpr, E_POW2: tl.constexpr,
                         ROWS: tl.constexpr, RENORM: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < T
    cols = tl.arange(0, E_POW2)
    col_ok = cols < E
    ptrs = logits_ptr + rows[:, None].to(tl.int64) * stride_t + cols[None, :]
    x = tl.load(ptrs, mask=row_ok[:, None] & col_ok[None, :], other=float("-inf")).to(tl.float32)
    x = x - tl.max(x, axis=1)[:, None]
    num = tl.where(col_ok[None, :], tl.exp(x), 0.0)
    p = num / tl.sum(num, axis=1)[:, None]
    p = tl.where(col_ok[None, :], p, -1.0)  # padding columns never win

    kcols = tl.arange(0, K_POW2)
    w_tile = tl.zeros((ROWS, K_POW2), dtype=tl.float32)
    id_tile = tl.zeros((ROWS, K_POW2), dtype=tl.int32)
    total = tl.zeros((ROWS,), dtype=tl.float32)
    for j in tl.static_range(K):
        best = tl.max(p, axis=1)
        # lowest column holding the maximum (deterministic tie break)
        idx = tl.min(tl.where(p == best[:, None], cols[None, :], E_POW2), axis=1)
        w_tile = tl.where(kcols[None, :] == j, best[:, None], w_tile)
        id_tile = tl.where(kcols[None, :] == j, idx[:, None], id_tile)
        total += best
        p = tl.where(cols[None, :] == idx[:, None], -1.0, p)
    if RENORM:
        w_tile = w_tile / total[:, None]
    out_off = rows[:, None].to(tl.int64) * K + kcols[None, :]
    out_mask = row_ok[:, None] & (kcols[None, :] < K)
    tl.store(w_ptr + out_off, w_tile, mask=out_mask)
    tl.store(ids_ptr + out_off, id_tile, mask=out_mask)


def topk_softmax(gating_output: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                 renormalize: bool, topk: int) -> None:
    T, E = gating_output.shape
    K = topk_ids.shape[1]
    e_pow2 = triton.next_power_of_2(E)
    rows, warps = 1, max(1, min(4, e_pow2 // 256))  # one warp per row up to 256 experts
    _topk_softmax_kernel[(triton.cdiv(T, rows),)](gating_output, topk_weights, topk_ids, T, E, gating_output.stride(0),
                                                  K=K, K_POW2=triton.next_power_of_2(K), E_POW2=e_pow2, ROWS=rows,
                                                  RENORM=bool(renormalize), num_warps=warps)
