"""Triton fused MoE experts for slot moe.fused_experts@1 (bf16/fp16, silu, top-k routed).

Five launches whose grids depend on shapes only (CUDA-graph safe, no host reads, no branching
on tensor values): count + place (align.py), GEMM1 + silu*up, GEMM2 * router weight, combine
(gemm.py). Tile sizes follow the average number of pairs per active expert, a shape property.
Workspace (sorted ids, activations, per-pick outputs) is torch.empty inside the call.
"""

import torch
import triton

from .align import align, max_padded_rows
from .gemm import combine_kernel, gemm1_silu_kernel, gemm2_scale_kernel


def _config(P: int, E: int, cpu: bool) -> dict:
    """BM rows per tile, BN1 (per half of GEMM1) / BN2 columns, BK depth, GROUP_M, warps, stages."""
    if cpu:  # the Triton interpreter pays per op, not per element: few, large tiles
        return dict(BM=16, BN1=512, BN2=1024, BK=256, GROUP_M=1, warps=4, stages=1)
    per_expert = P / max(1, min(E, P))
    if per_expert <= 16:  # decode: weight-streaming bound, small M tiles, deep K pipeline
        return dict(BM=16, BN1=64, BN2=64, BK=128, GROUP_M=1, warps=4, stages=4)
    if per_expert <= 64:
        return dict(BM=32, BN1=64, BN2=64, BK=128, GROUP_M=4, warps=4, stages=4)
    if per_expert <= 256:
        return dict(BM=64, BN1=64, BN2=128, BK=64, GROUP_M=8, warps=4, stages=3)
    return dict(BM=128, BN1=64, BN2=128, BK=64, GROUP_M=8, warps=8, stages=3)


def fused_experts(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, out: torch.Tensor) -> None:
    T, H = hidden_states.shape
    E, I = w13.shape[0], w13.shape[1] // 2
    K = topk_ids.shape[1]
    P = T * K
    dev, dt = hidden_states.device, hidden_states.dtype
    cpu = dev.type == "cpu"  # CPU tensors only run under the Triton interpreter
    cfg = _config(P, E, cpu)
    bm, bk = cfg["BM"], cfg["BK"]
    fix_bf16 = cpu and dt == torch.bfloat16

    sorted_ids, block_expert, total = align(topk_ids, E, bm)
    max_rows = max_padded_rows(P, E, bm)
    num_pid_m = max_rows // bm

    act = torch.empty((max_rows, I), dtype=dt, device=dev)
    gemm1_silu_kernel[(num_pid_m * triton.cdiv(I, cfg["BN1"]),)](
        hidden_states, w13, act, sorted_ids, block_expert, total, P, num_pid_m,
        hidden_states.stride(0), w13.stride(0), w13.stride(1), H=H, I=I, TOPK=K, BLOCK_N=cfg["BN1"],
        EVEN=H % bk == 0 and I % cfg["BN1"] == 0, UPCAST=cpu, FIX_BF16=fix_bf16,
        BLOCK_M=bm, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], num_warps=cfg["warps"], num_stages=cfg["stages"])

    y = torch.empty((P, H), dtype=dt, device=dev)
    gemm2_scale_kernel[(num_pid_m * triton.cdiv(H, cfg["BN2"]),)](
        act, w2, y, topk_weights, sorted_ids, block_expert, total, P, num_pid_m,
        w2.stride(0), w2.stride(1), H=H, I=I, BLOCK_N=cfg["BN2"],
        EVEN=I % bk == 0 and H % cfg["BN2"] == 0, UPCAST=cpu, FIX_BF16=fix_bf16,
        BLOCK_M=bm, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], num_warps=cfg["warps"], num_stages=cfg["stages"])

    block_h = min(1024, triton.next_power_of_2(H))
    combine_kernel[(T, triton.cdiv(H, block_h))](y, out, H, TOPK=K, BLOCK_H=block_h,
                                                 FIX_BF16=fix_bf16, num_warps=4)
