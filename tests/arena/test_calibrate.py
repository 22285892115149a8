"""Quality limits derived from the stock-vs-stock spread (arena/verdict/calibrate.py)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from arena.verdict import calibrate
from arena.verdict import quality as q


def _m(nll: float, agree: float, kl: float | None = 1e-3) -> dict:
    return {
        "n_positions": 100,
        "n_sequences": 8,
        "nll_mean": nll,
        "nll_p99": 4 * nll,
        "seq_nll_max": 2 * nll,
        "greedy_agreement": agree,
        "first_divergence_mean": 5.0,
        "logprob_delta_mean": 0.01,
        "logprob_delta_p99": 0.05,
        "kl_mean": kl,
        "kl_p99": None if kl is None else 10 * kl,
        "n_kl_positions": 100,
    }


def test_limits_follow_the_measured_spread():
    tight = [{"b": _m(2.00, 0.90), "b_prime": _m(2.01, 0.89)}, {"b": _m(2.0, 0.9), "b_prime": _m(1.995, 0.9)}]
    p, rep = calibrate.derive_policy(tight, k=3.0, full_sample=False)
    assert p.max_nll_mean_delta == pytest.approx(0.03) and p.max_nll_p99_delta == pytest.approx(0.12)
    assert p.min_agreement_ratio == pytest.approx(1 - 3 * (1 - 0.89 / 0.90))
    # identical KL in both halves: no relative excess (factor 1) and no absolute spread (floor 0)
    assert p.kl_mean_floor == pytest.approx(0.0) and p.kl_mean_factor == pytest.approx(1.0)
    assert rep["runs"] == 2 and rep["spread"]["nll_mean"] == pytest.approx(0.01)
    wide = tight + [{"b": _m(2.0, 0.9, 1e-3), "b_prime": _m(2.2, 0.8, 4e-3)}]
    pw, _ = calibrate.derive_policy(wide, k=3.0, full_sample=False)
    assert pw.max_nll_mean_delta > p.max_nll_mean_delta and pw.min_agreement_ratio < p.min_agreement_ratio
    assert pw.kl_mean_factor == pytest.approx(1 + 3 * (4 - 1))  # B′/B = 4: k x the excess over 1
    assert pw.kl_mean_floor == pytest.approx(3 * 3e-3)  # k x the largest |B′ − B|, not k x the level
    # a spread of zero (bit-identical halves) falls back to the floor, not to a zero limit
    same = [{"b": _m(2.0, 0.9), "b_prime": _m(2.0, 0.9)}] * 2
    assert calibrate.derive_policy(same, full_sample=False)[0].max_nll_mean_delta == 1e-3
    assert "max_nll_mean_delta = 0.03" in calibrate.policy_toml(p)
    q.QualityPolicy.from_mapping(asdict(p))  # a valid [quality.policy]


def test_means_are_scaled_to_the_verdicts_sample_size_and_tails_are_not():
    """Halves of n/2 sequences each read a mean's spread √2 wider than two samples of n (what a
    verdict compares): the mean limits shrink by 1/√2, the p99 and worst-sequence ones do not."""
    tight = [{"b": _m(2.00, 0.90), "b_prime": _m(2.01, 0.89)}, {"b": _m(2.0, 0.9), "b_prime": _m(1.995, 0.9)}]
    wide = tight + [{"b": _m(2.0, 0.9, 1e-3), "b_prime": _m(2.2, 0.8, 4e-3)}]
    half, _ = calibrate.derive_policy(wide, k=3.0, full_sample=False)
    full, rep = calibrate.derive_policy(wide, k=3.0)
    r = 2**-0.5
    assert full.max_nll_mean_delta == pytest.approx(half.max_nll_mean_delta * r)
    assert 1 - full.min_agreement_ratio == pytest.approx((1 - half.min_agreement_ratio) * r)
    assert full.kl_mean_factor - 1 == pytest.approx((half.kl_mean_factor - 1) * r)
    assert full.kl_mean_floor == pytest.approx(half.kl_mean_floor * r)
    assert full.max_nll_p99_delta == half.max_nll_p99_delta and full.kl_p99_factor == half.kl_p99_factor
    assert rep["full_sample"] is True and rep["spread"]["nll_mean"] == pytest.approx(0.2)  # the raw spread
    uneven = {"b": {**_m(2.0, 0.9), "n_sequences": 2}, "b_prime": {**_m(2.0, 0.9), "n_sequences": 6}}
    assert calibrate._scale(uneven, "nll_mean", True) == pytest.approx(((2 / 8) / (1 / 2 + 1 / 6)) ** 0.5)
    assert calibrate._scale(uneven, "nll_p99", True) == 1.0 and calibrate._scale(uneven, "nll_mean", False) == 1.0


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


H200_DENSE = [
    f"docs/results/{p}"
    for p in (
        "2026-12-01/h200-s4-faithful.json",
        "2026-12-01/h200-s4-handicap.json",
        "2026-12-02/h200-s6-fused_add_rmsnorm.json",
        "2026-12-02/h200-s6-silu_and_mul.json",
        "2026-12-02/h200-s7-rope.neox.json",
    )
]


_metrics = calibrate._metrics  # a recorded metrics dict back into QualityMetrics


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


H200_SMOLLM2 = ["docs/results/2026-12-02/h200-s8-sm-norm.rmsnorm.json"] + [
    f"docs/results/2026-12-03/h200-s11-sm-{n}.json"
    for n in (
        "norm.fused_add_rmsnorm",
        "wrong_math",
        "subtle_skip_row",
        "subtle_bf16_accumulation",
        "subtle_approx_rsqrt",
        "subtle_batch_ge128",
        "subtle_prefill_only",
    )
]
SMOLLM2_EXPECTED = {
    "norm.rmsnorm": "PASS",
    "norm.fused_add_rmsnorm": "PASS",
    "wrong_math": "FAIL",
    "subtle_skip_row": "FAIL",
    "subtle_batch_ge128": "FAIL",
    "subtle_prefill_only": "FAIL",
    # on the KL mean at 1.22x its allowance, and only with the means scaled to full samples
    "subtle_bf16_accumulation": "FAIL",
    # below what 64 sequences resolve at k = 3 (docs/arena.md): measured, not wished
    "subtle_approx_rsqrt": "PASS",
}


def _smollm2() -> tuple[q.QualityPolicy, list[dict], list[str]]:
    from pathlib import Path

    from arena.config import load_config

    repo = Path(__file__).resolve().parents[2]
    paths = [repo / p for p in H200_SMOLLM2]
    policy = q.QualityPolicy.from_mapping(load_config(repo / "configs/arena/smollm2.toml").quality.policy)
    return policy, calibrate.spreads_from_results(paths), [str(p) for p in paths]


def test_the_real_model_arenas_policy_is_the_one_its_stock_spread_derives():
    """configs/arena/smollm2.toml's [quality.policy] is calibrate_quality.py's k = 3 policy over the
    8 stock spreads the H200 recorded in that arena; regraded under it, the faithful runs PASS and
    the controls read as measured."""
    policy, spreads, paths = _smollm2()
    derived, report = calibrate.derive_policy(spreads, k=3.0)
    assert report["runs"] == 8
    half, _ = calibrate.derive_policy(spreads, k=3.0, full_sample=False)  # the broken control: unscaled means
    assert calibrate.regrade(json.loads(open(paths[4]).read()), half)[0][1] == "PASS"  # bf16 accumulation slips
    for field, value in asdict(derived).items():
        assert getattr(policy, field) == pytest.approx(value, rel=1e-4), field
    for path in paths:
        name = path.rsplit("-sm-", 1)[1].removesuffix(".json")
        [(_, verdict, _)] = calibrate.regrade(json.loads(open(path).read()), policy)
        assert verdict == SMOLLM2_EXPECTED[name], name


def test_leave_one_out_false_rejects_grow_as_k_shrinks():
    """The false-reject reading: no stock half is rejected under the others' k = 3 policy, while a
    k = 1 policy (the broken control) rejects several: the reading can fail."""
    _, spreads, _ = _smollm2()
    at3 = calibrate.leave_one_out(spreads, k=3.0)
    assert len(at3) == 16 and all(r["verdict"] == "PASS" for r in at3)
    at1 = calibrate.leave_one_out(spreads, k=1.0)
    assert sum(r["verdict"] == "FAIL" for r in at1) >= 3
    with pytest.raises(ValueError, match="at least 3"):
        calibrate.leave_one_out(spreads[:2])


def test_regrade_reads_non_finite_metrics_as_a_fail():
    bad = {**_m(2.0, 0.9), "kl_mean": "NaN"}
    doc = {"quality": {"metrics": {"b": _m(2.0, 0.9), "c": bad}}}
    [(stage, verdict, reasons)] = calibrate.regrade(doc, q.QualityPolicy())
    assert stage == "quality" and verdict == "FAIL" and "non-finite" in reasons[0]
    assert calibrate.regrade({"quality": None}, q.QualityPolicy()) == []


def test_calibrate_quality_script_prints_the_policy_the_regrade_and_the_leave_one_out(capsys):
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "scripts"))
    import calibrate_quality

    _, _, paths = _smollm2()
    assert calibrate_quality.main([*paths, "--regrade", "--loo"]) == 0
    out = capsys.readouterr().out
    assert "# 8 stock spreads, k=3.0" in out and "kl_mean_factor = 1.30367" in out
    assert "h200-s11-sm-wrong_math.json quality: FAIL nll_mean" in out
    assert "leave-one-out: 0 of 16 stock-vs-stock comparisons rejected" in out
    assert calibrate_quality.main([*paths[:2], "--loo"]) == 2  # 2 spreads: too few to hold one out
