"""The physical-floor guard wired into the GPU arena's verdict (issue 34 items 1, 3): its figures
come from the arena's slot-input fixture; without one, or on another card, it says "not checked"
and never blocks; a handicap control's spin is B's, so the guard never blocks that control."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/arena: the arena harness
import arena_harness as h  # noqa: E402

from arena.config import load_config  # noqa: E402
from arena.run import RunOptions, qualify, stock_control_op  # noqa: E402
from arena.verdict import floor_arena  # noqa: E402
from arena.verdict.speed import SpeedVerdict  # noqa: E402
from cacheon_subnet.records import slot_inputs  # noqa: E402

pytest.importorskip("torch")

DENSE = load_config(h.DENSE)
SLOT = "norm.fused_add_rmsnorm"
H200 = "NVIDIA H200"


def passed(ratio: float) -> SpeedVerdict:
    return SpeedVerdict("PASS", ratio, (), (), 0.001, 1.005, f"C/B {ratio:.4f}, bar 1.0050")


def test_the_committed_dense_fixture_holds_an_impossible_gain_and_passes_a_plausible_one():
    """fused add RMSNorm: 2.70 µs a call, 56 calls in an 11.7 ms step (h200-s7-profile.json)."""
    v, note = floor_arena.check(passed(1.02), DENSE, SLOT, card=H200)  # saves more than the whole kernel
    assert v.verdict == "NO_DECISION" and note == v.reason and "physical floor" in note and "h200-s7-profile" in note
    v, note = floor_arena.check(passed(1.005), DENSE, SLOT, card=H200)
    assert v.verdict == "PASS" and note.startswith("physical floor: checked") and "roofline" in note


def test_no_fixture_another_card_or_no_figures_is_not_checked_and_never_blocks(tmp_path):
    for got in (
        floor_arena.check(passed(1.5), DENSE, SLOT, card=H200, root=tmp_path),  # no fixture
        floor_arena.check(passed(1.5), DENSE, SLOT, card="NVIDIA H100 80GB HBM3"),  # the fixture is the H200's
        floor_arena.check(passed(1.5), DENSE, SLOT, card=""),  # a CPU box
        floor_arena.check(passed(1.5), DENSE, "attention.extend", card=H200),  # no decode figures
    ):
        assert got[0].verdict == "PASS" and got[1].startswith(floor_arena.NOT_CHECKED), got[1]
    bad = tmp_path / "qwen3-0.6b-dense.json"
    bad.write_text("{}")
    v, note = floor_arena.check(passed(1.5), DENSE, SLOT, card=H200, root=tmp_path)
    assert v.verdict == "PASS" and "fixture unreadable" in note and str(bad) in note


def test_a_handicap_controls_spin_is_bs_so_the_guard_never_blocks_it():
    """B spins 15 µs a call: B's step is 56 x 15 µs longer, C (plain stock) reads that gain.
    Broken control: the same ratio judged as if B were plain stock is below the floor."""
    fx = slot_inputs.load("qwen3-0.6b-dense")
    assert fx is not None and fx.decode_step_us is not None
    step, calls, spin = fx.decode_step_us.value, 56.0, 15.0
    ratio = (step + spin * calls) / step  # what a perfect arena reads for the control
    v, note = floor_arena.check(passed(ratio), DENSE, SLOT, handicap_us=spin, card=H200)
    assert v.verdict == "PASS" and note.startswith("physical floor: checked"), note
    v, _ = floor_arena.check(passed(ratio), DENSE, SLOT, handicap_us=0.0, card=H200)
    assert v.verdict == "NO_DECISION"


# ---- in the arena itself: the fake engine (tests/arena/fake_engine.py) --------------------------
def _tiny_fixture(root: Path, stock_us: float) -> None:
    """norm.rmsnorm as the whole decode step of the small config (window decode bs 8)."""
    fx = slot_inputs.ArenaFixture(
        1, "qwen3-0.6b-dense", "configs/arena/dense.toml", "H200", "test: not a measurement",
        {"norm.rmsnorm": slot_inputs.SlotInputs((), decode=slot_inputs.StageUse(
            8, slot_inputs.Figure(stock_us, "test"), slot_inputs.Figure(1.0, "test")))},
        slot_inputs.Figure(stock_us, "test"),
    )  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    (root / "qwen3-0.6b-dense.json").write_text(slot_inputs.dump(fx))


@pytest.fixture
def armed(tmp_path, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    _tiny_fixture(tmp_path / "fx", stock_us=0.01)  # a 1.5x gain implies < 0.007 µs: under the bs-8 floor
    monkeypatch.setattr(slot_inputs, "FIXTURES", tmp_path / "fx")
    monkeypatch.setattr(floor_arena, "detect_card", lambda: "NVIDIA H200")
    return tmp_path


@pytest.mark.slow
def test_a_gain_below_the_floor_is_no_decision_in_the_arena(armed):
    cfg = h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5)
    r = h.run(h.torch_bundle("floor"), armed, engine="SlowStockEngine", cfg=cfg, grade_always=False)
    assert r["speed"]["ratio"] > 1.5 and r["verdict"] == "NO_DECISION", r["reason"]
    assert "physical floor" in r["reason"] and "roofline" in r["reason"] and r["floor"][0] == r["speed"]["reason"]


@pytest.mark.slow
def test_the_handicap_control_is_still_crowned_with_the_guard_armed(armed):
    opts = RunOptions(
        workdir=armed / "w", checkpoint_root=armed / "c", engine_factory="tests.arena.fake_engine:FakeEngine",
        control="handicap", handicap_us=5000.0,
    )  # fmt: skip
    r = qualify(h.small_config(prompts=6, output=6, cycles=3, max_noise=0.5), None, stock_control_op("norm.rmsnorm"), opts)
    assert r["verdict"] == "PASS", r["reason"]
    assert all(n.startswith("physical floor: checked") for n in r["floor"]) and len(r["floor"]) == 2, r["floor"]
    json.dumps(r)  # the notes are plain JSON in result.json
    shutil.rmtree(armed / "w", ignore_errors=True)
