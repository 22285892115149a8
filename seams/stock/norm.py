"""Stock RMSNorm kernels exactly as RMSNorm.forward_cuda reaches them (layernorm.py:322-326)."""

from __future__ import annotations

from collections.abc import Callable


def _rmsnorm() -> Callable[..., None]:
    """sgl_kernel.rmsnorm (flashinfer.norm in eager when importable, else torch.ops.sgl_kernel)"""
    from sgl_kernel import rmsnorm

    def run(x, weight, out, eps):  # noqa: ANN001
        rmsnorm(x, weight, eps, out=out)

    return run


def _fused_add_rmsnorm() -> Callable[..., None]:
    """sgl_kernel.fused_add_rmsnorm (in place on x and residual)"""
    from sgl_kernel import fused_add_rmsnorm

    def run(x, residual, weight, eps):  # noqa: ANN001
        fused_add_rmsnorm(x, residual, weight, eps)

    return run


STOCK = {"norm.rmsnorm": _rmsnorm, "norm.fused_add_rmsnorm": _fused_add_rmsnorm}
