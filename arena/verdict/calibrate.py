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
    (a mean's spread — NLL mean, agreement, KL mean — first scaled from half to full sample size, 1/√2)
    KL / logprob-delta factors                      1 + k x (the largest B′/B ratio − 1)
    KL / logprob-delta floors                       k x the largest |B′ − B|

k = 3 by default, as the speed bar's k_noise. The half samples hold about half the prompts of a
C-vs-B comparison and are unpaired (different prompts), so their spread is wider than a paired
faithful C-vs-B difference: the derived limits are conservative toward faithful kernels. Whether
they still reject the subtle-error controls (examples/controls/subtle_*) is the GPU measurement
docs/arena.md "Calibrating the quality gate" describes; none is recorded yet.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from arena.verdict import quality as q

DELTAS = (("nll_mean", "max_nll_mean_delta"), ("nll_p99", "max_nll_p99_delta"), ("seq_nll_max", "max_seq_nll_max_delta"))
SCALED = (
    ("kl_mean", "kl_mean_factor", "kl_mean_floor"),
    ("kl_p99", "kl_p99_factor", "kl_p99_floor"),
    ("logprob_delta_p99", "logprob_delta_p99_factor", "logprob_delta_p99_floor"),
)


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


def _need(d: dict[str, Any], key: str) -> float:
    """A metric every spread records: missing or not a number is a ValueError naming it."""
    v = _f(d, key)
    if v is None:
        raise ValueError(f"stock-vs-stock spread: metric {key!r} is {d.get(key)!r}, not a number")
    return v


MEANS = frozenset({"nll_mean", "greedy_agreement", "kl_mean"})  # per-position means: their spread shrinks with n


def _scale(spread: dict[str, Any], metric: str, full_sample: bool) -> float:
    """What a spread between the two halves of a sample (n1 and n2 sequences) becomes between two
    full samples of n1 + n2 each, which is what a verdict compares (C's sample against B's): for
    a mean, whose difference has s.e. ∝ sqrt(1/n_a + 1/n_b), sqrt((2/(n1+n2)) / (1/n1 + 1/n2)),
    1/√2 for equal halves. Tails (p99, worst sequence) and ratios of tails are left unscaled: a
    larger sample reaches further into a tail, so they do not shrink like a mean."""
    if not full_sample or metric not in MEANS:
        return 1.0
    n1, n2 = _f(spread["b"], "n_sequences") or 0.0, _f(spread["b_prime"], "n_sequences") or 0.0
    if n1 <= 0 or n2 <= 0:
        return 1.0
    return math.sqrt((2.0 / (n1 + n2)) / (1.0 / n1 + 1.0 / n2))


def derive_policy(
    spreads: Iterable[dict[str, Any]],
    k: float = 3.0,
    floor: float = 1e-3,
    base: q.QualityPolicy = q.QualityPolicy(),
    full_sample: bool = True,
) -> tuple[q.QualityPolicy, dict[str, Any]]:
    """A policy from stock-vs-stock spreads ({"b": metrics, "b_prime": metrics} each); the report
    says, per limit, the largest spread seen and how many runs it rests on. full_sample: the
    policy judges full samples (a verdict's C against B), so mean metrics' half-sample spreads
    are scaled to that size (`_scale`); False: it judges half samples (leave_one_out)."""
    spreads = list(spreads)
    if len(spreads) < 2:
        raise ValueError(f"{len(spreads)} stock-vs-stock spread(s): at least 2 runs are needed to derive limits")
    if k <= 0:
        raise ValueError("k must be > 0")
    out: dict[str, float] = {}
    seen: dict[str, float] = {}
    for metric, key in DELTAS:
        seen[metric] = max(abs(_need(s["b_prime"], metric) - _need(s["b"], metric)) for s in spreads)
        worst = max(
            abs(_need(s["b_prime"], metric) - _need(s["b"], metric)) * _scale(s, metric, full_sample) for s in spreads
        )
        out[key] = max(floor, k * worst)
    drops, scaled_drops = [], []
    for s in spreads:
        a, b = _need(s["b"], "greedy_agreement"), _need(s["b_prime"], "greedy_agreement")
        drops.append(1 - min(a, b) / max(a, b) if max(a, b) > 0 else 1.0)
        scaled_drops.append(drops[-1] * _scale(s, "greedy_agreement", full_sample))
    seen["greedy_agreement_drop"] = max(drops)
    out["min_agreement_ratio"] = max(0.0, 1 - k * max(scaled_drops))
    for metric, fkey, lkey in SCALED:
        raw = [(_f(s["b"], metric), _f(s["b_prime"], metric), _scale(s, metric, full_sample)) for s in spreads]
        vals = [(a, b, c) for a, b, c in raw if a is not None and b is not None]
        if not vals:
            continue  # not recorded (no top-k): keep the base policy's
        ratios = [max(a, b) / min(a, b) if min(a, b) > 0 else 1.0 for a, b, _ in vals]
        seen[f"{metric}_ratio"] = max(ratios)
        seen[f"{metric}_max"] = max(max(a, b) for a, b, _ in vals)
        seen[f"{metric}_delta"] = max(abs(a - b) for a, b, _ in vals)
        ratios = [1.0 + (r - 1.0) * c for r, (_, _, c) in zip(ratios, vals)]
        deltas = [abs(a - b) * c for a, b, c in vals]
        # the relative twin of the delta limits: C may exceed B by k x the stock excess. The floor
        # (for a B near zero, where a ratio says nothing) is k x the absolute spread, not k x the
        # level: on a real model B's KL to T is ~5e-4 (batch-dependent bf16 numerics), and a floor
        # of k x that level made the factor moot (session 11's first reading: floor 1.6e-3)
        out[fkey] = 1.0 + k * (max(ratios) - 1.0)
        out[lkey] = k * max(deltas)
    policy = replace(base, **out)
    return policy, {
        "runs": len(spreads),
        "k": k,
        "floor": floor,
        "full_sample": full_sample,
        "spread": seen,
        "policy": asdict(policy),
    }


CONTROLS = frozenset({"handicap", "slowdown", "stock-as-candidate"})  # the arena's own kernels in the C route


def shipped_digests(examples: Path) -> frozenset[str]:
    """Digests of the bundles shipped under `examples` (the faithful examples and the controls)."""
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.errors import BundleError

    out = set()
    for manifest in sorted(examples.rglob("manifest.toml")):
        try:
            out.add(load_bundle(manifest.parent).digest)
        except BundleError:
            continue  # a deliberately broken control (a bad manifest) runs in no arena
    return frozenset(out)


def trusted(doc: dict[str, Any], digests: frozenset[str]) -> bool:
    """A result whose stock spread may set limits: a run of a shipped bundle or of the arena's own
    controls. Any other run's B windows shared an engine with contribution code, so its spread is
    one a miner could widen (leftover state, a hot GPU) to loosen every later verdict's limits."""
    d = doc.get("bundle_digest")
    # a head-to-head run (`baseline` "incumbent <digest> ..."): its B and B' windows ran the crowned
    # bundle, a miner's code, whatever ran as C; only a stock baseline (or the handicap control's
    # stock + spin) is the arena's own (red team: a shipped example measured against a crown)
    baseline = doc.get("baseline")
    if not (isinstance(baseline, str) and (baseline == "stock" or baseline.startswith("stock + "))):
        return False
    return d in digests or (d in CONTROLS and doc.get("control") == d)


def spreads_from_results(paths: Iterable[str | Path], digests: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """The recorded stock spreads of arena result files (resident and confirmation engines);
    with `digests`, only those of trusted runs (`trusted`)."""
    out = []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        if digests is not None and not trusted(doc, digests):
            continue
        for key in ("quality", "confirm_quality"):
            s = ((doc.get(key) or {}).get("metrics") or {}).get("stock_spread")
            if s:
                out.append(s)
    return out


def policy_toml(policy: q.QualityPolicy) -> str:
    return "[quality.policy]\n" + "".join(f"{k} = {v:.6g}\n" for k, v in asdict(policy).items())


def _metrics(d: dict[str, Any]) -> q.QualityMetrics:
    """A recorded metrics dict (non-finite values written as strings) back into QualityMetrics."""

    def num(v: Any) -> Any:
        return float(v) if isinstance(v, str) else v

    return q.QualityMetrics(**{k: num(v) for k, v in d.items() if k in q.QualityMetrics.__dataclass_fields__})


def regrade(doc: dict[str, Any], policy: q.QualityPolicy) -> list[tuple[str, str, tuple[str, ...]]]:
    """(stage, verdict, reasons) of a recorded result's graded stages under another policy: the
    C-vs-B metrics the arena recorded, judged again (no engine)."""
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for key in ("quality", "confirm_quality"):
        m = ((doc.get(key) or {}).get("metrics")) or {}
        if "b" in m and "c" in m:
            v = q.grade(_metrics(m["b"]), _metrics(m["c"]), policy)
            out.append((key, v.verdict, v.reasons))
    return out


def leave_one_out(spreads: Sequence[dict[str, Any]], k: float = 3.0) -> list[dict[str, Any]]:
    """An out-of-sample false-reject reading: each stock spread in turn is held out, the policy is
    derived from the others, and the held-out pair is graded both ways (B′ as the candidate
    against B, and B against B′). Both halves ran stock kernels, so every FAIL is a false reject
    of a kernel exactly as faithful as stock (at half the sample size the policy was derived on)."""
    if len(spreads) < 3:
        raise ValueError(f"{len(spreads)} stock spread(s): leave-one-out needs at least 3")
    rows = []
    for i, held in enumerate(spreads):
        policy, _ = derive_policy([s for j, s in enumerate(spreads) if j != i], k=k, full_sample=False)
        b, bp = _metrics(held["b"]), _metrics(held["b_prime"])
        for name, base, cand in (("B'-vs-B", b, bp), ("B-vs-B'", bp, b)):
            v = q.grade(base, cand, policy)
            rows.append({"held_out": i, "direction": name, "verdict": v.verdict, "reasons": list(v.reasons)})
    return rows
