"""Crown settlement rules: each test pins one rule so breaking the rule turns it red."""

from __future__ import annotations

import math
import random

import pytest

from cacheon_subnet.scoring import Crown, Evidence, ScoringError, SpeedPolicy, settle_target

T = "norm.rmsnorm"
POLICY = SpeedPolicy()
BLOCK = 1_000


def ev(
    cid: str,
    speedup: float,
    *,
    noise: float = 0.002,
    commit: int = 100,
    verdict: str = "PASS",
    quality: bool = True,
    arena: str = "h200/sglang-0.5.13/llama",
    evaluated: int = 900,
    hotkey: str | None = None,
    target: str = T,
) -> Evidence:
    return Evidence(
        contribution_id=cid,
        target=target,
        hotkey=hotkey or f"hk-{cid}",
        commit_block=commit,
        verdict=verdict,
        quality_ok=quality,
        speedup=speedup,
        noise=noise,
        arena_id=arena,
        evaluated_block=evaluated,
    )


def incumbent(vs_stock: float = 1.10, crowned: int = 500, arena: str = "h200/sglang-0.5.13/llama") -> Crown:
    return Crown(
        target=T,
        hotkey="hk-inc",
        contribution_id="inc",
        commit_block=400,
        crowned_block=crowned,
        measured_speedup=vs_stock,
        speedup_vs_stock=vs_stock,
        arena_id=arena,
    )


def settle(evidence, inc=None, policy=POLICY, block=BLOCK):
    return settle_target(T, inc, evidence, policy, block)


# --- the speed bar: 1 + max(margin, k * noise) -------------------------------------------


def test_bar_is_the_margin_when_noise_is_small():
    assert POLICY.bar(0.002) == pytest.approx(1.0075)
    assert settle([ev("c", 1.0074)]).outcome_of("c") == "below_bar"
    assert settle([ev("c", 1.0076)]).outcome_of("c") == "crowned"


def test_bar_is_k_times_noise_when_noise_is_large():
    # noise 0.01 -> bar 1.02; 1.019 would clear the margin alone, but not the noise band
    assert settle([ev("c", 1.019, noise=0.01)]).outcome_of("c") == "below_bar"
    assert settle([ev("c", 1.021, noise=0.01)]).outcome_of("c") == "crowned"
    strict = SpeedPolicy(k=3.0)  # bar 1.03
    assert settle([ev("c", 1.025, noise=0.01)], policy=strict).outcome_of("c") == "below_bar"
    assert settle([ev("c", 1.031, noise=0.01)], policy=strict).outcome_of("c") == "crowned"


def test_bar_applies_against_the_incumbent_and_against_stock():
    # no incumbent: stock-equivalent and tiny wins never crown
    s = settle([ev("same", 1.0), ev("blip", 1.003, commit=101)])
    assert s.crown is None
    assert {d.outcome for d in s.decisions} == {"below_bar"}
    # with an incumbent, C/B is already relative to it
    s = settle([ev("c", 1.005)], inc=incumbent())
    assert s.crown == incumbent() and s.outcome_of("c") == "below_bar"


def test_exact_tie_at_the_bar_is_not_a_win():
    assert settle([ev("c", POLICY.bar(0.0))]).outcome_of("c") == "below_bar"
    # against an earlier challenger too: exactly earlier * bar keeps the earlier commit
    s = settle([ev("early", 1.05, commit=100), ev("late", 1.05 * POLICY.bar(0.002), commit=101)])
    assert s.crown.contribution_id == "early" and s.outcome_of("late") == "beaten_by_earlier"


def test_reasons_carry_the_numbers():
    s = settle([ev("lo", 1.0050, noise=0.003), ev("hi", 1.0420, noise=0.003, commit=101)])
    lo, hi = s.decisions
    assert "1.0050" in lo.reason and "1.0075" in lo.reason and "0.0030" in lo.reason
    assert "1.0420" in hi.reason and "speedup_vs_stock" in hi.reason


# --- verdicts: only PASS with quality_ok crowns; FAIL and NO_DECISION stay distinct ------


@pytest.mark.parametrize(
    "verdict,quality,outcome",
    [
        ("FAIL", True, "failed"),
        ("FAIL", False, "failed"),
        ("PASS", False, "failed"),
        ("NO_DECISION", True, "no_decision"),
        ("NO_DECISION", False, "no_decision"),
    ],
)
def test_only_pass_with_quality_crowns(verdict, quality, outcome):
    s = settle([ev("c", 1.5, verdict=verdict, quality=quality)])
    assert s.crown is None
    assert s.outcome_of("c") == outcome


def test_a_failing_contribution_does_not_block_a_later_good_one():
    s = settle(
        [ev("bad", 1.9, verdict="FAIL"), ev("nd", 1.8, verdict="NO_DECISION", commit=101), ev("good", 1.03, commit=102)]
    )
    assert s.crown.contribution_id == "good"
    assert [d.outcome for d in s.decisions] == ["failed", "no_decision", "crowned"]


def test_unknown_verdict_is_rejected():
    with pytest.raises(ScoringError, match="verdict"):
        ev("c", 1.1, verdict="pass")


# --- several challengers: commit order, earlier wins ties, later must beat by the bar ----


def test_earlier_commit_wins_ties():
    s = settle([ev("late", 1.05, commit=101), ev("early", 1.05, commit=100)])
    assert s.crown.contribution_id == "early"
    assert s.outcome_of("late") == "beaten_by_earlier"
    # same commit block: contribution_id breaks the tie
    s = settle([ev("b", 1.05, commit=100), ev("a", 1.05, commit=100)])
    assert s.crown.contribution_id == "a" and s.outcome_of("b") == "beaten_by_earlier"


def test_later_challenger_must_beat_the_earlier_by_the_bar():
    need = 1.05 * POLICY.bar(0.002)  # 1.057875
    s = settle([ev("early", 1.05, commit=100), ev("late", need - 1e-4, commit=101)])
    assert s.crown.contribution_id == "early"
    assert s.outcome_of("late") == "beaten_by_earlier"
    assert "1.0579" in s.decisions[1].reason
    s = settle([ev("early", 1.05, commit=100), ev("late", need + 1e-4, commit=101)])
    assert s.crown.contribution_id == "late"
    assert s.outcome_of("early") == "superseded"
    assert s.crown.measured_speedup == pytest.approx(need + 1e-4)


def test_challenger_vs_challenger_bar_uses_the_larger_noise():
    # the earlier one was measured on a noisy box: ratio must clear 1 + 2*0.01
    s = settle([ev("early", 1.05, noise=0.01, commit=100), ev("late", 1.05 * 1.015, commit=101)])
    assert s.crown.contribution_id == "early" and s.outcome_of("late") == "beaten_by_earlier"
    s = settle([ev("early", 1.05, noise=0.01, commit=100), ev("late", 1.05 * 1.021, commit=101)])
    assert s.crown.contribution_id == "late"


def test_a_chain_of_challengers_keeps_the_best_by_bar():
    s = settle([ev("a", 1.02, commit=1), ev("b", 1.06, commit=2), ev("c", 1.062, commit=3), ev("d", 1.10, commit=4)])
    assert [d.outcome for d in s.decisions] == ["superseded", "superseded", "beaten_by_earlier", "crowned"]
    assert s.crown.contribution_id == "d"


def test_earlier_below_bar_does_not_shield_a_later_qualifier():
    s = settle([ev("early", 1.004, commit=100), ev("late", 1.03, commit=101)])
    assert s.outcome_of("early") == "below_bar" and s.crown.contribution_id == "late"


# --- the crown itself --------------------------------------------------------------------


def test_speedup_vs_stock_is_chained():
    s = settle([ev("c", 1.05, evaluated=900)], inc=incumbent(vs_stock=1.10))
    crown = s.crown
    assert crown.contribution_id == "c" and crown.hotkey == "hk-c" and crown.commit_block == 100
    assert crown.measured_speedup == pytest.approx(1.05)
    assert crown.speedup_vs_stock == pytest.approx(1.10 * 1.05)
    assert crown.crowned_block == BLOCK and crown.arena_id == incumbent().arena_id
    # a first crown is measured against stock
    first = settle([ev("c", 1.05)]).crown
    assert first.speedup_vs_stock == pytest.approx(1.05) and first.measured_speedup == pytest.approx(1.05)


def test_settlement_is_idempotent():
    evidence = [ev("a", 1.03, commit=100), ev("b", 1.08, commit=101)]
    first = settle(evidence, inc=incumbent())
    again = settle(evidence, inc=first.crown, block=BLOCK + 10)
    assert again.crown == first.crown
    assert {d.outcome for d in again.decisions} == {"no_decision"}


# --- comparability: arena, staleness, sanity, reproduction -------------------------------


def test_other_arena_is_not_comparable():
    s = settle([ev("c", 1.30, arena="b200/sglang-0.5.14/llama")], inc=incumbent())
    assert s.crown == incumbent()
    assert s.outcome_of("c") == "no_decision"
    assert "arena" in s.decisions[0].reason and "re-measure" in s.decisions[0].reason


def test_without_incumbent_the_latest_arena_is_the_reference():
    s = settle(
        [ev("old", 1.30, arena="old", evaluated=800, commit=100), ev("new", 1.02, arena="new", evaluated=900, commit=101)]
    )
    assert s.crown.contribution_id == "new" and s.crown.arena_id == "new"
    assert s.outcome_of("old") == "no_decision"


def test_evidence_measured_before_the_incumbent_is_stale():
    s = settle([ev("c", 1.30, evaluated=500)], inc=incumbent(crowned=500))
    assert s.crown == incumbent() and s.outcome_of("c") == "no_decision"
    assert "re-measure" in s.decisions[0].reason


def test_evidence_for_the_incumbent_itself_is_not_a_challenge():
    s = settle([ev("inc", 1.30, hotkey="hk-inc")], inc=incumbent())
    assert s.crown == incumbent() and s.outcome_of("inc") == "no_decision"


@pytest.mark.parametrize(
    "speedup,noise",
    [
        (math.nan, 0.002),
        (math.inf, 0.002),
        (-1.0, 0.002),
        (1.05, math.nan),
        (1.05, -0.01),
        (1.30, 0.06),  # box too noisy (max_noise 0.05)
        (4.0, 0.002),  # implausible end-to-end (max_speedup 3.0)
    ],
)
def test_broken_measurements_are_no_decision(speedup, noise):
    s = settle([ev("c", speedup, noise=noise)])
    assert s.crown is None and s.outcome_of("c") == "no_decision"


def test_clearly_slower_is_below_bar_even_when_noisy():
    # The top of the noise band (0.30 * (1 + 2*0.5) = 0.6) is still slower than parity: a decision.
    s = settle([ev("slow", 0.30, noise=0.5)])
    assert s.crown is None and s.outcome_of("slow") == "below_bar"
    # ...while a noisy measurement whose band reaches parity stays undecided.
    assert settle([ev("maybe", 0.95, noise=0.06)]).outcome_of("maybe") == "no_decision"


def test_reproduction_passes_settle_conservatively():
    two = SpeedPolicy(min_passes=2)
    assert settle([ev("c", 1.05)], policy=two).outcome_of("c") == "no_decision"
    s = settle([ev("c", 1.05, noise=0.001, evaluated=800), ev("c", 1.03, noise=0.004, evaluated=900)], policy=two)
    assert s.crown.measured_speedup == pytest.approx(1.03)  # min over passes
    assert "0.0040" in s.decisions[0].reason  # max noise over passes
    s = settle([ev("c", 1.05, evaluated=800), ev("c", 1.05, verdict="FAIL", evaluated=900)], policy=two)
    assert s.crown is None and s.outcome_of("c") == "failed"
    # a NO_DECISION pass does not count, but does not fail the contribution either
    s = settle(
        [ev("c", 1.05, evaluated=800), ev("c", 0, verdict="NO_DECISION", evaluated=850), ev("c", 1.04, evaluated=900)],
        policy=two,
    )
    assert s.crown.measured_speedup == pytest.approx(1.04)


# --- determinism and input errors --------------------------------------------------------


def test_same_evidence_in_any_order_gives_the_same_settlement():
    evidence = [
        ev("a", 1.02, commit=5),
        ev("b", 1.06, commit=7),
        ev("c", 1.06, commit=7),
        ev("d", 1.9, commit=3, verdict="FAIL"),
        ev("e", 1.3, commit=9, arena="x"),
        ev("f", 1.061, commit=6, noise=0.02),
        ev("b", 1.07, commit=7, evaluated=950),
    ]
    reference = settle(evidence, inc=incumbent(vs_stock=1.01))
    rng = random.Random(7)
    for _ in range(20):
        shuffled = evidence[:]
        rng.shuffle(shuffled)
        assert settle(shuffled, inc=incumbent(vs_stock=1.01)) == reference


def test_malformed_input_raises():
    with pytest.raises(ScoringError, match="target"):
        settle([ev("c", 1.05, target="activation.silu_and_mul")])
    with pytest.raises(ScoringError, match="after the settlement block"):
        settle([ev("c", 1.05, evaluated=BLOCK + 1)])
    with pytest.raises(ScoringError, match="disagree"):
        settle([ev("c", 1.05, hotkey="x"), ev("c", 1.05, hotkey="y")])
    with pytest.raises(ScoringError, match="margin"):
        SpeedPolicy(margin=-0.1)
