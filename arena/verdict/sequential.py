"""Stop when the answer is known: Wald's sequential probability ratio test over per-cycle C/B
ratios (pure statistics; arena/run.py asks it after every B C C B′ cycle).

Observation: x_i = log(mean(C) / mean(B ∪ B′)) of cycle i (ABBA inside a cycle cancels linear
drift). Model: x_i i.i.d. N(μ, σ²). Hypotheses: H0 μ = 0 (no gain: stock-equivalent, a copy, a
loser is further below) against H1 μ = μ1 = log(1 + alt_gain). Log-likelihood ratio after n cycles

    Λ_n = (μ1 / σ_n²) · Σ_i (x_i − μ1 / 2),      σ_n = max(sigma, s_n)

with `sigma` the configured per-cycle noise (an upper bound of what the box shows) and s_n the
sample standard deviation of x_1..x_n (a noisier box than configured is read as noisy as it
is). From `min_cycles` on: Λ_n ≥ log((1 − β) / α) decides PASS, Λ_n ≤ log(β / (1 − α)) decides
FAIL, otherwise one more cycle. Wald's bounds: with σ_n = σ known and the model true, the false
PASS rate (a crown when μ ≤ 0) is at most α / (1 − β) and the false FAIL rate at μ1 at most
β / (1 − α), whatever n; the plug-in s_n makes them approximate (tests/arena/test_sequential.py
measures them by simulation). A decision only stops the run early: the caller keeps every other
gate (a PASS must also pass the fixed-sample verdict on the windows so far, then the fresh
confirmation engine); a run that reaches its last cycle undecided gets the fixed-sample verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

DECISIONS = ("PASS", "FAIL", "CONTINUE")


@dataclass(frozen=True)
class SprtPolicy:
    alpha: float = 0.01  # false crown: PASS when there is no gain
    beta: float = 0.05  # false FAIL when the gain is alt_gain
    alt_gain: float = 0.01  # H1: C/B = 1 + alt_gain (H0: C/B = 1); the midpoint is where PASS and FAIL balance
    sigma: float = 0.007  # assumed per-cycle SD of log(C/B): an upper bound of the box's (H200: 0.1–0.7 %)
    min_cycles: int = 2
    # A PASS decided early stops the run only where the config asks: a kernel fast for its first
    # cycles and slow after (a call counter in device memory) was crowned at cycle 2 in every
    # simulated run, where the fixed rule over all cycles crowned it in none (red team
    # 2026-12-04). The confirmation engine is no help: it is fresh, so it sees early cycles again.
    stop_on_pass: bool = False

    def __post_init__(self) -> None:
        if not (
            0 < self.alpha < 0.5
            and 0 < self.beta < 0.5
            and 0 < self.alt_gain < 1
            and 0 < self.sigma < 1
            and self.min_cycles >= 1
        ):
            raise ValueError(f"SprtPolicy: 0 < alpha, beta < 0.5; 0 < alt_gain, sigma < 1; min_cycles >= 1 ({self})")

    @property
    def upper(self) -> float:
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        return math.log(self.beta / (1 - self.alpha))


@dataclass(frozen=True)
class SprtState:
    decision: str  # PASS | FAIL | CONTINUE
    cycles: int
    llr: float
    sigma: float  # the σ_n used
    upper: float
    lower: float

    @property
    def reason(self) -> str:
        return (
            f"SPRT after {self.cycles} cycle(s): log-LR {self.llr:+.2f} vs bounds [{self.lower:.2f}, "
            f"{self.upper:.2f}] (σ {self.sigma:.3%}) -> {self.decision}"
        )

    def to_json(self) -> dict[str, float | int | str]:
        return {
            "decision": self.decision,
            "cycles": self.cycles,
            "llr": self.llr,
            "sigma": self.sigma,
            "upper": self.upper,
            "lower": self.lower,
        }


def sprt(ratios: Sequence[float], policy: SprtPolicy) -> SprtState:
    """The test after len(ratios) cycles; ratios: per-cycle C/B (positive)."""
    if any(not r > 0 for r in ratios):
        raise ValueError(f"per-cycle ratios must be positive: {list(ratios)}")
    xs = [math.log(r) for r in ratios]
    n = len(xs)
    s = statistics.stdev(xs) if n >= 2 else 0.0
    sigma = max(policy.sigma, s)
    mu1 = math.log1p(policy.alt_gain)
    llr = mu1 / sigma**2 * sum(x - mu1 / 2 for x in xs)
    decision = "CONTINUE"
    if n >= policy.min_cycles:
        decision = "PASS" if llr >= policy.upper else "FAIL" if llr <= policy.lower else "CONTINUE"
    return SprtState(decision, n, llr, sigma, policy.upper, policy.lower)


def policy_of(section: object) -> SprtPolicy:
    """The SprtPolicy of an arena config's [sequential] section."""
    return SprtPolicy(*(getattr(section, k) for k in ("alpha", "beta", "alt_gain", "sigma", "min_cycles", "stop_on_pass")))


def early_stop(samples: Sequence[tuple[object, float]], speed: object, policy: SprtPolicy) -> tuple[str, SprtState]:
    """After a cycle: (decision, state). FAIL when the SPRT decides FAIL; PASS only when the SPRT
    decides PASS, the fixed-sample verdict (arena.verdict.speed.judge) on the same windows is PASS too and
    the policy lets a PASS stop early (`stop_on_pass`); else CONTINUE. samples: (Window,
    throughput) of every window run so far."""
    from arena.verdict.speed import judge

    fixed = judge(samples, speed)  # type: ignore[arg-type]
    state = sprt(fixed.ratios, policy)
    if state.decision == "PASS" and (fixed.verdict != "PASS" or not policy.stop_on_pass):
        return "CONTINUE", state
    return state.decision, state
