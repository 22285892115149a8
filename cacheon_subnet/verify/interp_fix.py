"""Make Triton's CPU interpreter (TRITON_INTERPRET=1, triton 3.6) compute bf16 like the GPU.

The interpreter stores bf16 as raw uint16 bits: `tl.dot` on bf16 operands multiplies the bit
patterns (garbage), and fp32->bf16 casts truncate instead of rounding to nearest even. A
faithful bf16 kernel would fail CPU verify for reasons that do not exist on the GPU, so the CPU
worker (trusted code, applied before any bundle import) fixes exactly those two operations.

It also bounds the interpreter's memory. Under TRITON_INTERPRET a kernel's pointers are host
addresses and a load or store at any address is plain memory access in the worker process: a
policy-clean kernel followed `str(fn)`'s address into a bundle function's float default and
incremented it in place, a call counter (faithful for 399 calls, wrong from the 400th; it PASSed
CPU verify, red team 2026-12-04). Every load, store and atomic now reaches only the storages of
the tensors its launch was handed (on the GPU too a faithful kernel touches nothing else); any
other address ends the launch with an error.
"""

from __future__ import annotations

import numpy as np

_ACTIVE: list[tuple[int, int]] | None = None  # the running launch's storages [lo, hi)


def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def apply() -> bool:
    """Patch the interpreter builder in place. Returns False when triton's layout is unknown."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter as it
    except ImportError:
        return False
    builder = getattr(it, "InterpreterBuilder", None)
    handle = getattr(it, "TensorHandle", None)
    if builder is None or handle is None or getattr(builder, "_cacheon_fixed", False):
        return bool(builder and getattr(builder, "_cacheon_fixed", False))
    orig_dot, orig_cast = builder.create_dot, builder.cast_impl

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):  # noqa: ANN001
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            ad = _bf16_bits_to_f32(a.data) if a.dtype.scalar == tl.bfloat16 else a.data.astype(np.float32)
            bd = _bf16_bits_to_f32(b.data) if b.dtype.scalar == tl.bfloat16 else b.data.astype(np.float32)
            return handle(np.matmul(ad, bd, dtype=d.data.dtype) + d.data, d.dtype.scalar)
        return orig_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):  # noqa: ANN001
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return handle(_f32_to_bf16_bits(src.data), dst_type.scalar)
        return orig_cast(self, src, dst_type)

    builder.create_dot = create_dot
    builder.cast_impl = cast_impl
    _bound_memory(it, builder)
    builder._cacheon_fixed = True
    return True


class OutOfBounds(RuntimeError):
    """A kernel reached memory outside its launch's tensor arguments (the interpreter's bound)."""


def _storage_ranges(values: object, out: list[tuple[int, int]]) -> None:
    for v in values if isinstance(values, (list, tuple)) else [values]:
        if isinstance(v, (list, tuple)):
            _storage_ranges(v, out)
            continue
        if not hasattr(v, "untyped_storage"):
            v = getattr(v, "base", None)  # TensorWrapper, TensorDescriptor
        if hasattr(v, "untyped_storage"):
            st = v.untyped_storage()
            out.append((st.data_ptr(), st.data_ptr() + st.nbytes()))


_U64_MAX = np.iinfo(np.uint64).max


def check(ptrs: np.ndarray, mask: np.ndarray | None, itemsize: int) -> None:
    """Every address a live lane reads or writes lies inside one storage of the running launch.
    Fast path (a block of lanes inside one tensor): two masked reductions, no copy."""
    p = np.asarray(ptrs)
    if p.dtype != np.uint64:
        p = p.astype(np.uint64)
    live = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), p.shape)
    if live is not None and not live.any():
        return
    ranges = _ACTIVE
    if ranges is None:
        raise OutOfBounds("a memory access outside any kernel launch (interpreter bound)")
    lo = int(p.min(where=live, initial=_U64_MAX)) if live is not None else int(p.min())
    hi = (int(p.max(where=live, initial=0)) if live is not None else int(p.max())) + itemsize
    if any(a <= lo and hi <= b for a, b in ranges):
        return
    flat, alive = p.reshape(-1), (np.ones(p.size, dtype=bool) if live is None else live.reshape(-1))
    inside = np.zeros(flat.shape, dtype=bool)  # lanes spread over several tensors, or one outside all
    for a, b in ranges:
        inside |= (flat >= np.uint64(a)) & (flat + np.uint64(itemsize) <= np.uint64(b))
    bad = alive & ~inside
    if bad.any():
        raise OutOfBounds(
            f"a load/store at {int(flat[bad][0]):#x} lies outside every tensor the launch was handed "
            f"({int(bad.sum())} lanes; the interpreter's bound, cacheon_subnet/verify/interp_fix.py)"
        )


def _itemsize(ptrs) -> int:  # noqa: ANN001
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


def _bound_memory(it, builder) -> None:  # noqa: ANN001
    """Wrap the interpreter's launch (which storages) and its memory ops (the check above)."""
    grid = it.GridExecutor
    orig_init, orig_call = grid._init_args_hst, grid.__call__

    def init_args_hst(self, args_dev, kwargs):  # noqa: ANN001
        global _ACTIVE
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        ranges: list[tuple[int, int]] = []
        _storage_ranges(list(args_hst) + list(kwargs_hst.values()), ranges)
        _ACTIVE = ranges
        return args_hst, kwargs_hst

    def call(self, *args, **kwargs):  # noqa: ANN001
        global _ACTIVE
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            _ACTIVE = None

    orig_load, orig_store = builder.create_masked_load, builder.create_masked_store
    orig_cas, orig_rmw = builder.create_atomic_cas, builder.create_atomic_rmw

    def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):  # noqa: ANN001
        check(ptrs.data, mask.data, _itemsize(ptrs))
        return orig_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy):  # noqa: ANN001
        check(ptrs.data, mask.data, _itemsize(ptrs))
        return orig_store(self, ptrs, value, mask, cache_modifier, eviction_policy)

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):  # noqa: ANN001
        check(ptr.data, None, _itemsize(ptr))
        return orig_cas(self, ptr, cmp, val, sem, scope)

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):  # noqa: ANN001
        check(ptr.data, mask.data, _itemsize(ptr))
        return orig_rmw(self, rmw_op, ptr, val, mask, sem, scope)

    grid._init_args_hst, grid.__call__ = init_args_hst, call
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    builder.create_atomic_cas, builder.create_atomic_rmw = create_atomic_cas, create_atomic_rmw
