"""The closed sets a verdict is spoken in. Each is a StrEnum, so the strings already stored (state
DB, result files, the leaderboard API) are exactly the values, and a member compares equal to its
string: code that still holds a bare string from a row keeps working while it is converted.

`Verdict` lives in scoring (floor 1, below records): settlement reads it. Re-exported here.
"""

from __future__ import annotations

from enum import StrEnum

from cacheon_subnet.scoring.settle import Verdict

__all__ = ["ContributionState", "Role", "SpeedMetric", "Verdict"]


class ContributionState(StrEnum):
    """Where a contribution is in the validator's intake (validator/state.py: TRANSITIONS)."""

    QUEUED = "queued"
    FETCHED = "fetched"
    SCREENED = "screened"
    VERIFIED = "verified"
    QUALIFIED = "qualified"
    FAILED = "failed"
    NO_DECISION = "no_decision"


class Role(StrEnum):
    """Who an engine window ran, as the leaderboard names them: the baseline before (B) and after
    (B′) the candidate (C), warm-up windows (never judged), and the pristine teacher (T) that grades."""

    WARMUP = "warmup"
    B = "B"
    C = "C"
    B_PRIME = "B'"
    T = "T"


class SpeedMetric(StrEnum):
    """The clocks a speed verdict can be judged on (arena/config.py SPEED_METRICS, same order)."""

    OUTPUT_TOKENS_PER_S = "output_tokens_per_s"
    TOTAL_TOKENS_PER_S = "total_tokens_per_s"
    GPU_TOKENS_PER_S = "gpu_tokens_per_s"
    DECODE_GPU_TOKENS_PER_S = "decode_gpu_tokens_per_s"
    EXTEND_GPU_TOKENS_PER_S = "extend_gpu_tokens_per_s"
