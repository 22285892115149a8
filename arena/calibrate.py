"""Quality limits derived from the measured stock-vs-stock spread, not hand-set.

Every graded run already holds two stock samples: the baseline outputs of the sample that were
mirrored in B windows and those mirrored in B′ windows (different prompts, the same stock
kernels). `stock_spread` grades one half against the other with the same metrics the verdict
uses, and run.py records it beside the verdict (`quality.metrics.stock_spread`). Over repeated
runs (the faithful controls, the handicap control, any real run) that is the distribution of
"how far apart two stock samples of this arena read" — the noise a C-vs-B comparison must
tolerate. `derive_policy` turns it into a `[quality.policy]`:

    delta limits (nll_mean, nll_p99, seq_nll_max)   k x the largest |B′ − B| seen, never below `floor`
    min_agreement_ratio                              1 − k x the largest relative agreement drop
    KL / logprob-delta factors                      k x the largest B′/B ratio (>= 1)
    KL / logprob-delta floors                       k x the largest value either half showed

k = 3 by default, as the speed bar's k_noise. The half samples hold about half the prompts of a
C-vs-B comparison and are unpaired (different prompts), so their spread is wider than a paired
faithful C-vs-B difference: the derived limits are conservative toward faithful kernels. Whether
they still reject the subtle-error controls (examples/controls/subtle_*) is the GPU measurement
docs/arena.md "Calibrating the quality gate" describes; none is recorded yet.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from arena import quality as q

DELTAS = (("nll_mean", "max_nll_mean_delta"), ("nll_p99", "max_nll_p99_delta"),
          ("seq_nll_max", "max_seq_nll_max_delta"))
SCALED = (("kl_mean", "kl_mean_factor", "kl_mean_floor"), ("kl_p99", "kl_p99_factor", "kl_p99_floor"),
          ("logprob_delta_p99", "logprob_delta_p99_factor", "logprob_delta_p99_floor"))


def stock_spread(baseline: Sequence[q.Sequence], baseline_tags: Sequence[str]) -> dict[str, Any] | None:
    """Metrics of the baseline outputs mirrored in B windows vs those in B′ windows (tags end in
    "-B" / "-B'"), or None when either half is empty."""
    halves: dict[str, list[q.Sequence]] = {"B": [], "B'": []}
    for s, tag in zip(baseline, baseline_tags, strict=True):
        role = tag.rsplit("-", 1)[-1]
        if role in halves:
            halves[role].append(s)
    if not halves["B"] or not halves["B'"]:
        return None
    return {"b": asdict(q.metrics(halves["B"])), "b_prime": asdict(q.metrics(halves["B'"]))}


def _f(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def derive_policy(spreads: Iterable[dict[str, Any]], k: float = 3.0, floor: float = 1e-3,
                  base: q.QualityPolicy = q.QualityPolicy()) -> tuple[q.QualityPolicy, dict[str, Any]]:
    """A policy from stock-vs-stock spreads ({"b": metrics, "b_prime": metrics} each); the report
    says, per limit, the largest spread seen and how many runs it rests on."""
    spreads = list(spreads)
    if len(spreads) < 2:
        raise ValueError(f"{len(spreads)} stock-vs-stock spread(s): at least 2 runs are needed to derive limits")
    if k <= 0:
        raise ValueError("k must be > 0")
    out: dict[str, float] = {}
    seen: dict[str, float] = {}
    for metric, key in DELTAS:
        worst = max(abs(_f(s["b_prime"], metric) - _f(s["b"], metric)) for s in spreads)
        seen[metric] = worst
        out[key] = max(floor, k * worst)
    drops = []
    for s in spreads:
        a, b = _f(s["b"], "greedy_agreement"), _f(s["b_prime"], "greedy_agreement")
        drops.append(1 - min(a, b) / max(a, b) if max(a, b) > 0 else 1.0)
    seen["greedy_agreement_drop"] = max(drops)
    out["min_agreement_ratio"] = max(0.0, 1 - k * max(drops))
    for metric, fkey, lkey in SCALED:
        vals = [(_f(s["b"], metric), _f(s["b_prime"], metric)) for s in spreads]
        vals = [(a, b) for a, b in vals if a is not None and b is not None]
        if not vals:
            continue  # not recorded (no top-k): keep the base policy's
        ratios = [max(a, b) / min(a, b) if min(a, b) > 0 else 1.0 for a, b in vals]
        seen[f"{metric}_ratio"] = max(ratios)
        seen[f"{metric}_max"] = max(max(a, b) for a, b in vals)
        out[fkey] = max(1.0, k * max(ratios))
        out[lkey] = k * seen[f"{metric}_max"]
    policy = replace(base, **out)
    return policy, {"runs": len(spreads), "k": k, "floor": floor, "spread": seen, "policy": asdict(policy)}


def spreads_from_results(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The recorded stock spreads of arena result files (resident and confirmation engines)."""
    out = []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        for key in ("quality", "confirm_quality"):
            s = ((doc.get(key) or {}).get("metrics") or {}).get("stock_spread")
            if s:
                out.append(s)
    return out


def policy_toml(policy: q.QualityPolicy) -> str:
    return "[quality.policy]\n" + "".join(f"{k} = {v:.6g}\n" for k, v in asdict(policy).items())
