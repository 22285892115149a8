"""Timing as the arena replays decode: each side captured in a CUDA graph, replays interleaved in
alternating order with the L2 flushed before each (bench_timing._Timer), medians per side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def graphed(fn: Callable[[], None]) -> tuple[Callable[[], None], Any]:
    """fn captured in a CUDA graph (warmed on a side stream first), as the arena replays decode."""
    from cacheon_subnet.bench_timing import capture_graph

    fn()  # one more warm call than capture_graph's own: autotuned launches settle first
    replay = capture_graph(fn)
    return replay, replay.__self__


def time_sides(sides: dict[str, Callable[[], None]], reps: int, timer: Any) -> dict[str, dict[str, float]]:
    """Alternating order (every side takes every position equally often), the L2 flushed before each
    replay (bench_timing._Timer), one sample per side per round; medians with a robust stderr."""
    from cacheon_subnet.bench_timing import _stats

    for fn in sides.values():
        fn()
    names = list(sides)
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(reps):
        k = r % len(names)
        toks = [(n, timer.time_once(sides[n])) for n in names[k:] + names[:k]]
        for n, tok in toks:
            samples[n].append(timer.read(tok))
    return {k: _stats(v) for k, v in samples.items()}
