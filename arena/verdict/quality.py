"""Grade role outputs against a pristine teacher engine T (teacher forcing), candidate vs stock.

Roles B (stock) and C (candidate) generate greedy continuations of the same prompts; T then
scores each continuation with prompt+continuation as input and returns per-position logprobs and
top-k. A faithful kernel only perturbs numerics, so C's continuations must look as "natural" to T
as B's do. Everything is judged relative to B: the synthetic model, the prompts and bf16 noise
set the baseline, and C may not be worse than that by more than the policy's tolerances.
"""

from __future__ import annotations

import json
import math
from collections import abc
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import numpy as np

LOGPROB_FLOOR = -50.0  # logprobs are clamped here; exp(-50) ~ 2e-22 also floors KL probabilities
TIE_EPS = 1e-6  # a token whose teacher logprob ties the argmax (bf16 logits tie often) agrees
KlEstimator = Literal["rank_cap", "uniform_tail"]


@dataclass(frozen=True)
class Position:
    """One generated position, as seen by a role engine and by T."""

    token: int
    role_logprob: float | None
    role_top: tuple[tuple[int, float], ...]
    teacher_logprob: float
    teacher_top: tuple[tuple[int, float], ...]  # sorted by logprob desc, k >= 1


@dataclass(frozen=True)
class Sequence:
    """One prompt's continuation, position by position."""

    prompt_id: int
    positions: tuple[Position, ...]


@dataclass(frozen=True)
class QualityMetrics:
    """Per-role summary; None where the role recorded nothing to compute it from."""

    n_positions: int
    n_sequences: int
    nll_mean: float
    nll_p99: float
    seq_nll_max: float
    greedy_agreement: float
    first_divergence_mean: float
    logprob_delta_mean: float | None
    logprob_delta_p99: float | None
    kl_mean: float | None
    kl_p99: float | None
    n_kl_positions: int

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite floats as strings)."""
        return _jsonable(asdict(self))


def _clamp(lp: float) -> float:
    """Clamp at LOGPROB_FLOOR; NaN and +inf stay as they are so grading sees them."""
    return lp if math.isnan(lp) else max(float(lp), LOGPROB_FLOOR)


def _probs(top: abc.Sequence[tuple[int, float]]) -> dict[int, float]:
    return {int(tok): math.exp(_clamp(lp)) for tok, lp in top}


def _coarse(top: dict[int, float], support: list[int], vocab_size: int, estimator: KlEstimator) -> np.ndarray:
    """This side's distribution over `support` + one "everything else" bucket (sums to 1)."""
    tail = max(0.0, 1.0 - sum(top.values()))
    missing = [t for t in support if t not in top]
    if estimator == "uniform_tail":
        fill = tail / max(vocab_size - len(top), len(missing), 1)
    else:  # rank_cap: a token outside top-k has p <= the k-th prob, and all of them share tail
        fill = min(min(top.values()), tail / len(missing)) if missing else 0.0
    p = np.array([top.get(t, fill) for t in support] + [0.0], dtype=np.float64)
    p[-1] = max(0.0, 1.0 - p[:-1].sum())
    p = np.maximum(p, math.exp(LOGPROB_FLOOR))
    return p / p.sum()


def kl_topk(
    teacher_top: abc.Sequence[tuple[int, float]],
    role_top: abc.Sequence[tuple[int, float]],
    vocab_size: int,
    estimator: KlEstimator = "rank_cap",
) -> float:
    """KL(teacher || role) estimated from the two top-k lists (non-negative, finite unless NaN in).

    Support S = union of both top-k token sets, plus one bucket for the rest of the vocabulary.
    A token in S that one side did not list gets, from that side:
      * "rank_cap" (default): min(that side's k-th prob, tail / #missing). It is unlisted, so its
        prob is at most the k-th; the cap is generous to the role, so a mere swap at the top-k
        boundary (bf16 noise) costs ~0 while a genuinely different distribution costs a lot.
      * "uniform_tail": tail / (vocab_size - k), the tail spread evenly over the unlisted vocab.
        Simple, but every boundary swap is charged as if the token were deep in the tail.
    tail = max(0, 1 - sum(top-k probs)); the rest bucket takes whatever is left. Probabilities are
    floored at exp(-50) and renormalised, so both sides are full-support distributions on |S|+1
    outcomes and the KL between them is >= 0 and finite. It is the KL of a coarsening (a lower
    bound on the true KL, if the fills were exact), so use it relatively (C vs B), not absolutely.
    """
    t_top, r_top = _probs(teacher_top), _probs(role_top)
    if not t_top or not r_top:
        raise ValueError("kl_topk needs a non-empty top-k on both sides")
    support = sorted(set(t_top) | set(r_top))
    p = _coarse(t_top, support, vocab_size, estimator)
    q = _coarse(r_top, support, vocab_size, estimator)
    kl = float(np.sum(p * (np.log(p) - np.log(q))))
    return kl if math.isnan(kl) else max(0.0, kl)


def _agrees(pos: Position) -> bool:
    top_tok, top_lp = pos.teacher_top[0]
    if pos.token == top_tok:
        return True
    return abs(pos.teacher_logprob - top_lp) <= TIE_EPS


def _p99(values: list[float]) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), 99))


def metrics(
    seqs: abc.Sequence[Sequence],
    *,
    vocab_size: int | None = None,
    kl_estimator: KlEstimator = "rank_cap",
) -> QualityMetrics:
    """Summarise one role's sequences as T saw them. Pass vocab_size for "uniform_tail" KL."""
    nll: list[float] = []
    deltas: list[float] = []
    kls: list[float] = []
    seq_nll: list[float] = []
    first_div: list[float] = []
    agree = 0
    if vocab_size is None:  # lower bound on the vocab: the largest token id seen anywhere
        ids = [0]
        for s in seqs:
            for pos in s.positions:
                ids.append(pos.token)
                ids.extend(t for t, _ in pos.teacher_top)
                ids.extend(t for t, _ in pos.role_top)
        vocab_size = max(ids) + 1
    for s in seqs:
        if not s.positions:
            continue
        first = len(s.positions)
        this_nll: list[float] = []
        for i, pos in enumerate(s.positions):
            if not pos.teacher_top:
                raise ValueError(f"prompt {s.prompt_id} position {i}: empty teacher_top")
            this_nll.append(-_clamp(pos.teacher_logprob))
            if _agrees(pos):
                agree += 1
            elif first == len(s.positions):
                first = i
            if pos.role_logprob is not None:
                deltas.append(abs(_clamp(pos.role_logprob) - _clamp(pos.teacher_logprob)))
            if pos.role_top:
                kls.append(kl_topk(pos.teacher_top, pos.role_top, vocab_size, kl_estimator))
        nll.extend(this_nll)
        seq_nll.append(float(np.mean(this_nll)))
        first_div.append(first / len(s.positions))
    if not nll:
        raise ValueError("quality metrics need at least one generated position")
    return QualityMetrics(
        n_positions=len(nll),
        n_sequences=len(seq_nll),
        nll_mean=float(np.mean(nll)),
        nll_p99=_p99(nll),
        seq_nll_max=float(np.max(seq_nll)),
        greedy_agreement=agree / len(nll),
        first_divergence_mean=float(np.mean(first_div)),
        logprob_delta_mean=float(np.mean(deltas)) if deltas else None,
        logprob_delta_p99=_p99(deltas) if deltas else None,
        kl_mean=float(np.mean(kls)) if kls else None,
        kl_p99=_p99(kls) if kls else None,
        n_kl_positions=len(kls),
    )


@dataclass(frozen=True)
class QualityPolicy:
    """Tolerances for C relative to B; the arena config may override any field.

    Defaults, and why:
      * min_stock_agreement 0.5: if stock B's own greedy tokens are T's argmax less than half the
        time, B and T disagree on the model itself (arena broken) and nothing can be judged.
      * max_nll_mean_delta 0.02 nats: a faithful kernel flips a few near-tied argmaxes; each flip
        costs ~the top-2 gap (tenths of a nat) on a small fraction of positions -> ~0.01.
      * max_nll_p99_delta / max_seq_nll_max_delta 0.25 nats: tail positions and the worst prompt
        are noisier (few samples), but a broken kernel moves them by nats, not tenths.
      * min_agreement_ratio 0.98: C may lose 2 % of B's argmax agreement to tie flips.
      * KL and |role logprob - teacher logprob| p99/mean: at most factor * B's value, never
        below the floor -- B can be ~bit-identical to T, and a faithful kernel with different
        rounding must still pass (bf16 logit noise ~1e-2 gives KL ~1e-4, logprob error ~1e-2).
    """

    min_stock_agreement: float = 0.5
    max_nll_mean_delta: float = 0.02
    max_nll_p99_delta: float = 0.25
    max_seq_nll_max_delta: float = 0.25
    min_agreement_ratio: float = 0.98
    kl_mean_factor: float = 3.0
    kl_mean_floor: float = 1e-3
    kl_p99_factor: float = 3.0
    kl_p99_floor: float = 1e-2
    logprob_delta_p99_factor: float = 3.0
    logprob_delta_p99_floor: float = 0.1

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"quality policy {f.name} must be a finite number, got {v!r}")
            if v < 0:
                raise ValueError(f"quality policy {f.name} must be >= 0, got {v!r}")
        for name in ("min_agreement_ratio", "min_stock_agreement"):
            if getattr(self, name) > 1:
                raise ValueError(f"quality policy {name} must be <= 1, got {getattr(self, name)}")

    @classmethod
    def from_mapping(cls, d: abc.Mapping[str, Any]) -> QualityPolicy:
        """Defaults overridden by d; an unknown key is a config typo, so it is an error."""
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise ValueError(f"unknown quality policy key {key!r}; known: {sorted(known)}")
        return cls(**{k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in d.items()})

    def to_json(self) -> dict[str, Any]:
        """Plain dict of every limit, for the result file."""
        return asdict(self)


@dataclass(frozen=True)
class QualityVerdict:
    """Outcome; each reason names the metric, C's value, B's value and the limit."""

    verdict: Literal["PASS", "FAIL", "NO_DECISION"]
    reasons: tuple[str, ...]
    metrics: dict[str, Any]  # {"b", "c", "policy", "limits"}: what the verdict was computed from

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite floats as strings)."""
        doc = {"verdict": self.verdict, "reasons": list(self.reasons), "metrics": self.metrics}
        return _jsonable(doc)


def _nonfinite(m: QualityMetrics) -> list[str]:
    return [f.name for f in fields(m) if isinstance(getattr(m, f.name), float) and not math.isfinite(getattr(m, f.name))]


def grade(b: QualityMetrics, c: QualityMetrics, policy: QualityPolicy) -> QualityVerdict:
    """PASS when C is not worse than B beyond the policy; NO_DECISION when B can't anchor."""
    limits: dict[str, float] = {}
    doc: dict[str, Any] = {"b": asdict(b), "c": asdict(c), "policy": asdict(policy)}
    doc["limits"] = limits
    bad_b = _nonfinite(b)
    if bad_b or b.greedy_agreement < policy.min_stock_agreement:
        why = (
            f"stock metrics non-finite: {', '.join(bad_b)}"
            if bad_b
            else f"greedy_agreement: B={b.greedy_agreement:.6g} < "
            f"min_stock_agreement={policy.min_stock_agreement:.6g}; stock outputs are not "
            "stable under teacher forcing, so the arena cannot judge"
        )
        return QualityVerdict("NO_DECISION", (why,), doc)
    bad_c = _nonfinite(c)
    if bad_c:
        return QualityVerdict("FAIL", tuple(f"{n}: C is non-finite" for n in bad_c), doc)

    reasons: list[str] = []

    def upper(name: str, cv: float | None, bv: float | None, limit: float) -> None:
        limits[name] = limit
        if cv is None:
            reasons.append(f"{name}: C not recorded, B={bv:.6g}, limit<={limit:.6g}")
        elif cv > limit:
            reasons.append(f"{name}: C={cv:.6g} B={bv:.6g} limit<={limit:.6g}")

    upper("nll_mean", c.nll_mean, b.nll_mean, b.nll_mean + policy.max_nll_mean_delta)
    upper("nll_p99", c.nll_p99, b.nll_p99, b.nll_p99 + policy.max_nll_p99_delta)
    upper("seq_nll_max", c.seq_nll_max, b.seq_nll_max, b.seq_nll_max + policy.max_seq_nll_max_delta)
    floor = policy.min_agreement_ratio * b.greedy_agreement
    limits["greedy_agreement"] = floor
    if c.greedy_agreement < floor:
        reasons.append(f"greedy_agreement: C={c.greedy_agreement:.6g} B={b.greedy_agreement:.6g} limit>={floor:.6g}")
    scaled = (
        ("kl_mean", c.kl_mean, b.kl_mean, policy.kl_mean_factor, policy.kl_mean_floor),
        ("kl_p99", c.kl_p99, b.kl_p99, policy.kl_p99_factor, policy.kl_p99_floor),
        (
            "logprob_delta_p99",
            c.logprob_delta_p99,
            b.logprob_delta_p99,
            policy.logprob_delta_p99_factor,
            policy.logprob_delta_p99_floor,
        ),
    )
    for name, cv, bv, factor, fl in scaled:
        if bv is not None:  # B recorded it: C must have too, within max(factor * B, floor)
            upper(name, cv, bv, max(factor * bv, fl))
    return QualityVerdict("FAIL" if reasons else "PASS", tuple(reasons), doc)


def _jsonable(x: Any) -> Any:
    """JSON has no NaN/Infinity: write them as strings so a dump stays valid and readable."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def verdict_to_json(v: QualityVerdict) -> dict[str, Any]:
    """JSON-safe dict of a verdict (same as v.to_json())."""
    return v.to_json()


def dumps(obj: QualityMetrics | QualityVerdict | QualityPolicy) -> str:
    """Stable (sorted-key) strict JSON text for metrics, a verdict or a policy."""
    return json.dumps(obj.to_json(), sort_keys=True, indent=2, allow_nan=False)
