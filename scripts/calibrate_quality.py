"""Derive `[quality.policy]` from the stock-vs-stock spread recorded in arena results.

    python scripts/calibrate_quality.py RESULT.json [RESULT.json ...] [--k 3] [--json]

Each graded result holds `quality.metrics.stock_spread` (the sample's B-window half against its
B′-window half, arena/calibrate.py). Prints the derived policy as a TOML block to paste into the
arena config, and the spread it rests on. Run it over repeated runs of one arena (the faithful
controls and the handicap control on the H200); the method is in docs/arena.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from arena.calibrate import derive_policy, policy_toml, spreads_from_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--k", type=float, default=3.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    spreads = spreads_from_results(args.results)
    try:
        policy, report = derive_policy(spreads, k=args.k)
    except ValueError as e:
        print(f"calibrate_quality: {e} (from {len(args.results)} result file(s))", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1) if args.json else f"# {report['runs']} stock spreads, k={args.k}\n"
          + policy_toml(policy))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
