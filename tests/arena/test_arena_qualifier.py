"""The validator's view of an arena result: measured vs derived speedups, never mixed up, built
from the typed ArenaResult (no JSON in between)."""

from __future__ import annotations

from dataclasses import replace

import arena_harness as h  # noqa: F401 - puts tests/seams on sys.path
import pytest

from arena.qualifier import to_qualify_result
from arena.records import ArenaResult, QualityRecord, TimedStage, WindowRecord
from arena.verdict.evidence import Evidence
from arena.verdict.quality import QualityVerdict
from arena.verdict.speed import SpeedVerdict, Window
from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.records import GpuDetail, Role, SpeedMetric, Verdict, read_detail
from cacheon_subnet.records.detail import detail_json
from cacheon_subnet.scoring.settle import Crown

OP = load_bundle(h.REPO / "examples" / "norm.rmsnorm").manifest.ops[0]
M = "decode_gpu_tokens_per_s"
EVIDENCE = Evidence(True, (), (), {0: {"norm.rmsnorm": {"fired": 3}}}, {0: [{"epoch": 1, "route": "candidate"}]})
SPEED = SpeedVerdict("PASS", 1.05, (1.0,), (0.0,), 0.003, 1.02, "C/B 1.0500", 0.001, paired_ratio=1.0)
RESULT = ArenaResult(
    identity=h.identity("/x/result.json"),
    metric=M,
    resident=TimedStage((), EVIDENCE, speed=SPEED),
    quality=QualityRecord(QualityVerdict("PASS", (), {}), ()),
    verdict="PASS",
    reason="speed: ...",
    wall_s=12.5,
)
CROWN = Crown("norm.rmsnorm", "hk", "cid", 1, 2, 1.2, 1.2, "arena-x")


def gpu(q) -> GpuDetail:
    assert isinstance(q.detail, GpuDetail), q.detail
    return q.detail


def test_first_crown_is_measured_vs_stock():
    q = to_qualify_result(RESULT, OP, None, "arena-x", "gpu-arena")
    assert (q.speedup, q.speedup_vs_stock, q.noise, q.quality_ok) == (1.05, 1.05, 0.003, True)
    assert q.verdict is Verdict.PASS and gpu(q).speedup_basis == "measured vs stock"
    assert gpu(q).result_json == "/x/result.json" and gpu(q).wall_s == 12.5 and gpu(q).evidence.ok


def test_head_to_head_is_measured_vs_the_incumbent_and_chained():
    q = to_qualify_result(RESULT, OP, CROWN, "arena-x", "gpu-arena", head_to_head=True)
    assert q.speedup == pytest.approx(1.05) and q.speedup_vs_stock == pytest.approx(1.26)
    assert gpu(q).speedup_basis.startswith("measured vs the incumbent")


def test_without_the_incumbents_bundle_the_ratio_is_derived_and_labelled():
    q = to_qualify_result(RESULT, OP, CROWN, "arena-x", "gpu-arena", head_to_head=False)
    assert q.speedup == pytest.approx(1.05 / 1.2) and q.speedup_vs_stock == pytest.approx(1.05)
    assert gpu(q).speedup_basis.startswith("derived")


def test_no_speed_stage_never_reads_as_a_gain():
    bare = ArenaResult(identity=h.identity(""), metric=M, verdict="FAIL", reason="execution evidence: ...")
    q = to_qualify_result(bare, OP, None, "arena-x", "gpu-arena")
    assert q.verdict == "FAIL" and q.speedup == 1.0 and not q.quality_ok
    assert (gpu(q).windows, gpu(q).metric, gpu(q).speed, gpu(q).evidence) == (None, None, None, None)


def test_an_undetermined_ratio_reads_as_no_gain_and_is_stored_as_null():
    """Fewer than two complete cycles: the judge's ratio is NaN. It never becomes a speedup, and
    the stored figure is null (records never hold NaN), where older rows wrote NaN."""
    nan = float("nan")
    undecided = replace(SPEED, verdict="NO_DECISION", ratio=nan, noise=nan, bar=nan, run_drift=nan)
    q = to_qualify_result(replace(RESULT, resident=replace(RESULT.resident, speed=undecided)), OP, None, "a", "g")
    assert (q.speedup, q.noise) == (1.0, 0.0) and gpu(q).speed.ratio is None and gpu(q).speed.bar is None
    assert read_detail(detail_json(q.detail)) == q.detail


def test_an_unfinished_run_is_refused():
    with pytest.raises(ValueError, match="no verdict"):
        to_qualify_result(replace(RESULT, verdict=None), OP, None, "arena-x", "gpu-arena")


def test_the_stored_detail_keeps_what_the_leaderboard_plots():
    """Each timed stage's windows on the judged metric, its noise and bar (arena-result/2 keys)."""
    from cacheon_subnet.validator.web.stages import stages_of

    cycle = [("B", 100.0), ("C", 110.0), ("C", 111.0), ("B'", 101.0)] * 2
    win = tuple(WindowRecord(Window(i, i // 4, r, "x"), {M: v, "s": 1.0}) for i, (r, v) in enumerate(cycle))
    unread = WindowRecord(Window(8, 2, "C", "candidate"), {"s": 1.0, "clock_error": "forward clock: rank 0"})
    judged = replace(SPEED, ratio=1.09, noise=0.01, bar=1.02, run_drift=0.01, reason="r")
    result = replace(
        RESULT,
        resident=TimedStage(win + (unread,), EVIDENCE, speed=judged),
        confirm=TimedStage(win[:4], EVIDENCE, speed=judged),
    )
    q = to_qualify_result(result, OP, None, "arena-x", "gpu-arena")
    d = gpu(q)
    assert d.metric is SpeedMetric.DECODE_GPU_TOKENS_PER_S and d.speed.bar == 1.02 and len(d.windows) == 8
    assert d.windows[3].role is Role.B_PRIME and d.windows[3].value(d.metric) == 101.0 and d.windows[3].s == 1.0
    stages = stages_of(d.board())
    assert [(s["name"], len(s["windows"]), s["bar"], s["noise"]) for s in stages] == [
        ("resident", 8, 1.02, 0.01),
        ("confirm", 4, 1.02, 0.01),
    ]
    assert stages_of(gpu(to_qualify_result(replace(RESULT, resident=None), OP, None, "a", "g")).board()) == []
    # the evidence keeps its findings; per-rank counts and route acks stay in the result file only
    assert "per_rank" not in detail_json(d) and read_detail(detail_json(d)) == d
