"""The CPU arena's per-round paired figures: common-mode load cancels, real effects do not."""

import random

import pytest

from arena.cpu.case import case_figures, clearly_slower, in_process_figure, paired_figures


def _rounds(n, gain, load, jitter, seed=7, bias=0.0):
    rnd = random.Random(seed)
    bs, b2s, cs = [], [], []
    level = 1.0
    for _ in range(n):
        level = max(0.5, level * (1 + rnd.gauss(0, load)))  # a co-tenant drifting over seconds
        j = lambda: 1 + rnd.gauss(0, jitter)  # noqa: E731
        bs.append(100 * level * j())
        cs += [100 / gain * level * j(), 100 / gain * level * j()]
        b2s.append(100 * (1 + bias) * level * j())
    return bs, b2s, cs


def test_common_mode_load_cancels_in_the_pairs():
    bs, b2s, cs = _rounds(16, gain=1.5, load=0.15, jitter=0.002)
    speedup, noise = paired_figures(bs, b2s, cs)
    assert speedup == pytest.approx(1.5, rel=0.01)
    assert noise < 0.01  # the unpaired medians of this series spread by tens of percent
    import statistics

    unpaired = abs(statistics.median(bs) - statistics.median(b2s)) / statistics.median(bs)
    assert unpaired > 3 * noise or statistics.pstdev(bs) / statistics.mean(bs) > 0.05


def test_no_gain_reads_parity_within_its_band():
    for seed in range(20):
        speedup, noise = paired_figures(*_rounds(12, gain=1.0, load=0.1, jitter=0.01, seed=seed))
        assert abs(speedup - 1) < 3 * noise + 0.002, (seed, speedup, noise)


def test_baseline_drift_against_itself_widens_the_band():
    _, quiet = paired_figures(*_rounds(12, gain=1.0, load=0.0, jitter=0.001))
    _, biased = paired_figures(*_rounds(12, gain=1.0, load=0.0, jitter=0.001, bias=0.04))
    assert quiet < 0.005 and biased == pytest.approx(0.04, rel=0.1)


def test_jitter_is_the_band():
    _, noise = paired_figures(*_rounds(9, gain=1.2, load=0.0, jitter=0.05))
    assert noise > 0.01


def test_mismatched_series_refused():
    with pytest.raises(ValueError, match="need n B"):
        paired_figures([1.0, 2.0], [1.0, 2.0], [1.0, 1.0, 1.0])


def test_off_cpu_work_fails_on_a_quiet_box_and_is_undecided_on_a_busy_one():
    from arena.cpu.case import off_cpu_failure

    assert off_cpu_failure({"baseline": 1.05, "candidate": 1.3}, 2.0, 1.5) is None
    quiet = off_cpu_failure({"baseline": 1.05, "candidate": 3.0}, 2.0, 1.5)
    assert quiet is not None and quiet.side == "candidate" and "off its CPU clock" in quiet.reason
    busy = off_cpu_failure({"baseline": 4.63, "candidate": 10.04}, 2.0, 1.5)
    assert busy is not None and busy.side == "box" and "too busy" in busy.reason


def test_a_far_slower_candidate_is_decided_after_one_round_and_only_then():
    # the CPU interpreter's Triton: ~1000x the reference in both C batches of round 1
    assert clearly_slower([10.0], [11.0], [9000.0, 9500.0])
    # one C batch merely slow (a first-touch hiccup, a co-tenant) decides nothing after one round
    assert not clearly_slower([10.0], [11.0], [9000.0, 12.0])
    # a B batch as slow as C (the whole box was slow) decides nothing either
    assert not clearly_slower([10.0], [2000.0], [9000.0, 9500.0])
    # a faithful copy of the baseline never stops early, whatever the round count
    assert not clearly_slower([10.0, 10.2], [10.1, 9.9], [10.0, 10.3, 9.8, 10.1])
    # two rounds at a third of the speed: the older rule, kept
    assert clearly_slower([10.0, 10.0], [10.0, 10.0], [30.0, 31.0, 29.0, 30.0])
    assert not clearly_slower([10.0], [10.0], [30.0, 31.0])  # ... but not after one round


def _with_reference(n, gain, process_bias, reference_slowdown=1.0, seed=11):
    """Rounds where the candidate's whole process runs `process_bias` faster than the baseline's
    (what two workers of the same code read on a loaded 2-core box: up to 1.25x), and R, the
    reference inside the candidate's worker, shares that process (times `reference_slowdown`:
    a candidate sabotaging it)."""
    rnd = random.Random(seed)
    bs, b2s, cs, rs = [], [], [], []
    for _ in range(n):
        j = lambda: 1 + rnd.gauss(0, 0.005)  # noqa: E731
        bs.append(100 * j())
        b2s.append(100 * j())
        for _ in range(2):
            cs.append(100 / gain / process_bias * j())
            rs.append(100 / process_bias * reference_slowdown * j())
    return bs, b2s, cs, rs


def test_a_favourable_worker_bias_does_not_lift_a_no_gain_kernel():
    """The same code read 1.10-1.25x cross-process (docs/benchmarks.md): the in-process ratio
    sees no gain and the case reads parity, under the bar."""
    bs, b2s, cs, rs = _with_reference(16, gain=1.0, process_bias=1.2)
    speedup, cross, _ = case_figures(bs, b2s, cs, rs)
    assert cross == pytest.approx(1.2, rel=0.02)
    assert speedup == pytest.approx(1.0, rel=0.02)


def test_a_real_gain_survives_the_guard():
    bs, b2s, cs, rs = _with_reference(16, gain=1.5, process_bias=1.0)
    speedup, cross, _ = case_figures(bs, b2s, cs, rs)
    assert speedup == pytest.approx(1.5, rel=0.02) and cross == pytest.approx(1.5, rel=0.02)


def test_a_sabotaged_in_process_reference_cannot_lift_the_verdict():
    """The candidate controls its own process: slowing R there raises only the in-process figure,
    and the case keeps the lower (cross-process) one."""
    bs, b2s, cs, rs = _with_reference(16, gain=1.0, process_bias=1.0, reference_slowdown=3.0)
    assert in_process_figure(rs, cs) == pytest.approx(3.0, rel=0.02)
    speedup, cross, _ = case_figures(bs, b2s, cs, rs)
    assert speedup == pytest.approx(1.0, rel=0.02) == cross


def test_in_process_figure_needs_pairs():
    with pytest.raises(ValueError, match="as many R as C"):
        in_process_figure([1.0], [1.0, 1.0])
