"""The validator's view of an arena result: measured vs derived speedups, never mixed up."""

from __future__ import annotations

import arena_harness as h  # noqa: F401 - puts tests/seams on sys.path
import pytest

from arena.qualifier import to_qualify_result
from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.scoring.settle import Crown

OP = load_bundle(h.REPO / "examples" / "norm.rmsnorm").manifest.ops[0]
RESULT = {
    "verdict": "PASS",
    "reason": "speed: ...",
    "speed": {"ratio": 1.05, "noise": 0.003},
    "quality": {"verdict": "PASS"},
    "result_path": "/x/result.json",
}
CROWN = Crown("norm.rmsnorm", "hk", "cid", 1, 2, 1.2, 1.2, "arena-x")


def test_first_crown_is_measured_vs_stock():
    q = to_qualify_result(RESULT, OP, None, "arena-x", "gpu-arena")
    assert (q.speedup, q.speedup_vs_stock, q.noise, q.quality_ok) == (1.05, 1.05, 0.003, True)
    assert q.detail["speedup_basis"] == "measured vs stock"


def test_head_to_head_is_measured_vs_the_incumbent_and_chained():
    q = to_qualify_result(RESULT, OP, CROWN, "arena-x", "gpu-arena", head_to_head=True)
    assert q.speedup == pytest.approx(1.05) and q.speedup_vs_stock == pytest.approx(1.26)
    assert q.detail["speedup_basis"].startswith("measured vs the incumbent")


def test_without_the_incumbents_bundle_the_ratio_is_derived_and_labelled():
    q = to_qualify_result(RESULT, OP, CROWN, "arena-x", "gpu-arena", head_to_head=False)
    assert q.speedup == pytest.approx(1.05 / 1.2) and q.speedup_vs_stock == pytest.approx(1.05)
    assert q.detail["speedup_basis"].startswith("derived")


def test_no_speed_stage_never_reads_as_a_gain():
    q = to_qualify_result({"verdict": "FAIL", "reason": "execution evidence: ..."}, OP, None, "arena-x", "gpu-arena")
    assert q.verdict == "FAIL" and q.speedup == 1.0 and not q.quality_ok


def test_the_stored_detail_keeps_what_the_leaderboard_plots():
    """Each timed stage's windows on the judged metric, its noise and bar (arena-result/2 keys)."""
    from cacheon_subnet.validator.web.data import stages_of

    m = "decode_gpu_tokens_per_s"
    win = [
        {"index": i, "cycle": i // 4, "role": r, "route": "x", m: v, "s": 1.0}
        for i, (r, v) in enumerate([("B", 100.0), ("C", 110.0), ("C", 111.0), ("B'", 101.0)] * 2)
    ]
    speed = {
        "verdict": "PASS",
        "ratio": 1.09,
        "noise": 0.01,
        "bar": 1.02,
        "run_drift": 0.01,
        "reason": "r",
        "ratios": [1.0],
        "drift": [0.0],
        "paired_ratio": 1.0,
    }
    result = {**RESULT, "metric": m, "windows": win, "speed": speed, "confirm": {"windows": win[:4], "speed": speed}}
    q = to_qualify_result(result, OP, None, "arena-x", "gpu-arena")
    assert q.detail["metric"] == m and q.detail["speed"]["bar"] == 1.02 and "ratios" not in q.detail["speed"]
    stages = stages_of(q.detail)
    assert [(s["name"], len(s["windows"]), s["bar"], s["noise"]) for s in stages] == [
        ("resident", 8, 1.02, 0.01),
        ("confirm", 4, 1.02, 0.01),
    ]
    assert stages_of(to_qualify_result(RESULT, OP, None, "arena-x", "gpu-arena").detail) == []  # nothing timed
