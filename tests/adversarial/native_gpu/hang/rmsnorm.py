"""A kernel that never returns: the call's deadline kills the worker."""

import torch

import native


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    T, H = x.shape
    if T == 0:
        return
    sfx = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(x.dtype, "f32")
    k = "rms"
    native.launch(f"{k}_{sfx}", grid=(T,), block=(256,), args=(out, x, weight, H, x.stride(0), out.stride(0), eps))
