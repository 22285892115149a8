"""Teacher-forced quality grading: metrics, the KL estimator, and every gate of grade()."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest

from arena.verdict.quality import (
    Position,
    QualityPolicy,
    Sequence,
    dumps,
    grade,
    kl_topk,
    metrics,
    verdict_to_json,
)

VOCAB = 1000
K = 5


def _top(rng: random.Random, first: int) -> tuple[tuple[int, float], ...]:
    """A peaked top-k: `first` holds ~0.6, then decreasing, tail ~0.1."""
    others = rng.sample([t for t in range(VOCAB) if t != first], K - 1)
    probs = [0.6, 0.15, 0.08, 0.04, 0.03]
    return tuple((tok, math.log(p)) for tok, p in zip([first, *others], probs))


def _role(
    seed: int = 0,
    *,
    n_seq: int = 8,
    length: int = 50,
    off_argmax: float = 0.0,
    nll_shift: float = 0.0,
    noise: float = 1e-3,
    role_top: bool = True,
) -> list[Sequence]:
    """Synthetic role outputs scored by a teacher; `off_argmax` of tokens are T's 2nd choice."""
    rng = random.Random(seed)
    seqs = []
    for pid in range(n_seq):
        positions = []
        for _ in range(length):
            teacher = _top(rng, rng.randrange(VOCAB))
            pick = 1 if rng.random() < off_argmax else 0
            tok, t_lp = teacher[pick]
            t_lp -= nll_shift
            r_lp = t_lp + rng.uniform(-noise, noise)
            rtop = tuple((t, lp + rng.uniform(-noise, noise)) for t, lp in teacher)
            positions.append(Position(tok, r_lp, rtop if role_top else (), t_lp, teacher))
        seqs.append(Sequence(pid, tuple(positions)))
    return seqs


B = metrics(_role(0))


def test_stock_metrics_are_sane() -> None:
    assert B.n_positions == 400 and B.n_sequences == 8
    assert B.greedy_agreement == 1.0 and B.first_divergence_mean == 1.0
    assert B.nll_mean == pytest.approx(-math.log(0.6))
    assert B.logprob_delta_p99 is not None and B.logprob_delta_p99 <= 1e-3
    assert B.kl_mean is not None and 0.0 <= B.kl_mean < 1e-4


def test_identical_candidate_passes() -> None:
    c = metrics(_role(0))
    assert c == B
    v = grade(B, c, QualityPolicy())
    assert v.verdict == "PASS" and v.reasons == ()


def test_other_faithful_candidate_passes() -> None:
    c = metrics(_role(1, noise=2e-3))
    assert grade(B, c, QualityPolicy()).verdict == "PASS"


def test_off_argmax_candidate_fails_on_agreement() -> None:
    c = metrics(_role(0, off_argmax=0.2))
    assert 0.7 < c.greedy_agreement < 0.9
    assert c.first_divergence_mean < 0.5
    v = grade(B, c, QualityPolicy())
    assert v.verdict == "FAIL"
    assert any(r.startswith("greedy_agreement:") for r in v.reasons)
    r = next(r for r in v.reasons if r.startswith("greedy_agreement:"))
    assert f"C={c.greedy_agreement:.6g}" in r and "B=1" in r and "limit>=0.98" in r


def test_agreement_gate_alone() -> None:
    """Only agreement is worse: no other gate may be what fails it."""
    c = replace(B, greedy_agreement=0.9)
    v = grade(B, c, QualityPolicy())
    assert v.verdict == "FAIL" and len(v.reasons) == 1
    assert v.reasons[0].startswith("greedy_agreement:")
    assert grade(B, c, QualityPolicy(min_agreement_ratio=0.85)).verdict == "PASS"


def test_raised_nll_fails_on_nll() -> None:
    c = metrics(_role(0, nll_shift=0.05))
    v = grade(B, c, QualityPolicy())
    assert v.verdict == "FAIL"
    assert any(r.startswith("nll_mean:") for r in v.reasons)
    assert not any(r.startswith("greedy_agreement") for r in v.reasons)


def test_nll_tail_gates() -> None:
    c = replace(B, nll_p99=B.nll_p99 + 0.3)
    assert [r.split(":")[0] for r in grade(B, c, QualityPolicy()).reasons] == ["nll_p99"]
    c = replace(B, seq_nll_max=B.seq_nll_max + 0.3)
    assert [r.split(":")[0] for r in grade(B, c, QualityPolicy()).reasons] == ["seq_nll_max"]


def test_nan_candidate_fails() -> None:
    seqs = _role(0)
    p0 = seqs[0].positions[0]
    bad = replace(p0, role_logprob=float("nan"))
    seqs[0] = Sequence(0, (bad, *seqs[0].positions[1:]))
    c = metrics(seqs)
    assert math.isnan(c.logprob_delta_p99)
    v = grade(B, c, QualityPolicy())
    assert v.verdict == "FAIL" and any("logprob_delta" in r for r in v.reasons)
    nan_top = replace(p0, role_top=((p0.role_top[0][0], float("nan")), *p0.role_top[1:]))
    c2 = metrics([Sequence(0, (nan_top, *_role(0)[0].positions[1:]))])
    assert grade(B, c2, QualityPolicy()).verdict == "FAIL"
    doc = json.loads(dumps(v))  # still strict JSON
    assert doc["metrics"]["c"]["logprob_delta_p99"] == "NaN"


def test_broken_stock_is_no_decision() -> None:
    b = metrics(_role(0, off_argmax=0.7))
    assert b.greedy_agreement < 0.5
    v = grade(b, metrics(_role(0)), QualityPolicy())
    assert v.verdict == "NO_DECISION"
    assert "greedy_agreement" in v.reasons[0] and "min_stock_agreement" in v.reasons[0]


def test_missing_candidate_record_fails_when_stock_has_it() -> None:
    c = metrics(_role(0, role_top=False))
    assert c.kl_mean is None and c.kl_p99 is None
    v = grade(B, c, QualityPolicy())
    assert v.verdict == "FAIL" and any("kl_mean: C not recorded" in r for r in v.reasons)
    b_none = metrics(_role(0, role_top=False))
    assert grade(b_none, c, QualityPolicy()).verdict == "PASS"


def test_kl_gate_scales_with_stock() -> None:
    c = replace(B, kl_mean=0.01)
    v = grade(B, c, QualityPolicy())
    assert v.verdict == "FAIL" and v.reasons[0].startswith("kl_mean:")
    loose = replace(B, kl_mean=0.005, kl_p99=0.05)
    assert grade(loose, c, QualityPolicy()).verdict == "PASS"


@pytest.mark.parametrize("est", ["rank_cap", "uniform_tail"])
def test_kl_identical_is_zero(est: str) -> None:
    top = ((3, math.log(0.5)), (9, math.log(0.2)), (1, math.log(0.1)))
    assert kl_topk(top, top, VOCAB, est) == 0.0


@pytest.mark.parametrize("est", ["rank_cap", "uniform_tail"])
def test_kl_disjoint_is_large_and_finite(est: str) -> None:
    t = ((1, math.log(0.9)), (2, math.log(0.05)))
    r = ((7, math.log(0.9)), (8, math.log(0.05)))
    kl = kl_topk(t, r, VOCAB, est)
    assert math.isfinite(kl) and kl > 2.0
    # even a role that claims all its mass on other tokens stays finite
    assert math.isfinite(kl_topk(t, ((7, 0.0),), VOCAB, est))
    # clamped logprobs: -inf is treated as -50
    assert math.isfinite(kl_topk(((1, 0.0),), ((1, float("-inf")), (2, 0.0)), VOCAB, est))


def test_kl_boundary_swap_is_cheap_under_rank_cap() -> None:
    t = ((1, math.log(0.5)), (2, math.log(0.2)), (3, math.log(0.0101)))
    r = ((1, math.log(0.5)), (2, math.log(0.2)), (4, math.log(0.0100)))
    assert kl_topk(t, r, VOCAB, "rank_cap") < 1e-3
    assert kl_topk(t, r, VOCAB, "uniform_tail") > kl_topk(t, r, VOCAB, "rank_cap")


def test_kl_nonnegative_on_random_pairs() -> None:
    rng = random.Random(4)
    for _ in range(200):
        t = _top(rng, rng.randrange(VOCAB))
        r = tuple((tok, lp + rng.gauss(0, 0.5)) for tok, lp in _top(rng, rng.randrange(VOCAB)))
        for est in ("rank_cap", "uniform_tail"):
            kl = kl_topk(t, r, VOCAB, est)
            assert math.isfinite(kl) and kl >= 0.0


def test_tied_argmax_counts_as_agreement() -> None:
    lp = math.log(0.4)
    tied = Position(5, lp, (), lp, ((4, lp), (5, lp)))
    m = metrics([Sequence(0, (tied,))])
    assert m.greedy_agreement == 1.0 and m.kl_mean is None and m.n_kl_positions == 0


def test_first_divergence_fraction() -> None:
    top = ((1, math.log(0.6)), (2, math.log(0.3)))
    ok = Position(1, None, (), math.log(0.6), top)
    off = Position(2, None, (), math.log(0.3), top)
    m = metrics([Sequence(0, (ok, ok, off, ok)), Sequence(1, (ok, ok))])
    assert m.first_divergence_mean == pytest.approx((2 / 4 + 1.0) / 2)
    assert m.logprob_delta_mean is None and m.logprob_delta_p99 is None


def test_policy_from_mapping() -> None:
    p = QualityPolicy.from_mapping({"max_nll_mean_delta": 0.05, "kl_mean_floor": 1})
    assert p.max_nll_mean_delta == 0.05 and p.kl_mean_floor == 1.0
    assert p.min_agreement_ratio == QualityPolicy().min_agreement_ratio
    with pytest.raises(ValueError, match="max_nll_mean_detla"):
        QualityPolicy.from_mapping({"max_nll_mean_detla": 0.05})
    with pytest.raises(ValueError, match="min_agreement_ratio"):
        QualityPolicy.from_mapping({"min_agreement_ratio": 1.5})
    with pytest.raises(ValueError, match="kl_p99_floor"):
        QualityPolicy.from_mapping({"kl_p99_floor": "x"})


def test_json_dump_round_trips() -> None:
    v = grade(B, metrics(_role(0, off_argmax=0.2)), QualityPolicy())
    doc = json.loads(dumps(v))
    assert doc["verdict"] == "FAIL" and doc["metrics"]["limits"]["greedy_agreement"] == 0.98
    assert doc == json.loads(json.dumps(verdict_to_json(v))) == json.loads(json.dumps(v.to_json()))
    assert json.loads(dumps(B))["n_positions"] == 400
    assert json.loads(dumps(QualityPolicy()))["max_nll_mean_delta"] == 0.02


def test_empty_input_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        metrics([Sequence(0, ())])
