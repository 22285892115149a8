"""CUDA RMSNorm for slot norm.rmsnorm@1: the kernels are in kernels/rmsnorm.cu (see manifest.toml).

PLACEHOLDER until the validator-owned launcher lands (issue 32, part 2). This wrapper will then
launch one kernel of the op's compiled artifact through one allowlisted call, one block per row:

    launch("rmsnorm_bf16", grid=(T,), block=(256,), args=(out, x, weight, H, x.stride(0), out.stride(0), eps))

Until then `cacheon verify` compiles the kernels behind the sandbox wall, checks them against the
manifest's declaration, runs the static checks on this file, and says that the trials need the
launcher and a GPU; calling this function raises.
"""

import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    raise NotImplementedError("CUDA launch placeholder: the kernel launcher lands with issue 32 part 2")
