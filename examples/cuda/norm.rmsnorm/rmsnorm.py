"""CUDA RMSNorm for slot norm.rmsnorm@1: the kernels are in kernels/rmsnorm.cu (see manifest.toml).

The wrapper picks the kernel for the dtype and launches it through the validator's launcher, one
block of 256 threads per row. `native.launch` takes a kernel of this op's own compiled artifact,
the grid and block, and the arguments in the order manifest.toml declares them: tensors pass as
device pointers (only this call's tensors, or `native.scratch` of this call), ints and floats as
the declared i32/i64/f32. Every argument is checked before anything reaches the GPU.
"""

import native
import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    T, H = x.shape
    if T == 0:
        return
    if x.dtype == torch.bfloat16:
        kernel = "rmsnorm_bf16"
    elif x.dtype == torch.float16:
        kernel = "rmsnorm_f16"
    else:
        kernel = "rmsnorm_f32"
    native.launch(kernel, grid=(T,), block=(256,), args=(out, x, weight, H, x.stride(0), out.stride(0), eps))
