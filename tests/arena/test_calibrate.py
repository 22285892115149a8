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


H200_DENSE = [f"docs/results/{p}" for p in (
    "2026-12-01/h200-s4-faithful.json", "2026-12-01/h200-s4-handicap.json",
    "2026-12-02/h200-s6-fused_add_rmsnorm.json", "2026-12-02/h200-s6-silu_and_mul.json",
    "2026-12-02/h200-s7-rope.neox.json")]


def _metrics(d: dict) -> q.QualityMetrics:
    return q.QualityMetrics(**{k: v for k, v in d.items() if k in q.QualityMetrics.__dataclass_fields__})


def test_the_dense_arenas_unpaired_limits_cover_its_measured_stock_spread():
    """configs/arena/dense.toml's NLL limits come from the H200's recorded stock-vs-stock spreads
    (B and C sample different prompts): never tighter than k x the spread, and every recorded
    faithful or handicap verdict of that arena grades PASS under them (the hand-set 0.02 nats sat
    below the measured 0.078: a faithful kernel could fail by sampling noise alone)."""
    from pathlib import Path

    from arena.config import load_config

    repo = Path(__file__).resolve().parents[2]
    derived, report = calibrate.derive_policy(calibrate.spreads_from_results([repo / p for p in H200_DENSE]))
    assert report["runs"] >= 6
    policy = q.QualityPolicy.from_mapping(load_config(repo / "configs/arena/dense.toml").quality.policy)
    for _, field in calibrate.DELTAS:
        assert getattr(policy, field) >= getattr(derived, field) - 1e-3, field
    assert report["spread"]["nll_mean"] > q.QualityPolicy().max_nll_mean_delta  # why the default was replaced
    for p in H200_DENSE:
        doc = json.loads((repo / p).read_text())
        for key in ("quality", "confirm_quality"):
            m = (doc.get(key) or {}).get("metrics") or {}
            if "b" in m:
                assert q.grade(_metrics(m["b"]), _metrics(m["c"]), policy).verdict == "PASS", (p, key)
