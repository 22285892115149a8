#!/usr/bin/env python3
"""How much host work `cacheon verify --device cuda --arena CONFIG` plans for one slot: calls, input
draws and the bytes of inputs the host draws (on host threads ahead of the trials since session 13,
each set sent to the worker as a sealed memfd: verify/draws.py, verify/shm.py). A count over the
planned trials, no GPU needed; a graph trial counts 1 + the mean replay count. Recorded in
docs/benchmarks.md (session 10: attention.decode before/after the heavy-case rule). The exact
plan of one seed, trial by trial: scripts/verify_coverage.py.

    python scripts/verify_plan_cost.py --slot attention.decode --config configs/arena/dense.toml [--seeds 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def plan_cost(slot: str, config: str, seeds: int, heavy_limit: int | None = None) -> dict[str, float]:
    from arena.config import load_config
    from cacheon_subnet.slots import get_slot
    from cacheon_subnet.slots.spec import dtype_of
    from cacheon_subnet.verify import shapes
    from cacheon_subnet.verify.runner import VerifyOptions, trial_plan
    from cacheon_subnet.verify.trials import Budget

    spec, arena = get_slot(slot), shapes.from_arena_config(load_config(config))
    saved = shapes.GPU_HEAVY_CASE_BYTES
    if heavy_limit is not None:
        shapes.GPU_HEAVY_CASE_BYTES = heavy_limit
    replays = 1.5 * VerifyOptions().graph_replays  # randint(r, 2r): its mean
    calls, draws, gbs = [], [], []
    try:
        for seed in range(seeds):
            rng = random.Random(f"{seed}:{slot}/default")
            planned = shapes.plan_cases(spec, spec.cases("gpu"), spec.dtypes, rng, gpu=True, arena=arena)
            plan = trial_plan(planned, rng, Budget.for_device("cuda"), graphs=True, compile_check=True)
            c = d = b = 0.0
            paired: set[tuple[int, str]] = set()
            for t in plan:
                size = shapes.input_bytes(spec, planned[t.case].case, dtype_of(t.dtype)) / 1e9
                n = 1.0 + replays if t.kind == "graph" else 1.0
                if t.kind == "pair":  # both calls of a pair share one draw
                    n = 0.0 if (t.case, t.dtype) in paired else 1.0
                    paired.add((t.case, t.dtype))
                c += 1.0 + replays if t.kind == "graph" else 1.0
                d += n
                b += n * size
            calls.append(c)
            draws.append(d)
            gbs.append(b)
    finally:
        shapes.GPU_HEAVY_CASE_BYTES = saved
    return {"calls": statistics.median(calls), "draws": statistics.median(draws), "input_gb": statistics.median(gbs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slot", default="attention.decode")
    ap.add_argument("--config", default=str(REPO / "configs" / "arena" / "dense.toml"))
    ap.add_argument("--seeds", type=int, default=20)
    a = ap.parse_args(argv)
    for name, limit in (("every case light (the rule off)", 1 << 62), ("GPU_HEAVY_CASE_BYTES", None)):
        r = plan_cost(a.slot, a.config, a.seeds, limit)
        print(
            f"{a.slot} {name}: calls {r['calls']:.0f}, input draws {r['draws']:.0f}, "
            f"input bytes drawn on the host {r['input_gb']:.1f} GB (median of {a.seeds} seeds)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
