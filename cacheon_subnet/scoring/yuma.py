"""A Yuma consensus simulation: what the chain makes of the validators' weight vectors.

Used to check, offline, that honest validators who each settle crowns from their own noisy
measurements agree well enough for the chain to pay the right miner, and that a validator
publishing a deviating vector loses dividends. It follows the public description of
(classic, pre-YC3) Yuma Consensus, step by step; sources: the Bittensor documentation
("Yuma Consensus", docs.learnbittensor.org), the subtensor consensus write-up (instant
bond, EMA with a typical 10 % new / 90 % old, incentive and dividend definitions) and the
SDK's hyperparameter reference (kappa stored as u16 with 32767 = 0.5, bonds_moving_avg
900000 = keep 0.9, bonds_penalty 65535 = full penalty). Notation: S_i stake of validator
i, W_ij its weight on miner j.

1. Stakes are normalised to sum 1; each weight row is normalised to sum 1 (a validator's
   vector is a distribution; the chain normalises rows the same way).
2. Consensus C_j: the stake-weighted kappa-median, i.e. the largest weight level that
   validators holding at least a fraction kappa of the stake support
   (sum_i S_i [W_ij >= C_j] >= kappa). With kappa = 0.5, a minority cannot move it.
3. Clipping: W'_ij = min(W_ij, C_j). Weight above consensus earns nobody anything, which
   is what punishes over-rating (collusion or a validator's own miner).
4. Ranks R_j = sum_i S_i W'_ij; incentive I_j = R_j / sum_k R_k (miner emission shares).
   Validator trust T_i = sum_j W'_ij (how much of the row survived clipping).
5. Bond weights B~_ij = (1 - beta) W_ij + beta W'_ij, beta = bonds_penalty (1 forms bonds
   from fully clipped weights, 0 from raw weights; the chain makes it a per-subnet knob).
6. Instant bonds dB_ij = S_i B~_ij normalised per miner (each column sums to 1: a
   validator's bond in a miner is its stake-weighted share of the support for it).
7. EMA: B_ij = alpha dB_ij + (1 - alpha) B_ij(prev), alpha = bond_alpha (0.1), bonds
   starting at zero, then normalised per miner again. Early, lasting support pays.
8. Dividends D_i = sum_j B_ij I_j, normalised to sum 1 (validator emission shares).

Not modelled: validator permits, liquid alpha and YC3's per-bond EMA, fixed-point
rounding, commit-reveal delay, the emission split itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cacheon_subnet.scoring.settle import ScoringError

_SUPPORT_TOLERANCE = 1e-12  # float sums of stake fractions (0.1 + 0.2 + ...) must still reach kappa


@dataclass(frozen=True)
class YumaParams:
    kappa: float = 0.5  # stake fraction that must support a weight level for it to be consensus
    bond_alpha: float = 0.1  # weight of the new instant bond in the EMA (chain: 1 - bonds_moving_avg)
    bonds_penalty: float = 1.0  # beta: 1 forms bonds from clipped weights, 0 from raw weights

    def __post_init__(self) -> None:
        for name in ("kappa", "bond_alpha", "bonds_penalty"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise ScoringError(f"YumaParams.{name}: must be in [0, 1], got {value!r}")
        if self.kappa == 0.0:
            raise ScoringError("YumaParams.kappa: must be > 0")


@dataclass(frozen=True)
class YumaResult:
    """One epoch. Arrays are read-only; shapes: validators V, miners M."""

    consensus: np.ndarray  # (M,) kappa-median weight per miner
    incentive: np.ndarray  # (M,) miner emission shares, sum 1 (or all 0)
    dividends: np.ndarray  # (V,) validator emission shares, sum 1 (or all 0)
    bonds: np.ndarray  # (V, M) EMA bonds, columns sum to 1 where anyone ever bonded
    clipped_weights: np.ndarray  # (V, M) min(W, consensus)
    ranks: np.ndarray  # (M,) stake-weighted clipped weight
    validator_trust: np.ndarray  # (V,) share of each row that survived clipping


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64, copy=True)
    a.setflags(write=False)
    return a


def _normalise(v: np.ndarray) -> np.ndarray:
    total = v.sum()
    return v / total if total > 0 else np.zeros_like(v)


def _normalise_columns(m: np.ndarray) -> np.ndarray:
    sums = m.sum(axis=0, keepdims=True)
    return np.divide(m, sums, out=np.zeros_like(m), where=sums > 0)


def _inputs(
    weights: Sequence[Sequence[float]] | np.ndarray,
    stakes: Sequence[float] | np.ndarray,
    prev_bonds: np.ndarray | Sequence[Sequence[float]] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w = np.asarray(weights, dtype=np.float64)
    s = np.asarray(stakes, dtype=np.float64)
    if w.ndim != 2 or s.ndim != 1 or w.shape[0] != s.shape[0]:
        raise ScoringError(f"yuma: weights must be (V, M) and stakes (V,), got {w.shape} and {s.shape}")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise ScoringError("yuma: weights must be finite and non-negative")
    if not (np.all(np.isfinite(s)) and np.all(s >= 0) and s.sum() > 0):
        raise ScoringError("yuma: stakes must be finite, non-negative and not all zero")
    row_sums = w.sum(axis=1, keepdims=True)
    w = np.divide(w, row_sums, out=np.zeros_like(w), where=row_sums > 0)
    if prev_bonds is None:
        b = np.zeros_like(w)
    else:
        b = np.asarray(prev_bonds, dtype=np.float64)
        if b.shape != w.shape or not (np.all(np.isfinite(b)) and np.all(b >= 0)):
            raise ScoringError(f"yuma: prev_bonds must be finite, non-negative and {w.shape}, got {b.shape}")
    return w, s / s.sum(), b


def kappa_median(weights: np.ndarray, stakes: np.ndarray, kappa: float) -> np.ndarray:
    """Per column, the largest level c with sum_i stakes_i [weights_ij >= c] >= kappa (stakes sum to 1)."""
    n_miners = weights.shape[1]
    out = np.zeros(n_miners)
    order = np.argsort(-weights, axis=0, kind="stable")  # descending per column
    for j in range(n_miners):
        col = weights[order[:, j], j]
        support = np.cumsum(stakes[order[:, j]])  # stake of all validators with weight >= col[i]
        reached = np.nonzero(support >= kappa - _SUPPORT_TOLERANCE)[0]
        out[j] = col[reached[0]] if reached.size else 0.0
    return out


def yuma_epoch(
    weights: Sequence[Sequence[float]] | np.ndarray,
    stakes: Sequence[float] | np.ndarray,
    prev_bonds: np.ndarray | Sequence[Sequence[float]] | None = None,
    params: YumaParams = YumaParams(),
) -> YumaResult:
    """Run one Yuma epoch over validators x miners weights (see the module docstring for each step)."""
    w, s, prev = _inputs(weights, stakes, prev_bonds)  # step 1
    consensus = kappa_median(w, s, params.kappa)  # step 2
    clipped = np.minimum(w, consensus[None, :])  # step 3
    ranks = s @ clipped  # step 4
    incentive = _normalise(ranks)
    trust = clipped.sum(axis=1)
    bond_weights = (1.0 - params.bonds_penalty) * w + params.bonds_penalty * clipped  # step 5
    instant = _normalise_columns(s[:, None] * bond_weights)  # step 6
    bonds = _normalise_columns(params.bond_alpha * instant + (1.0 - params.bond_alpha) * prev)  # step 7
    dividends = _normalise(bonds @ incentive)  # step 8
    return YumaResult(
        consensus=_frozen(consensus),
        incentive=_frozen(incentive),
        dividends=_frozen(dividends),
        bonds=_frozen(bonds),
        clipped_weights=_frozen(clipped),
        ranks=_frozen(ranks),
        validator_trust=_frozen(trust),
    )


def yuma_epochs(
    weights: Sequence[Sequence[float]] | np.ndarray,
    stakes: Sequence[float] | np.ndarray,
    epochs: int,
    params: YumaParams = YumaParams(),
    prev_bonds: np.ndarray | Sequence[Sequence[float]] | None = None,
) -> YumaResult:
    """Repeat the same weights for `epochs` epochs, carrying bonds; returns the last epoch."""
    if not (isinstance(epochs, int) and epochs >= 1):
        raise ScoringError(f"yuma_epochs: epochs must be an int >= 1, got {epochs!r}")
    result = yuma_epoch(weights, stakes, prev_bonds, params)
    for _ in range(epochs - 1):
        result = yuma_epoch(weights, stakes, result.bonds, params)
    return result
