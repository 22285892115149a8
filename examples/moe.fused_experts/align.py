"""Sort (token, pick) pairs by expert and pad every expert's run to a multiple of BLOCK_M.

Two launches, one program per expert, no atomics (so the order is deterministic) and no host
reads: `counts` is filled by the first launch; the second derives each expert's offset from
the padded counts of lower experts, writes its pair ids in pick order, fills the padding with
the sentinel P (= number of pairs), labels its blocks with the expert id and (program 0)
stores the padded total that the GEMMs use to exit early.

Loops over runtime extents are `while` loops: they compile to scf.while on GPU (these loops
need no software pipelining) and, unlike `range(runtime_int)`, also run in TRITON_INTERPRET
with NumPy >= 2.4, which refuses int() of the interpreter's 1-element scalar arrays.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _count_kernel(ids_ptr, counts_ptr, P, CHUNK: tl.constexpr):
    e = tl.program_id(0)
    acc = tl.zeros((CHUNK,), dtype=tl.int32)
    start = 0
    while start < P:
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + offs, mask=offs < P, other=-1)
        acc += (ids == e).to(tl.int32)
        start += CHUNK
    tl.store(counts_ptr + e, tl.sum(acc, axis=0))


@triton.jit
def _place_kernel(ids_ptr, counts_ptr, sorted_ptr, block_expert_ptr, total_ptr, P, E,
                  BLOCK_M: tl.constexpr, E_POW2: tl.constexpr, CHUNK: tl.constexpr):
    e = tl.program_id(0)
    ev = tl.arange(0, E_POW2)
    counts = tl.load(counts_ptr + ev, mask=ev < E, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    offset = tl.sum(tl.where(ev < e, padded, 0), axis=0)
    mine = tl.sum(tl.where(ev == e, counts, 0), axis=0)
    mine_padded = tl.sum(tl.where(ev == e, padded, 0), axis=0)
    if e == 0:
        tl.store(total_ptr, tl.sum(padded, axis=0))

    seen = 0
    start = 0
    while start < P:
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + offs, mask=offs < P, other=-1)
        hit = (ids == e).to(tl.int32)
        rank = seen + tl.cumsum(hit, axis=0) - hit
        tl.store(sorted_ptr + offset + rank, offs, mask=hit != 0)
        seen += tl.sum(hit, axis=0)
        start += CHUNK

    pad = mine + tl.arange(0, BLOCK_M)
    tl.store(sorted_ptr + offset + pad, tl.full((BLOCK_M,), 0, tl.int32) + P, mask=pad < mine_padded)
    first_block = offset // BLOCK_M
    n_blocks = mine_padded // BLOCK_M
    b = 0
    while b < n_blocks:
        blk = b + tl.arange(0, CHUNK)
        tl.store(block_expert_ptr + first_block + blk, tl.full((CHUNK,), 0, tl.int32) + e, mask=blk < n_blocks)
        b += CHUNK


def max_padded_rows(P: int, E: int, block_m: int) -> int:
    """Worst case over every routing: at most min(E, P) experts are active, each padded by
    fewer than BLOCK_M rows. Depends on shapes only, so grids sized by it are graph safe."""
    bound = P + min(E, P) * (block_m - 1)
    return triton.cdiv(bound, block_m) * block_m


def align(topk_ids: torch.Tensor, E: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted pair ids [max_rows], expert of each block [max_rows / BLOCK_M], padded total [1])."""
    P = topk_ids.numel()
    dev = topk_ids.device
    max_rows = max_padded_rows(P, E, block_m)
    counts = torch.empty((E,), dtype=torch.int32, device=dev)
    sorted_ids = torch.empty((max_rows,), dtype=torch.int32, device=dev)
    block_expert = torch.empty((max_rows // block_m,), dtype=torch.int32, device=dev)
    total = torch.empty((1,), dtype=torch.int32, device=dev)
    chunk = min(1024, max(16, triton.next_power_of_2(P)))
    _count_kernel[(E,)](topk_ids, counts, P, CHUNK=chunk, num_warps=4)
    _place_kernel[(E,)](topk_ids, counts, sorted_ids, block_expert, total, P, E, BLOCK_M=block_m,
                        E_POW2=triton.next_power_of_2(E), CHUNK=chunk, num_warps=4)
    return sorted_ids, block_expert, total
