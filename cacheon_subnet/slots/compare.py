"""Comparison of a candidate output against the high-precision reference."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cacheon_subnet.slots.spec import Tolerance


@dataclass(frozen=True)
class Comparison:
    ok: bool
    matched: float
    max_abs: float
    rel_l2: float
    bad: int
    total: int
    first_bad: tuple[int, ...] | None
    detail: str


def nonfinite_count(t: torch.Tensor) -> int:
    if not t.is_floating_point():
        return 0
    return int((~torch.isfinite(t)).sum())


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    """Element-wise tolerance, matched fraction and relative L2 error. NaN/Inf never pass."""
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(
            False,
            0.0,
            float("inf"),
            float("inf"),
            out.numel(),
            out.numel(),
            None,
            f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}",
        )
    total = max(1, out.numel())
    if tol.exact or not ref.is_floating_point():
        eq = out.to(torch.int64) == ref.to(torch.int64)
        bad = int((~eq).sum())
        first = _first(~eq)
        matched = 1.0 - bad / total
        ok = matched >= tol.min_matched
        return Comparison(
            ok, matched, float(bad > 0), 0.0, bad, total, first, f"{bad}/{total} elements differ" if bad else "exact"
        )
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    finite = torch.isfinite(o)
    diff = (o - r).abs()
    within = (diff <= tol.atol + tol.rtol * r.abs()) & finite
    bad = int((~within).sum())
    matched = 1.0 - bad / total
    max_abs = float(diff[finite].max()) if bool(finite.any()) else float("inf")
    ref_norm = float(r.norm())
    rel_l2 = float((o - r).norm()) / max(ref_norm, 1e-30) if bool(finite.all()) else float("inf")
    ok = bool(finite.all()) and matched >= tol.min_matched
    detail = f"matched {matched:.6f} (need {tol.min_matched}), max|d| {max_abs:.3g}, rel_l2 {rel_l2:.3g}"
    if tol.max_rel_l2 is not None and rel_l2 > tol.max_rel_l2:
        ok = False
        detail += f" > {tol.max_rel_l2}"
    return Comparison(ok, matched, max_abs, rel_l2, bad, total, _first(~within), detail)


def _first(mask: torch.Tensor) -> tuple[int, ...] | None:
    idx = mask.nonzero()
    return tuple(int(i) for i in idx[0]) if len(idx) else None
