"""The sequential stop (arena/verdict/sequential.py): Wald's SPRT math, and a simulation of whole dense
arena verdicts on synthetic window series — stock vs stock (no gain), a 1 % real gain and a 3 %
loser, with H200-like window noise (0.1–0.7 %), linear drift and occasional dips — run through
the same decision path as arena/run.py (gate after every cycle but the last, PASS also needs
the fixed-sample verdict, the fixed verdict when undecided). Confirmation is not simulated: the
crown rates below are before it (it only removes crowns).

`python tests/arena/test_sequential.py` prints the table quoted in docs/arena.md."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import arena_harness as h
import pytest

from arena.verdict.sequential import SprtPolicy, early_stop, policy_of, sprt
from arena.verdict.speed import judge, plan

CFG = h.load_config(h.DENSE)
SPEED = CFG.speed  # the dense arena's margin 0.5 %, k 3, max noise 2 %
POLICY = replace(
    policy_of(CFG.sequential)
)  # the dense [sequential] values (sigma 0.7 %: an upper bound of the 0.1-0.7 % band)
CYCLES = CFG.workload.cycles
N = 500


def series(rng: random.Random, gain: float, sigma_w: float, drift: float = 2e-4, dip_p: float = 0.0):
    """(window, value) for one run: stock 1.0, C × (1 + gain), window noise N(0, sigma_w), linear
    drift per window, and dips (12–40 % slow windows) with probability dip_p."""
    out = []
    for w in plan(CYCLES, 1):
        v = (1 + gain if w.role == "C" else 1.0) * (1 + drift * w.index) * math.exp(rng.gauss(0, sigma_w))
        if rng.random() < dip_p:
            v *= 1 - rng.uniform(0.12, 0.4)
        out.append((w, v))
    return out


def verdict(samples, policy: SprtPolicy = POLICY, gated: bool = True) -> tuple[str, int]:
    """(final speed verdict, cycles run) as arena/run.py decides it."""
    for k in range(1, CYCLES):
        so_far = [(w, v) for w, v in samples if w.cycle < k]
        if gated:
            decision, _ = early_stop(so_far, SPEED, policy)
        else:  # the broken control: the raw SPRT, no fixed-sample gate on a PASS
            decision = sprt(judge(so_far, SPEED).ratios, policy).decision
        if decision != "CONTINUE":
            return decision, k
    return judge(samples, SPEED).verdict, CYCLES


def rates(gain: float, sigma_w: float, n: int = N, seed: int = 7, **kw) -> tuple[float, float, float]:
    """(PASS rate, mean cycles, fraction stopped at min_cycles)."""
    rng = random.Random(seed)
    got = [
        verdict(
            series(rng, gain, sigma_w, **{k: v for k, v in kw.items() if k in ("drift", "dip_p")}),
            **{k: v for k, v in kw.items() if k in ("policy", "gated")},
        )
        for _ in range(n)
    ]
    return (
        sum(v == "PASS" for v, _ in got) / n,
        sum(c for _, c in got) / n,
        sum(c == POLICY.min_cycles for _, c in got) / n,
    )


def test_bounds_and_decisions():
    p = SprtPolicy(alpha=0.01, beta=0.05, alt_gain=0.01, sigma=0.004, min_cycles=2)
    assert p.upper == pytest.approx(math.log(0.95 / 0.01)) and p.lower == pytest.approx(math.log(0.05 / 0.99))
    assert sprt([1.0], p).decision == "CONTINUE"  # below min_cycles nothing is decided
    assert sprt([0.97, 0.97], p).decision == "FAIL"
    assert sprt([1.012, 1.011], p).decision == "PASS"
    assert sprt([1.005, 1.005], p).decision == "CONTINUE"  # the midpoint: no evidence either way
    # a noisy run is read as noisy as it is: the same mean with a wide spread decides nothing
    wide = sprt([1.06, 0.96], p)
    assert wide.sigma > 0.05 and wide.decision == "CONTINUE"
    with pytest.raises(ValueError):
        sprt([1.0, 0.0], p)
    with pytest.raises(ValueError):
        SprtPolicy(alpha=0.6)


def test_early_pass_needs_the_fixed_verdict_too():
    # SPRT alone would PASS (two cycles 1.2 %) but B′/B drift of 3 % makes the fixed verdict
    # NO_DECISION-ish (bar far above): the run goes on
    p = SprtPolicy(sigma=0.004)
    samples = []
    for w in plan(2, 0):
        base = 1.0 if w.role != "B'" else 1.03
        samples.append((w, base * (1.027 if w.role == "C" else 1.0)))
    decision, state = early_stop(samples, SPEED, p)
    assert state.decision == "PASS" and decision == "CONTINUE"


@pytest.mark.parametrize("sigma_w", [0.001, 0.003, 0.007])
def test_stock_vs_stock_false_crowns_at_most_one_percent_and_stops_early(sigma_w):
    crown, cycles, _ = rates(0.0, sigma_w)
    assert crown <= 0.01, (sigma_w, crown)
    assert cycles <= 0.65 * CYCLES, cycles  # a copy-like no-gain submission stops well before 8 cycles


def test_false_crowns_stay_rare_with_dips_and_strong_drift():
    crown, _, _ = rates(0.0, 0.003, drift=1e-3, dip_p=0.05)
    assert crown <= 0.01, crown


@pytest.mark.parametrize("sigma_w, least", [(0.001, 0.99), (0.003, 0.9)])
def test_a_one_percent_gain_is_still_crowned(sigma_w, least):
    crown, _, _ = rates(0.01, sigma_w)
    assert crown >= least, (sigma_w, crown)


def fixed_rate(gain: float, sigma_w: float, n: int = N, seed: int = 7) -> float:
    """The crown rate of the fixed-length verdict (all cycles, no sequential stop)."""
    rng = random.Random(seed)
    return sum(judge(series(rng, gain, sigma_w), SPEED).verdict == "PASS" for _ in range(n)) / n


@pytest.mark.parametrize("sigma_w", [0.003, 0.007])
def test_a_one_percent_gain_loses_little_against_the_fixed_rule(sigma_w):
    crown, _, _ = rates(0.01, sigma_w)
    fixed = fixed_rate(0.01, sigma_w)
    assert crown >= fixed - 0.06, (crown, fixed)  # beta = 5 % (+ simulation error)


@pytest.mark.parametrize("sigma_w", [0.001, 0.003, 0.007])
def test_a_three_percent_loser_stops_at_min_cycles(sigma_w):
    crown, cycles, at_min = rates(-0.03, sigma_w)
    assert crown == 0 and at_min >= 0.95 and cycles <= 2.1, (crown, cycles, at_min)


def test_control_a_miscalibrated_test_is_caught_by_the_simulation():
    # the harness can fail: the raw SPRT (no fixed-verdict gate) set for a 0.1 % gain at alpha 0.25 crowns
    # stock against stock far more often than 1 %
    crown, _, _ = rates(0.0, 0.003, policy=replace(POLICY, alt_gain=0.001, sigma=0.0005, alpha=0.25, beta=0.25), gated=False)
    assert crown > 0.05, crown


if __name__ == "__main__":
    print("| scenario | window noise | crowned | crowned, fixed 8 cycles | mean cycles | stopped at min_cycles |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, gain in (("stock vs stock", 0.0), ("1 % gain", 0.01), ("3 % loser", -0.03)):
        for s in (0.001, 0.003, 0.007):
            c, m, a = rates(gain, s, n=2000)
            print(f"| {name} | {s:.1%} | {c:.2%} | {fixed_rate(gain, s, n=2000):.2%} | {m:.2f} | {a:.1%} |")
    c, m, a = rates(0.0, 0.003, n=2000, drift=1e-3, dip_p=0.05)
    print(f"| stock vs stock, drift 0.1 %/window, 5 % dips | 0.3% | {c:.2%} | – | {m:.2f} | {a:.1%} |")


def front_loaded(rng: random.Random, fast_cycles: int, sigma_w: float = 0.002):
    """A kernel +3 % for its first cycles and −5 % after (a call counter in device memory)."""
    out = []
    for w in plan(CYCLES, 1):
        gain = 0.03 if w.cycle < fast_cycles else -0.05
        out.append((w, (1 + gain if w.role == "C" else 1.0) * math.exp(rng.gauss(0, sigma_w))))
    return out


def test_a_kernel_fast_only_in_its_first_cycles_is_not_crowned_by_an_early_stop():
    """Red team 2026-12-04: with a PASS allowed to stop the run, a kernel fast for its first two
    cycles was crowned at cycle 2 in every run (the broken control below); the fixed rule over all
    cycles crowns it in none. By default only FAIL stops early."""
    rng = random.Random(11)
    runs = [front_loaded(rng, 2) for _ in range(200)]
    held = [verdict(s) for s in runs]
    assert all(v != "PASS" for v, _ in held), held[:5]
    eager = [verdict(s, policy=replace(POLICY, stop_on_pass=True)) for s in runs]
    assert sum(v == "PASS" for v, _ in eager) >= 0.95 * len(runs), eager[:5]
