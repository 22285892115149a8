"""Yuma simulation: consensus, clipping, incentive, bonds EMA and dividends."""

from __future__ import annotations

import numpy as np
import pytest

from cacheon_subnet.scoring import ScoringError
from cacheon_subnet.scoring.yuma import YumaParams, kappa_median, yuma_epoch, yuma_epochs


def test_single_honest_validator_gets_exactly_what_it_asked_for():
    w = [[0.6, 0.3, 0.1, 0.0]]
    r = yuma_epoch(w, [1000.0])
    np.testing.assert_allclose(r.consensus, w[0])
    np.testing.assert_allclose(r.clipped_weights, w)
    np.testing.assert_allclose(r.incentive, w[0])
    np.testing.assert_allclose(r.validator_trust, [1.0])
    np.testing.assert_allclose(r.dividends, [1.0])
    np.testing.assert_allclose(r.bonds, [[1.0, 1.0, 1.0, 0.0]])


def test_rows_are_normalised_and_results_read_only():
    r = yuma_epoch([[6.0, 3.0, 1.0], [2.0, 2.0, 0.0]], [3.0, 1.0])
    np.testing.assert_allclose(r.clipped_weights.sum(axis=1) <= 1.0 + 1e-12, True)
    assert r.incentive.sum() == pytest.approx(1.0) and r.dividends.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        r.incentive[0] = 1.0


def test_outlier_weight_is_clipped_to_consensus():
    stakes = [0.40, 0.35, 0.25]
    honest = [0.5, 0.5, 0.0]
    # the outlier puts everything on miner 2 (its own); consensus for miner 2 is 0
    r = yuma_epoch([honest, honest, [0.0, 0.0, 1.0]], stakes)
    np.testing.assert_allclose(r.consensus, [0.5, 0.5, 0.0])
    np.testing.assert_allclose(r.clipped_weights[2], [0.0, 0.0, 0.0])
    assert r.incentive[2] == 0.0 and r.validator_trust[2] == 0.0
    np.testing.assert_allclose(r.incentive, [0.5, 0.5, 0.0])
    # an over-rating of an honest miner is clipped down to the consensus level
    r = yuma_epoch([honest, honest, [0.9, 0.1, 0.0]], stakes)
    np.testing.assert_allclose(r.consensus, [0.5, 0.5, 0.0])
    np.testing.assert_allclose(r.clipped_weights[2], [0.5, 0.1, 0.0])
    assert r.validator_trust[2] == pytest.approx(0.6)


def test_kappa_median_weighs_stake_not_heads():
    col = np.array([[0.2], [0.8], [0.9]])
    # head-count median would be 0.8; 60 % of stake sits at 0.2, so consensus is 0.2
    assert kappa_median(col, np.array([0.6, 0.3, 0.1]), 0.5)[0] == pytest.approx(0.2)
    # move the big stake to the 0.8 validator: 0.8 now has 70 % support
    assert kappa_median(col, np.array([0.3, 0.6, 0.1]), 0.5)[0] == pytest.approx(0.8)
    # kappa is the support threshold: 40 % support is enough at kappa 0.35, not at 0.5
    assert kappa_median(col, np.array([0.6, 0.3, 0.1]), 0.35)[0] == pytest.approx(0.8)
    # exactly kappa of support suffices; float sums like 0.1 + 0.2 + 0.2 still reach 0.5
    assert kappa_median(np.array([[0.7], [0.7], [0.7], [0.1]]), np.array([0.1, 0.2, 0.2, 0.5]), 0.5)[0] == 0.7
    # through yuma_epoch with raw (unnormalised) stakes
    r = yuma_epoch([[0.2, 0.8], [0.8, 0.2], [0.9, 0.1]], [600, 300, 100])
    np.testing.assert_allclose(r.consensus, [0.2, 0.8])  # miner 1: the 60 % validator says 0.8


def test_incentive_is_the_stake_weighted_clipped_rank():
    r = yuma_epoch([[0.6, 0.4], [0.4, 0.6]], [0.6, 0.4])
    np.testing.assert_allclose(r.consensus, [0.6, 0.4])
    np.testing.assert_allclose(r.clipped_weights, [[0.6, 0.4], [0.4, 0.4]])
    np.testing.assert_allclose(r.ranks, [0.6 * 0.6 + 0.4 * 0.4, 0.6 * 0.4 + 0.4 * 0.4])
    np.testing.assert_allclose(r.incentive, [0.52 / 0.92, 0.40 / 0.92])
    # dividends: bonds (stake-weighted clipped support per miner) times incentive
    bonds = np.array([[0.36 / 0.52, 0.24 / 0.40], [0.16 / 0.52, 0.16 / 0.40]])
    np.testing.assert_allclose(r.bonds, bonds)
    d = bonds @ r.incentive
    np.testing.assert_allclose(r.dividends, d / d.sum())


def test_bonds_ema_converges_geometrically():
    alpha = 0.1
    params = YumaParams(bond_alpha=alpha)
    w = [[0.7, 0.3], [0.7, 0.3], [0.2, 0.8]]
    stakes = [0.5, 0.3, 0.2]
    target = yuma_epoch(w, stakes, None, params).bonds  # from zero bonds, the instant bonds
    start = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])  # all bonds held by validator 2
    gap0 = np.abs(start - target).max()
    bonds = start
    for n in range(1, 41):
        bonds = yuma_epoch(w, stakes, bonds, params).bonds
        assert np.abs(bonds - target).max() == pytest.approx(gap0 * (1 - alpha) ** n, rel=1e-9)
    one = yuma_epoch(w, stakes, start, params).bonds
    np.testing.assert_allclose(one, alpha * target + (1 - alpha) * start)
    np.testing.assert_allclose(yuma_epochs(w, stakes, 200, params, start).bonds, target, atol=1e-8)


def test_bonds_penalty_decides_whether_over_rating_earns_bonds():
    w = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    stakes = [0.4, 0.4, 0.2]
    full = yuma_epoch(w, stakes, None, YumaParams(bonds_penalty=1.0))
    raw = yuma_epoch(w, stakes, None, YumaParams(bonds_penalty=0.0))
    assert full.bonds[2, 1] == 0.0  # its weight on miner 1 was clipped away
    assert raw.bonds[2, 1] == pytest.approx(1.0)  # raw weights still bond
    # either way the outlier earns nothing: miner 1 has no incentive
    assert full.dividends[2] == 0.0 and raw.dividends[2] == 0.0


def test_malformed_input_raises():
    with pytest.raises(ScoringError):
        yuma_epoch([[1.0, 0.0]], [1.0, 2.0])
    with pytest.raises(ScoringError):
        yuma_epoch([[1.0, -1.0]], [1.0])
    with pytest.raises(ScoringError):
        yuma_epoch([[1.0, 0.0]], [0.0])
    with pytest.raises(ScoringError):
        yuma_epoch([[1.0, 0.0]], [1.0], prev_bonds=[[1.0]])
    with pytest.raises(ScoringError):
        YumaParams(kappa=1.5)
