"""SiluAndMul.forward_cuda (activation.py:98): x[..., 2D] -> silu(gate) * up [..., D]."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seams.dispatch import run


def _around(original: Callable[..., Any], self: Any, x: Any) -> Any:
    if x.dim() >= 2 and x.numel() > 0 and x.shape[-1] % 2 == 0 and x.is_contiguous():
        flat = x.view(-1, x.shape[-1])
        got = run("activation.silu_and_mul", {"x": flat}, {})
        if got is not None:
            return got["out"].view(*x.shape[:-1], x.shape[-1] // 2)
    return original(self, x)


def hooks() -> dict[str, Callable[..., Any]]:
    return {"sglang.srt.layers.activation:SiluAndMul.forward_cuda": _around}
