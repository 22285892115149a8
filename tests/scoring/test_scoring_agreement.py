"""Agreement: independent validators, each with its own noisy measurements, settle crowns and
compute weights on their own; Yuma over their published vectors must pay the true best miner,
crown nobody for a stock-equivalent kernel, and pay a deviating validator less."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from cacheon_subnet.scoring import (
    Crown,
    Evidence,
    SpeedPolicy,
    WeightPolicy,
    compute_weights,
    settle_target,
    to_u16,
)
from cacheon_subnet.scoring.yuma import yuma_epochs

TARGETS = ("norm.rmsnorm", "activation.silu_and_mul", "attention.decode")
OWNER = 0
UIDS = {"m-best": 1, "m-early": 2, "m-stock": 3, "m-bad": 4, "m-dev": 5}
N_UIDS = 6
ARENA = "h200/sglang-0.5.13/qwen3-8b"
STAKES = (35_000.0, 25_000.0, 20_000.0, 12_000.0, 8_000.0)
SIGMAS = (0.0015, 0.002, 0.0025, 0.002, 0.0015)  # each validator's box: relative std of one measurement
SPEED = SpeedPolicy()
WEIGHT = WeightPolicy()
SETTLE_BLOCK = 1_000
WEIGHT_BLOCK = 1_360
EPOCHS = 30
SEEDS = range(8)


@dataclass(frozen=True)
class Truth:
    """A contribution as it really is; validators only ever see noisy measurements of it."""

    cid: str
    target: str
    hotkey: str
    commit_block: int
    speedup: float  # true C/B against the stack it is measured on
    verdict: str = "PASS"


ROUND_1 = (
    Truth("rms-early", "norm.rmsnorm", "m-early", 100, 1.015),
    Truth("rms-best", "norm.rmsnorm", "m-best", 105, 1.045),  # clear winner: ~3 % over the early one
    Truth("silu-stock", "activation.silu_and_mul", "m-stock", 101, 1.0),  # stock-equivalent
    Truth("decode-wrong", "attention.decode", "m-bad", 102, 1.30, verdict="FAIL"),  # fast but wrong
)


def measure(truth: Truth, sigma: float, rng: random.Random, evaluated: int) -> Evidence:
    """One validator's pass: gaussian error on the true speedup and on its own noise estimate."""
    speedup = truth.speedup * (1.0 + rng.gauss(0.0, sigma))
    noise = max(0.0, sigma * (1.0 + rng.gauss(0.0, 0.25)))
    return Evidence(
        contribution_id=truth.cid,
        target=truth.target,
        hotkey=truth.hotkey,
        commit_block=truth.commit_block,
        verdict=truth.verdict,
        quality_ok=truth.verdict == "PASS",
        speedup=speedup,
        noise=noise,
        arena_id=ARENA,
        evaluated_block=evaluated,
    )


def validator_round(
    v: int, seed: int, truths, crowns: dict[str, Crown | None], settle_block: int, evaluated: int
) -> tuple[dict[str, Crown | None], dict[str, str]]:
    """Validator v measures everything itself and settles every target; returns crowns and outcomes."""
    rng = random.Random(seed * 1_000 + v)
    evidence = [measure(t, SIGMAS[v], rng, evaluated + v) for t in truths]
    new_crowns: dict[str, Crown | None] = {}
    outcomes: dict[str, str] = {}
    for target in TARGETS:
        s = settle_target(target, crowns.get(target), [e for e in evidence if e.target == target], SPEED, settle_block)
        new_crowns[target] = s.crown
        outcomes.update({d.contribution_id: d.outcome for d in s.decisions})
    return new_crowns, outcomes


def published_row(crowns: dict[str, Crown | None], block: int) -> np.ndarray:
    """What the validator would put on chain: compute_weights -> to_u16, as a dense row."""
    w = compute_weights([c for c in crowns.values() if c is not None], TARGETS, UIDS, OWNER, block, WEIGHT)
    uids, values = to_u16(w)
    row = np.zeros(N_UIDS)
    row[list(uids)] = values
    return row


def simulate(seed: int):
    results = [validator_round(v, seed, ROUND_1, {}, SETTLE_BLOCK, 900) for v in range(len(STAKES))]
    rows = np.array([published_row(crowns, WEIGHT_BLOCK) for crowns, _ in results])
    return results, rows


@pytest.mark.parametrize("seed", SEEDS)
def test_independent_validators_agree_and_yuma_pays_the_true_best(seed):
    results, rows = simulate(seed)
    for crowns, outcomes in results:
        assert crowns["norm.rmsnorm"].hotkey == "m-best"
        assert outcomes["rms-early"] == "superseded" and outcomes["rms-best"] == "crowned"
        assert crowns["activation.silu_and_mul"] is None and outcomes["silu-stock"] == "below_bar"
        assert crowns["attention.decode"] is None and outcomes["decode-wrong"] == "failed"
    # the measured improvements differ, so the vectors differ a little, but not the crowns
    assert len({tuple(r) for r in rows}) > 1
    r = yuma_epochs(rows, STAKES, EPOCHS)
    best = UIDS["m-best"]
    others = [uid for hk, uid in UIDS.items() if hk != "m-best"]
    assert all(r.incentive[best] > r.incentive[uid] for uid in others)
    assert all(r.incentive[uid] == 0.0 for uid in others)
    assert r.incentive[OWNER] > 0  # two uncrowned targets and the partial credit burn
    assert r.validator_trust.min() > 0.9  # honest measurement noise costs only a little trust


@pytest.mark.parametrize("seed", SEEDS)
def test_stock_equivalent_challenger_of_an_incumbent_is_crowned_by_nobody(seed):
    results, _ = simulate(seed)
    copy = Truth("rms-copy", "norm.rmsnorm", "m-dev", 200, 1.0)  # no faster than the incumbent stack
    better = Truth("rms-better", "norm.rmsnorm", "m-early", 201, 1.03)
    for v, (crowns, _) in enumerate(results):
        round2, outcomes = validator_round(v, seed + 100, (copy,), crowns, 2_000, 1_500)
        assert round2["norm.rmsnorm"] == crowns["norm.rmsnorm"] and outcomes["rms-copy"] == "below_bar"
        round3, outcomes = validator_round(v, seed + 200, (copy, better), crowns, 2_000, 1_500)
        assert outcomes["rms-copy"] == "below_bar" and outcomes["rms-better"] == "crowned"
        chained = round3["norm.rmsnorm"].speedup_vs_stock
        assert chained == pytest.approx(crowns["norm.rmsnorm"].speedup_vs_stock * 1.03, rel=0.02)


def own_miner(rows: np.ndarray, v: int) -> np.ndarray:
    dev = np.zeros(N_UIDS)
    dev[UIDS["m-dev"]] = 65535.0
    return dev


def stale_crown(rows: np.ndarray, v: int) -> np.ndarray:
    crown = Crown("norm.rmsnorm", "m-early", "rms-early", 100, SETTLE_BLOCK, 1.015, 1.015, ARENA)
    return published_row({"norm.rmsnorm": crown}, WEIGHT_BLOCK)


def copied_but_inflated(rows: np.ndarray, v: int) -> np.ndarray:
    dev = rows[0].copy()
    dev[UIDS["m-best"]] *= 3.0  # over-rates the right miner
    return dev


@pytest.mark.parametrize("deviation", [own_miner, stale_crown, copied_but_inflated])
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_a_deviating_validator_earns_lower_dividends(seed, deviation):
    _, rows = simulate(seed)
    dev = 3  # mid-sized stake
    honest = yuma_epochs(rows, STAKES, EPOCHS)
    rows = rows.copy()
    rows[dev] = deviation(rows, dev)
    r = yuma_epochs(rows, STAKES, EPOCHS)
    per_stake = r.dividends / (np.array(STAKES) / sum(STAKES))
    honest_idx = [i for i in range(len(STAKES)) if i != dev]
    assert per_stake[dev] < per_stake[honest_idx].min()
    assert r.dividends[dev] < honest.dividends[dev]  # it would have earned more by being honest
    assert r.incentive[UIDS["m-dev"]] == 0.0 and r.incentive[UIDS["m-early"]] == 0.0  # clipped away
    assert np.argmax(r.incentive[1:]) + 1 == UIDS["m-best"]
