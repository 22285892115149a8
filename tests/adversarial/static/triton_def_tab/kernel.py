"""A tab after 'def': TRITON_INTERPRET finds no line starting with 'def ' in the kernel's block,
so it executes the block's LAST line alone as the kernel's source: here the tail of a string,
which binds the kernel's name to an unscanned lambda (any Python, in the CPU verify worker)."""

import torch
import triton
import triton.language as tl


@triton.jit
def	_rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, H, eps, BLOCK: tl.constexpr):  # expect: P018
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / H
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)
    s = '''
_rmsnorm_kernel = lambda *a, **kw: __import__("os").getpid()  # '''


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    T, H = x.shape
    block = triton.next_power_of_2(H)
    _rmsnorm_kernel[(T,)](x, weight, out, x.stride(0), out.stride(0), H, eps, BLOCK=block)
