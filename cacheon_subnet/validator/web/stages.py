"""The timed stages a GPU verdict's plot shows, built from its BoardFigures: read by the page's
detail view (data.py) and, once a snapshot, by the validator to mark which rows have windows to
plot (snapshot.py), so a list page never decodes a row's figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from cacheon_subnet.records import ArenaWindow, BoardFigures, Role, SpeedBrief, SpeedMetric

ROLES = (Role.WARMUP, Role.B, Role.C, Role.B_PRIME)  # the roles a timed stage's plot shows
BASELINE = (Role.B, Role.B_PRIME)


def _windows(rows: Sequence[ArenaWindow], metric: SpeedMetric) -> list[dict[str, Any]]:
    out = []
    for w in rows:
        v = w.value(metric)
        if w.role in ROLES and v is not None and v > 0:
            out.append({"index": w.index, "cycle": w.cycle, "role": w.role.value, "value": v})
    return out


def stages_of(figures: BoardFigures) -> list[dict[str, Any]]:
    """The timed stages of a GPU verdict ("resident", "confirm"): each window's throughput on the
    judged metric, and the level, noise band and bar the verdict was judged against."""
    metric = figures.metric
    if metric is None:
        return []
    confirm = figures.confirm
    out = []
    stages: tuple[tuple[str, Sequence[ArenaWindow], SpeedBrief | None], ...] = (
        ("resident", figures.windows or (), figures.speed),
        ("confirm", confirm.windows if confirm else (), confirm.speed if confirm else None),
    )
    for name, rows, speed in stages:
        windows = _windows(rows, metric)
        if not any(w["role"] == Role.C for w in windows):
            continue
        base = [w["value"] for w in windows if w["role"] in BASELINE]
        out.append(
            {
                "name": name,
                "metric": metric.value,
                "windows": windows,
                "baseline_median": statistics.median(base) if base else None,
                "verdict": speed.verdict.value if speed else None,
                "ratio": speed.ratio if speed else None,
                "noise": speed.noise if speed else None,
                "bar": speed.bar if speed else None,
                "reason": speed.reason if speed else None,
            }
        )
    return out
