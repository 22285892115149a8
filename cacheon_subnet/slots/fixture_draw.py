"""Inputs drawn like the engine's own, from an arena's recorded statistics (issue 34 item 1).

Why: a kernel's time depends on more than its shapes. Fused experts read the weights of every
expert some token picked and run one tile loop per expert's token block, so the tokens-per-expert
histogram sets the work; decode attention's time is the KV it reads, so the per-request lengths
set it. Uniform or hand-shaped draws time another workload than the engine's (the MoE arena's
stock call benched at 12x its in-engine time).

The statistics travel in a case's `constants` (the only free-form field a case carries across
the worker protocol, at most 64 numbers), so the worker and the re-check draw the same inputs
from the seed: `route.<i>` is the i-th highest expert load as a fraction of all picks (a sorted
profile, resampled to at most PROFILE_POINTS points; which expert is hot is drawn), `kvlen.<i>`
the i-th of KV_QUANTILES quantiles of the recorded KV lengths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PROFILE_POINTS = 32
KV_QUANTILES = 17  # 0, 1/16, ..., 1
ROUTE, KVLEN = "route.", "kvlen."


def _resample(xs: Sequence[float], n: int) -> list[float]:
    """`xs` (sorted) linearly interpolated at n evenly spaced points (endpoints kept)."""
    if n == 1 or len(xs) == 1:
        return [float(xs[0])] * n
    out = []
    for i in range(n):
        pos = i * (len(xs) - 1) / (n - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        out.append(float(xs[lo]) + (float(xs[hi]) - float(xs[lo])) * (pos - lo))
    return out


def routing_constants(tokens_per_expert: Sequence[int]) -> dict[str, float]:
    """The case constants for a recorded tokens-per-expert histogram."""
    total = sum(tokens_per_expert)
    load = sorted((n / total for n in tokens_per_expert), reverse=True)
    return {f"{ROUTE}{i}": round(v, 6) for i, v in enumerate(_resample(load, min(len(load), PROFILE_POINTS)))}


def kv_constants(lengths: Sequence[int]) -> dict[str, float]:
    xs = sorted(lengths)
    qs = [xs[round(q * (len(xs) - 1) / (KV_QUANTILES - 1))] for q in range(KV_QUANTILES)]
    return {f"{KVLEN}{i}": float(v) for i, v in enumerate(qs)}


def _series(constants: Mapping[str, float], prefix: str) -> list[float]:
    keys = sorted((int(k[len(prefix) :]), v) for k, v in constants.items() if k.startswith(prefix))
    return [v for _, v in keys]


def from_fixture(constants: Mapping[str, float]) -> bool:
    return any(k.startswith((ROUTE, KVLEN)) for k in constants)


def routing(
    constants: Mapping[str, float], T: int, E: int, K: int, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(topk_weights fp32, topk_ids int32) of T tokens picking K distinct of E experts with the
    recorded load profile (expert identities permuted), or None when the case has none."""
    import torch

    prof = _series(constants, ROUTE)
    if not prof:
        return None
    load = torch.tensor(_resample(prof, E), dtype=torch.float64).clamp(min=1e-9)
    load = load[torch.randperm(E, generator=g)]
    # K distinct picks a token; a load of p_e of all picks is a pick probability ~ p_e per draw
    ids = torch.multinomial(load.expand(T, E).to(torch.float32), K, replacement=False, generator=g)
    w = torch.rand((T, K), generator=g) + 0.05
    return (w / w.sum(dim=-1, keepdim=True)).contiguous(), ids.to(torch.int32).contiguous()


def kv_lengths(constants: Mapping[str, float], B: int, ctx: int, g: torch.Generator) -> torch.Tensor | None:
    """B KV lengths drawn from the recorded quantiles (clamped to [1, ctx], the case's pool), or None."""
    import torch

    qs = _series(constants, KVLEN)
    if not qs:
        return None
    u = torch.rand((B,), generator=g, dtype=torch.float64) * (len(qs) - 1)
    lo = u.floor().long()
    hi = (lo + 1).clamp(max=len(qs) - 1)
    q = torch.tensor(qs, dtype=torch.float64)
    lens = q[lo] + (q[hi] - q[lo]) * (u - lo)
    return lens.round().clamp(1, ctx).to(torch.int64)
