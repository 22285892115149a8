"""One timed stage as an SVG scatter: each window's throughput (B, C, B′; warm-up grey), the
baseline level median(B ∪ B′), its noise band level·(1 ± noise) and the bar level·bar a PASS
needs C to reach (arena/verdict/speed.py judges median(C)/median(B ∪ B′) against that bar).

`geometry` turns a stage (stages.stages_of) into plain shapes; page.py draws them through an
autoescaping template, so nothing here builds markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cacheon_subnet.records import Role

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 14, 30
COLORS = {Role.WARMUP: "#9e9e9e", Role.B: "#1f77b4", Role.C: "#e4572e", Role.B_PRIME: "#2ca02c"}
LABELS = {
    Role.WARMUP: "warm-up",
    Role.B: "B (baseline before)",
    Role.C: "C (candidate)",
    Role.B_PRIME: "B′ (baseline after)",
}


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    color: str
    title: str


@dataclass(frozen=True)
class HLine:
    y: float
    color: str
    dash: str
    label: str
    anchor: str  # where the label sits: "start" (left) or "end" (right), so close lines do not overlap


@dataclass(frozen=True)
class Geometry:
    width: int
    height: int
    points: tuple[Point, ...]
    lines: tuple[HLine, ...]
    band: tuple[float, float] | None  # (y_top, y_bottom) of the noise band
    ticks: tuple[tuple[float, str], ...]  # y axis
    legend: tuple[tuple[str, str], ...]
    plot_box: tuple[int, int, int, int]  # x0, y0, x1, y1


def _fmt(v: float) -> str:
    return f"{v / 1000:.1f}k" if abs(v) >= 10_000 else f"{v:.4g}"


def geometry(stage: dict[str, Any]) -> Geometry | None:
    """None when the stage has no window to draw."""
    windows = [w for w in stage.get("windows") or () if isinstance(w.get("value"), float)]
    if not windows:
        return None
    level, noise, bar = stage.get("baseline_median"), stage.get("noise"), stage.get("bar")
    ys = [w["value"] for w in windows]
    refs = []
    if level:
        refs.append(level)
        if noise is not None:
            refs += [level * (1 - noise), level * (1 + noise)]
        if bar is not None:
            refs.append(level * bar)
    lo, hi = min(ys + refs), max(ys + refs)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    n = max(len(windows) - 1, 1)

    def y_of(v: float) -> float:
        return round(y1 - (v - lo) / (hi - lo) * (y1 - y0), 2)

    points = tuple(
        Point(
            round(x0 + i / n * (x1 - x0), 2) if len(windows) > 1 else (x0 + x1) / 2,
            y_of(w["value"]),
            COLORS[w["role"]],
            f"window {w['index']} cycle {w['cycle']} {w['role']}: {w['value']:.6g}",
        )
        for i, w in enumerate(windows)
    )
    lines, band = [], None
    if level:
        lines.append(HLine(y_of(level), "#333333", "", f"median(B ∪ B′) {_fmt(level)}", "start"))
        if noise is not None:
            band = (y_of(level * (1 + noise)), y_of(level * (1 - noise)))
        if bar is not None:
            lines.append(HLine(y_of(level * bar), "#b00020", "6 4", f"bar ×{bar:.4f} = {_fmt(level * bar)}", "end"))
    ticks = tuple((y_of(lo + (hi - lo) * k / 4), _fmt(lo + (hi - lo) * k / 4)) for k in range(5))
    roles = [r for r in COLORS if any(w["role"] == r for w in windows)]
    legend = tuple((COLORS[r], LABELS[r]) for r in roles)
    if band is not None:
        legend += (("#f3c969", f"noise band ±{noise:.2%}"),)
    return Geometry(WIDTH, HEIGHT, points, tuple(lines), band, ticks, legend, (x0, y0, x1, y1))
