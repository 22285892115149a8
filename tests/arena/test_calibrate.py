"""Quality limits derived from the stock-vs-stock spread (arena/calibrate.py)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from arena import calibrate
from arena import quality as q


def _m(nll: float, agree: float, kl: float | None = 1e-3) -> dict:
    return {"n_positions": 100, "n_sequences": 8, "nll_mean": nll, "nll_p99": 4 * nll, "seq_nll_max": 2 * nll,
            "greedy_agreement": agree, "first_divergence_mean": 5.0, "logprob_delta_mean": 0.01,
            "logprob_delta_p99": 0.05, "kl_mean": kl, "kl_p99": None if kl is None else 10 * kl,
            "n_kl_positions": 100}


def test_limits_follow_the_measured_spread():
    tight = [{"b": _m(2.00, 0.90), "b_prime": _m(2.01, 0.89)}, {"b": _m(2.0, 0.9), "b_prime": _m(1.995, 0.9)}]
    p, rep = calibrate.derive_policy(tight, k=3.0)
    assert p.max_nll_mean_delta == pytest.approx(0.03) and p.max_nll_p99_delta == pytest.approx(0.12)
    assert p.min_agreement_ratio == pytest.approx(1 - 3 * (1 - 0.89 / 0.90))
    assert p.kl_mean_floor == pytest.approx(3e-3) and p.kl_mean_factor == pytest.approx(3.0)
    assert rep["runs"] == 2 and rep["spread"]["nll_mean"] == pytest.approx(0.01)
    wide = tight + [{"b": _m(2.0, 0.9, 1e-3), "b_prime": _m(2.2, 0.8, 4e-3)}]
    pw, _ = calibrate.derive_policy(wide, k=3.0)
    assert pw.max_nll_mean_delta > p.max_nll_mean_delta and pw.min_agreement_ratio < p.min_agreement_ratio
    assert pw.kl_mean_factor == pytest.approx(12.0)
    # a spread of zero (bit-identical halves) falls back to the floor, not to a zero limit
    same = [{"b": _m(2.0, 0.9), "b_prime": _m(2.0, 0.9)}] * 2
    assert calibrate.derive_policy(same)[0].max_nll_mean_delta == 1e-3
    assert "max_nll_mean_delta = 0.03" in calibrate.policy_toml(p)
    q.QualityPolicy.from_mapping(asdict(p))  # a valid [quality.policy]


def test_too_few_runs_are_refused():
    with pytest.raises(ValueError, match="at least 2 runs"):
        calibrate.derive_policy([{"b": _m(2, 0.9), "b_prime": _m(2, 0.9)}])


def test_stock_spread_splits_the_baseline_by_window_role(tmp_path):
    def seq(i: int, lp: float) -> q.Sequence:
        pos = q.Position(token=1, role_logprob=lp, role_top=((1, lp),), teacher_logprob=lp, teacher_top=((1, lp),))
        return q.Sequence(i, (pos,) * 4)

    seqs = [seq(0, -1.0), seq(1, -1.0), seq(2, -2.0)]
    s = calibrate.stock_spread(seqs, ["w003-B", "w004-B", "w007-B'"])
    assert s["b"]["nll_mean"] == pytest.approx(1.0) and s["b_prime"]["nll_mean"] == pytest.approx(2.0)
    assert calibrate.stock_spread(seqs, ["w003-B"] * 3) is None
    (tmp_path / "r.json").write_text(json.dumps({"quality": {"metrics": {"stock_spread": s}}, "confirm_quality": None}))
    assert calibrate.spreads_from_results([tmp_path / "r.json"]) == [s]
