"""Window schedule and the speed verdict.

Schedule: warm-up windows (stock, excluded), then `cycles` cycles of B, C, C, B′ inside one
resident engine. ABBA order cancels linear drift within a cycle and puts stock both before and
after the candidate, so B vs B′ measures the drift the candidate is judged against.

Statistics are medians over windows (judge()), because single windows dip 10–40 % on a lent
H200: ratio = median(C) / median(B ∪ B′), noise = max(|median(B′)/median(B) − 1|, the ratio's
standard error from the windows' MADs), bar = 1 + max(margin, k · noise).
PASS: ratio ≥ bar. NO_DECISION: noise above max_noise (the box cannot decide) unless clearly slower,
or a ratio at or over 1 + margin but under this run's noise-raised bar (a gain over the margin
that this run's noise band cannot confirm: re-measured, because a speed FAIL is final and honest
validators near the bar split on it). FAIL: under 1 + margin. PASS, FAIL and NO_DECISION stay
distinct all the way to the result JSON.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from arena.config_sections import SpeedSection

ROLES = ("B", "C", "B'")
# the reason of a NO_DECISION in the band [1 + margin, noise-raised bar)
UNCONFIRMED = "a gain over the margin that this run's noise band cannot confirm: re-measured"
CYCLE = ("B", "C", "C", "B'")


@dataclass(frozen=True)
class Window:
    index: int
    cycle: int  # -1 for warm-up
    role: str  # warmup | B | C | B'
    route: str = "stock"  # what the engine runs: "candidate" in C, the baseline route elsewhere


def plan(
    cycles: int, warmup: int, baseline: str = "stock", per_role: int = 1, candidate: str = "candidate"
) -> tuple[Window, ...]:
    """baseline: "stock", or "incumbent" when B and B′ run the crowned kernel (head-to-head).
    per_role: each role of the B C C B′ cycle gets that many consecutive windows.
    candidate: the route C runs (the seam-overhead benchmark puts "stock" there)."""
    out = [Window(i, -1, "warmup", baseline) for i in range(warmup)]
    for c in range(cycles):
        for role in CYCLE:
            for _ in range(per_role):
                out.append(Window(len(out), c, role, candidate if role == "C" else baseline))
    return tuple(out)


def swaps(windows: Sequence[Window], start_route: str) -> int:
    """How many route swaps (graph recaptures) a plan costs."""
    n, route = 0, start_route
    for w in windows:
        if w.route != route:
            n, route = n + 1, w.route
    return n


@dataclass(frozen=True)
class SpeedVerdict:
    verdict: str  # PASS | FAIL | NO_DECISION
    ratio: float  # median C / mean(B, B′) over cycles
    ratios: tuple[float, ...]
    drift: tuple[float, ...]  # per cycle B′/B − 1
    noise: float
    bar: float
    reason: str
    run_drift: float = float("nan")  # median(B′) / median(B) − 1 over every window of the run
    # reported, not judged: the median over cycles of per-cycle medians (a variance-neutral
    # alternative the H200 re-analysis favoured; to be validated on fresh runs)
    cycle_ratio: float = float("nan")
    cycle_drift: float = float("nan")
    # reported, not judged: each C window against its mirror-image baseline window across the
    # nearest swap (C₁↔B, C₂↔B′ with one window per role), median of the log ratios. Box phases
    # longer than a pair cancel inside it (H200 re-analysis, session 4; to be validated)
    paired_ratio: float = float("nan")
    paired_se: float = float("nan")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _mad(xs: Sequence[float]) -> float:
    m = statistics.median(xs)
    return statistics.median(abs(x - m) for x in xs)


def _rel_se_median(xs: Sequence[float]) -> float:
    """Relative standard error of a median from the MAD (normal-consistent; robust to dips)."""
    return 1.2533 * 1.4826 * _mad(xs) / statistics.median(xs) / len(xs) ** 0.5


def paired(by_cycle: dict[int, dict[str, list[float]]], cycles: Sequence[int]) -> tuple[float, float]:
    """(ratio, relative s.e.): median over C windows of C / its mirror baseline window. Within a
    cycle B×n C×2n B′×n, C[j] mirrors B[n−1−j] and C[2n−1−j] mirrors B′[j]: each pair sits
    around one swap at the same distance, so both positions after a swap are used alike."""
    logs = []
    for c in cycles:
        b, cc, bp = by_cycle[c]["B"], by_cycle[c]["C"], by_cycle[c]["B'"]
        n = len(b)
        if len(bp) != n or len(cc) != 2 * n:
            continue  # a window is missing: no mirror to pair with
        logs += [math.log(cc[j] / b[n - 1 - j]) for j in range(n)]
        logs += [math.log(cc[2 * n - 1 - j] / bp[j]) for j in range(n)]
    if len(logs) < 2:
        return float("nan"), float("nan")
    m = statistics.median(logs)
    mad = statistics.median(abs(x - m) for x in logs)
    return math.exp(m), 1.2533 * 1.4826 * mad / len(logs) ** 0.5


def judge(samples: Sequence[tuple[Window, float]], policy: SpeedSection) -> SpeedVerdict:
    """samples: (window, throughput) for every measured window (warm-up is ignored).

    ratio = median(C) / median(B ∪ B′); drift = median(B′) / median(B) − 1; noise = max(|drift|,
    the ratio's standard error from the windows' MADs). Medians, because single windows dip by
    10–40 % on a lent H200 (measured 2026-11-29: 4 of 24 windows)."""
    by_cycle: dict[int, dict[str, list[float]]] = {}
    for w, value in samples:
        if w.role == "warmup":
            continue
        if not value > 0:
            raise ValueError(f"window {w.index} ({w.role}): throughput {value!r} is not positive")
        by_cycle.setdefault(w.cycle, {}).setdefault(w.role, []).append(value)
    complete = [c for c in sorted(by_cycle) if all(by_cycle[c].get(r) for r in ROLES)]
    per_cycle_drift = tuple(statistics.fmean(by_cycle[c]["B'"]) / statistics.fmean(by_cycle[c]["B"]) - 1 for c in complete)
    per_cycle_ratio = tuple(
        statistics.fmean(by_cycle[c]["C"]) / statistics.fmean(by_cycle[c]["B"] + by_cycle[c]["B'"]) for c in complete
    )
    if len(complete) < 2:
        return SpeedVerdict(
            "NO_DECISION",
            float("nan"),
            per_cycle_ratio,
            per_cycle_drift,
            float("nan"),
            float("nan"),
            f"only {len(complete)} complete B/C/B′ cycle(s); at least 2 are needed",
        )
    b = [v for c in complete for v in by_cycle[c]["B"]]
    bp = [v for c in complete for v in by_cycle[c]["B'"]]
    cc = [v for c in complete for v in by_cycle[c]["C"]]
    ratio = statistics.median(cc) / statistics.median(b + bp)
    drift = statistics.median(bp) / statistics.median(b) - 1
    alt = (
        statistics.median(
            statistics.median(by_cycle[c]["C"]) / statistics.median(by_cycle[c]["B"] + by_cycle[c]["B'"]) for c in complete
        ),
        statistics.median(statistics.median(by_cycle[c]["B'"]) / statistics.median(by_cycle[c]["B"]) - 1 for c in complete),
        *paired(by_cycle, complete),
    )
    se = (_rel_se_median(cc) ** 2 + _rel_se_median(b + bp) ** 2) ** 0.5
    noise = max(abs(drift), se)
    bar = 1 + max(policy.margin, policy.k_noise * noise)
    detail = f"C/B {ratio:.4f}, bar {bar:.4f} (B′/B drift {drift:+.2%}, ratio s.e. {se:.2%})"
    if noise > policy.max_noise and ratio * (1 + policy.k_noise * noise) >= 1.0:
        # too noisy to decide -- unless even the top of the band is slower than parity: that is a
        # decision (FAIL below the bar), as in settlement
        return SpeedVerdict(
            "NO_DECISION",
            ratio,
            per_cycle_ratio,
            per_cycle_drift,
            noise,
            bar,
            f"noise {noise:.2%} > max {policy.max_noise:.2%}: the box is too noisy to decide; {detail}",
            drift,
            *alt,
        )
    if ratio >= bar:
        return SpeedVerdict("PASS", ratio, per_cycle_ratio, per_cycle_drift, noise, bar, detail, drift, *alt)
    if ratio >= 1 + policy.margin:
        # over the margin, under a bar this run's own noise raised: the run can neither confirm the
        # gain nor rule it out, so it is measured again (a speed FAIL is final; the consensus
        # simulation showed validators splitting on exactly these: docs/benchmarks.md)
        return SpeedVerdict(
            "NO_DECISION",
            ratio,
            per_cycle_ratio,
            per_cycle_drift,
            noise,
            bar,
            f"{UNCONFIRMED}: C/B {ratio:.4f} is over 1 + margin {1 + policy.margin:.4f} but under "
            f"this run's noise-raised bar {bar:.4f} ({policy.k_noise:g} x noise {noise:.2%}); {detail}",
            drift,
            *alt,
        )
    return SpeedVerdict("FAIL", ratio, per_cycle_ratio, per_cycle_drift, noise, bar, detail, drift, *alt)


WALL_METRICS = ("output_tokens_per_s", "total_tokens_per_s")


def judge_each(
    rows: Sequence[tuple[Window, Mapping[str, Any]]], metrics: Sequence[str], policy: SpeedSection
) -> dict[str, SpeedVerdict]:
    """The same windows judged on every metric they carry (wall clock, forward clock)."""
    out = {}
    for m in metrics:
        got = [(w, float(rec[m])) for w, rec in rows if rec.get(m) is not None]
        if any(w.role == "C" for w, _ in got):
            out[m] = judge(got, policy)
    return out


# what a PASS on each clock must not lose elsewhere: every GPU clock answers to the wall clock;
# the decode-step clock sees only CUDA-graph replays, so the prefill (eager extend forwards) is
# held to the same floor. Each guard: (what it reads, what a loss there means).
GUARD_TEXT = {
    "output_tokens_per_s": ("the wall clock", "GPU time bought with host time"),
    "extend_gpu_tokens_per_s": ("the prefill clock", "decode time bought with prefill time"),
}
DECODE_GUARDS = ("output_tokens_per_s", "extend_gpu_tokens_per_s")


def _floor_guard(
    verdict: SpeedVerdict, samples: Sequence[tuple[Window, float]], metric: str, what: str, why: str, policy: SpeedSection
) -> SpeedVerdict:
    """C may not read slower than 1 − max(margin, k·noise) on the guard's clock; no guard
    windows (nan) is no crown."""
    g = judge(samples, policy)
    floor = 1 - max(policy.margin, policy.k_noise * g.noise) if g.noise == g.noise else float("nan")
    if not g.ratio >= floor:  # also catches nan
        return replace(
            verdict,
            verdict="FAIL",
            reason=f"{metric} PASS ({verdict.reason}) but {what} reads C/B {g.ratio:.4f} < "
            f"{floor:.4f} (1 − max(margin, k·noise {g.noise:.2%})): {why}",
        )
    return verdict


def wall_guard(
    verdict: SpeedVerdict, samples_wall: Sequence[tuple[Window, float]], metric: str, policy: SpeedSection
) -> SpeedVerdict:
    """A PASS on a GPU clock (forward spans, graph replays) must not be a loss on the wall clock:
    GPU clocks leave out host time, so a kernel that buys GPU time with host work (launch
    overhead, syncs) would otherwise be crowned while the real engine gets slower. The wall
    ratio may not fall below 1 − max(margin, k·wall noise); otherwise FAIL."""
    if verdict.verdict != "PASS" or metric in WALL_METRICS:
        return verdict
    return _floor_guard(verdict, samples_wall, metric, *GUARD_TEXT["output_tokens_per_s"], policy)


def guards_of(metric: str) -> tuple[str, ...]:
    if metric in WALL_METRICS:
        return ()
    return DECODE_GUARDS if metric == "decode_gpu_tokens_per_s" else ("output_tokens_per_s",)


def guard(
    verdict: SpeedVerdict, samples_by_metric: Mapping[str, Sequence[tuple[Window, float]]], metric: str, policy: SpeedSection
) -> SpeedVerdict:
    """The verdict after every guard of its clock (guards_of): a PASS that loses on the wall clock
    or, for the decode-step clock, in the prefill is a FAIL."""
    for g in guards_of(metric) if verdict.verdict == "PASS" else ():
        verdict = _floor_guard(verdict, samples_by_metric.get(g, ()), metric, *GUARD_TEXT[g], policy)
    return verdict
