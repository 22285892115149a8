"""Scoring (floor 1): settlement, weights and a Yuma simulation as pure functions of recorded results.

No I/O, no chain, no torch: every validator computes the same crowns and the same weight
vector from the same evidence. `settle` and `weights` are plain Python; the Yuma simulation
needs numpy and is imported explicitly from `cacheon_subnet.scoring.yuma`.
"""

from cacheon_subnet.scoring.settle import (
    OUTCOMES,
    VERDICTS,
    Crown,
    Decision,
    Evidence,
    ScoringError,
    Settlement,
    SpeedPolicy,
    Verdict,
    settle_target,
)
from cacheon_subnet.scoring.weights import (
    U16_MAX,
    TargetPayout,
    WeightPolicy,
    compute_weights,
    payout_table,
    to_u16,
)

__all__ = [
    "OUTCOMES",
    "U16_MAX",
    "VERDICTS",
    "Crown",
    "Decision",
    "Evidence",
    "ScoringError",
    "Settlement",
    "SpeedPolicy",
    "TargetPayout",
    "Verdict",
    "WeightPolicy",
    "compute_weights",
    "payout_table",
    "settle_target",
    "to_u16",
]
