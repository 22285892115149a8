#!/usr/bin/env python3
"""Where a verify plan's host work goes, on this machine: one timed draw of each (case, dtype) of
the plan (cProfile splits off the K/V pools' `slots.gen.randn`), its reference and the SHA-256
digests of its read-only inputs over 64 MiB, each times what the plan makes of it (draws: a pair's
one set, every twin, fresh, compile trial and graph capture and replay; references and digests:
every call). An estimate from one draw per (case, dtype), in one process on this thread, as the
trial loop drew them before session 13.

    python scripts/verify_draw_cost.py examples/attention.decode --arena configs/arena/dense.toml --seed 1
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle")
    ap.add_argument("--arena")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    from verify_coverage import coverage

    from cacheon_subnet.slots import get_slot
    from cacheon_subnet.slots.gen import seed_generator
    from cacheon_subnet.slots.spec import ShapeCase, dtype_of
    from cacheon_subnet.tensor_views import tensor_digest
    from cacheon_subnet.verify.judge import BIG_INPUT

    total = dict.fromkeys(("draws", "gb", "draw_s", "randn_s", "heavy_draw_s", "reference_s", "digest_s"), 0.0)
    for op in coverage(a.bundle, a.arena, a.seed)["ops"]:
        spec, cases = get_slot(op["slot"]), {c["label"]: c for c in op["cases"]}
        for row in op["by_case"]:
            c, k = cases[row["case"]], row["trials"]
            draws = (
                bool(k.get("pair"))
                + sum(k.get(x, 0) for x in ("twin", "fresh", "compile"))
                + sum(1 + r for r in row["graph_replays"])
            )
            case = ShapeCase(c["label"], c["label"].split("/")[0], c["dims"], c["params"])
            prof, t0 = cProfile.Profile(), time.perf_counter()
            prof.enable()
            made = spec.make_inputs(case, dtype_of(row["dtype"]), seed_generator(1))
            prof.disable()
            draw = time.perf_counter() - t0
            randn = sum(v[3] for f, v in pstats.Stats(prof).stats.items() if f[2] == "randn" and f[0].endswith("gen.py"))
            made = {n: t for n, t in made.items() if spec.arg(n).role in ("in", "inout")}
            t0 = time.perf_counter()
            spec.reference(made, case.params)
            ref = time.perf_counter() - t0
            t0 = time.perf_counter()
            for x in spec.by_role("in"):
                if made[x.name].numel() * made[x.name].element_size() > BIG_INPUT:
                    tensor_digest(made[x.name])
            dig = time.perf_counter() - t0
            gb = c["input_bytes"][row["dtype"]] / 1e9
            print(
                f"{row['case']:<36} {row['dtype']:<9} draws {draws:3d} x {gb:.3f} GB: draw {draw:.2f} s "
                f"(randn {randn:.2f}), reference {ref:.3f} s, digests {dig:.2f} s, calls {row['calls']}"
            )
            total["draws"] += draws
            total["gb"] += draws * gb
            total["draw_s"] += draws * draw
            total["randn_s"] += draws * randn
            total["heavy_draw_s"] += draws * draw if c["heavy"] else 0.0
            total["reference_s"] += row["calls"] * ref
            total["digest_s"] += 2 * row["calls"] * dig  # the worker's and the host's (before its cache)
            del made
    print("estimate for the whole plan:", {k: round(v, 1) for k, v in total.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
