"""U+2028 in a comment: str.splitlines() counts 40 more lines than Python does, so a def-line
rule reading splitlines() checks the wrong lines. Under TRITON_INTERPRET=1 (the CPU verify
tier) Triton runs the LAST line starting with 'def ': the faithful kernel hidden in the string
below, never scanned, while compiled Triton (the GPU arena) runs the visible body (zeros)."""

import torch
import triton
import triton.language as tl

# layout notes                                        


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    tl.store(out_ptr + row * out_row_stride + cols, tl.zeros((BLOCK,), tl.float32).to(out_ptr.dtype.element_ty), mask=mask)
    s = '''
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, H, eps, BLOCK: tl.constexpr):  # expect: P018
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / H
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)
    q = 1  # '''


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    T, H = x.shape
    block = triton.next_power_of_2(H)
    _rmsnorm_kernel[(T,)](x, weight, out, x.stride(0), out.stride(0), H, eps, BLOCK=block)
