#!/usr/bin/env python3
"""What `cacheon verify` checks for one bundle + arena + seed, as JSON: per op, its cases (label,
dims, origin, heavy, dtypes), its trials by kind per (case, dtype), the calls a PASS makes (a graph
trial: its capture and every replay) and the bytes of inputs it draws. A plan, not a run: no
worker, no GPU. Any change to verify's machinery must leave this unchanged for a fixed seed
(tests/verify/test_verify_coverage.py holds the numbers of session 13, from main c7cdecf).

    python scripts/verify_coverage.py examples/attention.decode --arena configs/arena/dense.toml --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def coverage(bundle_dir: str, arena_config: str | None, seed: int, device: str = "cuda") -> dict[str, Any]:
    """The coverage of verify's plan for every single-rank op of the bundle (see module doc)."""
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.slots import get_slot
    from cacheon_subnet.slots.spec import dtype_of
    from cacheon_subnet.verify import shapes
    from cacheon_subnet.verify.runner import VerifyOptions, op_plan

    arena = None
    if arena_config:
        from arena.config import load_config

        arena = shapes.from_arena_config(load_config(arena_config))
    bundle = load_bundle(bundle_dir)
    opts = VerifyOptions(device=device, seed=seed, arena=arena)
    ops = []
    for op in bundle.manifest.ops:
        spec = get_slot(op.slot)
        if spec.collective:
            continue  # multirank.py runs them with its own gates
        plan = op_plan(spec, op, opts, seed)
        by_case: dict[tuple[int, str], dict[str, Any]] = {}
        for n, t in enumerate(plan.trials):
            row = by_case.setdefault((t.case, t.dtype), {"trials": Counter(), "calls": 0, "graph_replays": []})
            row["trials"][t.kind] += 1
            row["calls"] += plan.calls(n)
            if t.kind == "graph":
                row["graph_replays"].append(plan.replays[n])
        cases = [
            {
                "label": p.case.label,
                "dims": dict(p.case.dims),
                "params": dict(p.case.params),
                "origin": p.origin,
                "kind": p.kind,
                "heavy": p.heavy,
                "dtypes": list(p.dtypes),
                "input_bytes": {d: shapes.input_bytes(spec, p.case, dtype_of(d)) for d in p.dtypes},
            }
            for p in plan.planned
        ]
        rows = [
            {
                "case": plan.planned[i].case.label,
                "dtype": d,
                "trials": dict(sorted(r["trials"].items())),
                "calls": r["calls"],
                "graph_replays": r["graph_replays"],
            }
            for (i, d), r in sorted(by_case.items())
        ]
        ops.append(
            {
                "op": op.key,
                "slot": op.slot,
                "cases": cases,
                "by_case": rows,
                "trials": dict(sorted(Counter(t.kind for t in plan.trials).items())),
                "calls": sum(plan.calls(n) for n in range(len(plan.trials))),
            }
        )
    return {
        "bundle": bundle_dir,
        "arena": arena.name if arena else None,
        "seed": seed,
        "device": device,
        "tier": opts.resolved_tier,
        "ops": ops,
        "totals": {
            "ops": len(ops),
            "cases": sum(len(o["cases"]) for o in ops),
            "case_dtypes": sum(len(o["by_case"]) for o in ops),
            "trials": sum(sum(o["trials"].values()) for o in ops),
            "calls": sum(o["calls"] for o in ops),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle")
    ap.add_argument("--arena", help="configs/arena/<name>.toml (as `cacheon verify --arena`)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda", help="the plan of this device's tier (no device is used)")
    ap.add_argument("--summary", action="store_true", help="totals and per-op trial counts only")
    a = ap.parse_args(argv)
    cov = coverage(a.bundle, a.arena, a.seed, a.device)
    if a.summary:
        cov = {
            **{k: v for k, v in cov.items() if k != "ops"},
            "ops": [{k: o[k] for k in ("op", "trials", "calls")} | {"cases": len(o["cases"])} for o in cov["ops"]],
        }
    print(json.dumps(cov, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
