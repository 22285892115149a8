"""Correctness of one side: an eager call on NaN-filled outputs, compared with stock (max |d|) and
with the slot's fp32 reference under the slot's tolerance; a config outside it is never "best"."""

from __future__ import annotations

from typing import Any

from attnsweep.sides import Candidate


def check(fn: Any, ref: Any, stock_out: Any, tol: Any, device: Any) -> tuple[str, str, dict[str, float | None]]:
    """(status, detail, numbers): one eager call on NaN-filled outputs and scratch."""
    import torch

    from cacheon_subnet.slots.compare import compare

    for v in fn.s.values():
        v.fill_(float("nan"))
    try:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a config the compiler or the GPU refuses
        msg = str(e).strip().splitlines()
        return "error", f"{type(e).__name__}: {msg[-1] if msg else ''}"[:240], {}
    if isinstance(fn, Candidate) and fn.calls == 0:
        return "error", "the example did not consult _launch_config: the sweep cannot set its config", {}
    out = fn.out.detach().float().cpu()
    c = compare(out, ref, tol)
    nums = {
        "max_abs_vs_ref": c.max_abs,
        "rel_l2_vs_ref": c.rel_l2,
        "max_abs_vs_stock": (float((out - stock_out).abs().max()) if stock_out is not None else None),
    }
    return ("ok" if c.ok else "wrong"), ("" if c.ok else c.detail), nums
