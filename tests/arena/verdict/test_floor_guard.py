"""The physical-floor guard (issue 34 item 3): a PASS whose implied kernel time is below the slot's
roofline on the card is NO_DECISION; a plausible one stands. Figures: the dense arena's recorded
H200 decode profile (docs/results/2026-12-02/h200-s7-profile.json) and configs/cards.toml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena.verdict.floor import (
    FloorError,
    floor_guard,
    implied_us,
    load_card,
    roofline_us,
    usage_from_profile,
)
from arena.verdict.speed import SpeedVerdict

torch = pytest.importorskip("torch")
from cacheon_subnet.slots import get_slot  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PROFILE = REPO / "docs" / "results" / "2026-12-02" / "h200-s7-profile.json"
SLOT = "norm.fused_add_rmsnorm"


def passed(ratio: float) -> SpeedVerdict:
    return SpeedVerdict("PASS", ratio, (), (), 0.001, 1.005, f"C/B {ratio:.4f}, bar 1.0050")


@pytest.fixture(scope="module")
def setup():
    usage = usage_from_profile(json.loads(PROFILE.read_text()), SLOT, PROFILE.name)
    spec = get_slot(SLOT)
    case = next(c for c in spec.cases("bench") if c.label.endswith("decode-bs256"))
    card = load_card("H200")
    return usage, roofline_us(spec.default_bytes(case, torch.bfloat16), spec.flops and spec.flops(case), card), card


def test_profile_figures(setup):
    usage, floor, card = setup
    assert usage.stock_us == pytest.approx(2416.5 / 896) and usage.calls_per_step == pytest.approx(56)
    assert 0 < floor < usage.stock_us  # the stock kernel itself is above its floor
    assert card.hbm_gbps == pytest.approx(4272.0) and "measured" in card.hbm_source


def test_plausible_gain_passes(setup):
    usage, floor, card = setup
    v = floor_guard(passed(1.005), usage, floor, card)  # ~1 µs a call saved of 2.7
    assert v.verdict == "PASS" and implied_us(1.005, usage) > floor


def test_impossible_gain_is_no_decision_with_the_reason(setup):
    usage, floor, card = setup
    v = floor_guard(passed(1.02), usage, floor, card)  # would save more than the whole kernel
    assert v.verdict == "NO_DECISION"
    assert "physical floor" in v.reason and SLOT in v.reason and "roofline" in v.reason and "C/B 1.0200" in v.reason


def test_just_below_the_floor_is_caught(setup):
    usage, floor, card = setup
    # the ratio whose implied time is 90 % of the floor: faster than HBM allows, though not negative
    saved = (usage.stock_us - 0.9 * floor) * usage.calls_per_step
    ratio = 1 / (1 - saved / usage.step_us)
    assert floor_guard(passed(ratio), usage, floor, card).verdict == "NO_DECISION"


def test_handicap_in_b_raises_what_b_runs(setup):
    """The handicap control (B = stock + 150 µs spin a step) legitimately gains ~1.2 %: B's own time counts."""
    usage, floor, card = setup
    spun = usage_from_profile(json.loads(PROFILE.read_text()), SLOT, PROFILE.name, extra_us=150.0 / 56)
    assert floor_guard(passed(1.012), usage, floor, card).verdict == "NO_DECISION"
    assert floor_guard(passed(1.012), spun, floor, card).verdict == "PASS"


def test_fail_and_no_decision_pass_through(setup):
    usage, floor, card = setup
    fail = SpeedVerdict("FAIL", 2.0, (), (), 0.001, 1.005, "x")
    assert floor_guard(fail, usage, floor, card) is fail


def test_bad_card_file_is_named(tmp_path):
    bad = tmp_path / "cards.toml"
    bad.write_text('schema = 1\n[H200]\nhbm_gbps = 0\npeak_tflops = 989.0\nhbm_source = "x"\npeak_source = "y"\n')
    with pytest.raises(FloorError, match=r"\[H200\]\.hbm_gbps"):
        load_card("H200", bad)
    with pytest.raises(FloorError, match=r"no \[B200\]"):
        load_card("B200", bad)
    with pytest.raises(FloorError, match="no calls of nope"):
        usage_from_profile(json.loads(PROFILE.read_text()), "nope", "p")
