"""The two grouped GEMMs and the combine.

Rows of a GEMM tile are BLOCK_M consecutive entries of the expert-sorted pair list, so one tile
shares one expert's weights; a block past the padded total exits at once (grids are sized for
the worst routing). GEMM1 keeps a gate and an up accumulator for the same BLOCK_N columns and
writes silu(gate) * up, so the [pairs, 2I] intermediate never reaches memory. GEMM2 reads the
activations contiguously (sorted order), scales by the router weight in fp32 and scatters each
row to its (token, pick) slot; the combine sums the K picks of a token in a fixed order.
Padding rows gather token 0 (always valid memory) instead of masking, and their results are
never stored to a token.

H and I are constexpr (model constants, one compile per model): the K loops get static trip
counts, which the software pipeliner wants anyway. EVEN (tiles divide H, I) drops all masks.

CPU tensors only run under the Triton interpreter, which (Triton 3.6) cannot feed bf16 to
tl.dot and truncates fp32->bf16 casts. UPCAST (CPU only) feeds exact fp32 copies to the dot
(bf16/fp16 products are exact in fp32, so the math equals the tensor-core path) and FIX_BF16
rounds to nearest even before bf16 stores, as the GPU cast does. Both are inlined: every
nested jit call re-patches the language in the interpreter.
"""

import triton
import triton.language as tl


@triton.jit
def _tile_ids(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    return pid_m, pid_n


@triton.jit
def gemm1_silu_kernel(x_ptr, w13_ptr, act_ptr, sorted_ptr, block_expert_ptr, total_ptr,
                      P, num_pid_m, stride_xt, stride_we, stride_wn,
                      H: tl.constexpr, I: tl.constexpr, TOPK: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, EVEN: tl.constexpr, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), num_pid_m, tl.cdiv(I, BLOCK_N), GROUP_M)
    if pid_m * BLOCK_M >= tl.load(total_ptr):
        return
    e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + rows)
    tok = tl.where(pair < P, pair // TOPK, 0).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)

    a_ptrs = x_ptr + tok[:, None] * stride_xt + ks[None, :]
    g_ptrs = w13_ptr + e * stride_we + cols[None, :].to(tl.int64) * stride_wn + ks[:, None]
    u_ptrs = g_ptrs + I * stride_wn
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        if EVEN:
            a = tl.load(a_ptrs)
            g = tl.load(g_ptrs)
            u = tl.load(u_ptrs)
        else:
            k_ok = ks < H - k0
            w_ok = (cols[None, :] < I) & k_ok[:, None]
            a = tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)
            g = tl.load(g_ptrs, mask=w_ok, other=0.0)
            u = tl.load(u_ptrs, mask=w_ok, other=0.0)
        if UPCAST:
            if FIX_BF16:  # exact bf16 -> fp32 by a 16-bit shift of the raw bits
                a = (a.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                g = (g.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                u = (u.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            else:
                a = a.to(tl.float32)
                g = g.to(tl.float32)
                u = u.to(tl.float32)
        acc_g = tl.dot(a, g, acc_g)
        acc_u = tl.dot(a, u, acc_u)
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    act = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    if FIX_BF16:
        act = ((act.to(tl.uint32, bitcast=True) + 0x7FFF + ((act.to(tl.uint32, bitcast=True) >> 16) & 1))
               >> 16 << 16).to(tl.float32, bitcast=True)
    out_ptrs = act_ptr + rows[:, None].to(tl.int64) * I + cols[None, :]
    if EVEN:
        tl.store(out_ptrs, act.to(act_ptr.dtype.element_ty))
    else:
        tl.store(out_ptrs, act.to(act_ptr.dtype.element_ty), mask=cols[None, :] < I)


@triton.jit
def gemm2_scale_kernel(act_ptr, w2_ptr, y_ptr, weights_ptr, sorted_ptr, block_expert_ptr, total_ptr,
                       P, num_pid_m, stride_we, stride_wn,
                       H: tl.constexpr, I: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, EVEN: tl.constexpr, UPCAST: tl.constexpr, FIX_BF16: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), num_pid_m, tl.cdiv(H, BLOCK_N), GROUP_M)
    if pid_m * BLOCK_M >= tl.load(total_ptr):
        return
    e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + rows)
    valid = pair < P
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)

    a_ptrs = act_ptr + rows[:, None].to(tl.int64) * I + ks[None, :]
    b_ptrs = w2_ptr + e * stride_we + cols[None, :].to(tl.int64) * stride_wn + ks[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, I, BLOCK_K):
        if EVEN:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_ok = ks < I - k0
            a = tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=(cols[None, :] < H) & k_ok[:, None], other=0.0)
        if UPCAST:
            if FIX_BF16:
                a = (a.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
                b = (b.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
            else:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    w = tl.load(weights_ptr + pair, mask=valid, other=0.0)
    acc = acc * w[:, None]
    if FIX_BF16:
        acc = ((acc.to(tl.uint32, bitcast=True) + 0x7FFF + ((acc.to(tl.uint32, bitcast=True) >> 16) & 1))
               >> 16 << 16).to(tl.float32, bitcast=True)
    out_ptrs = y_ptr + pair[:, None].to(tl.int64) * H + cols[None, :]
    tl.store(out_ptrs, acc.to(y_ptr.dtype.element_ty), mask=valid[:, None] & (cols[None, :] < H))


@triton.jit
def combine_kernel(y_ptr, out_ptr, H, TOPK: tl.constexpr, BLOCK_H: tl.constexpr, FIX_BF16: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = cols < H
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for k in tl.static_range(TOPK):
        acc += tl.load(y_ptr + (t * TOPK + k) * H + cols, mask=ok, other=0.0).to(tl.float32)
    if FIX_BF16:
        acc = ((acc.to(tl.uint32, bitcast=True) + 0x7FFF + ((acc.to(tl.uint32, bitcast=True) >> 16) & 1))
               >> 16 << 16).to(tl.float32, bitcast=True)
    tl.store(out_ptr + t * H + cols, acc.to(out_ptr.dtype.element_ty), mask=ok)
