"""Stock gated activation exactly as SiluAndMul.forward_cuda reaches it (activation.py:98-103):
`silu_and_mul(x, out)` from sglang.jit_kernel.activation (tvm-ffi JIT kernel behind the torch
custom op `_run_activation_inplace`; imported by value at activation.py:56-62)."""

from __future__ import annotations

from collections.abc import Callable


def _silu_and_mul() -> Callable[..., None]:
    """sglang.jit_kernel.activation.silu_and_mul (writes into the caller's out)"""
    from sglang.jit_kernel.activation import silu_and_mul

    def run(x, out):  # noqa: ANN001
        silu_and_mul(x, out)

    return run


STOCK = {"activation.silu_and_mul": _silu_and_mul}
