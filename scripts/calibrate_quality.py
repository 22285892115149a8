"""Derive `[quality.policy]` from the stock-vs-stock spread recorded in arena results.

    python scripts/calibrate_quality.py RESULT.json [RESULT.json ...] [--k 3] [--json]
        [--regrade]   each result's recorded C-vs-B metrics judged again under the derived policy
        [--loo]       leave-one-out: each stock spread graded under the policy of the others
        [--include-untrusted]  also take spreads from runs of bundles not shipped under examples/

Only runs of the shipped examples and controls (and the arena's own stock controls) set limits by
default: a contribution's run shares its engine with the B windows its spread comes from, so a
miner could widen it and loosen every later verdict (tests/adversarial/test_calibration_poisoning.py).

Each graded result holds `quality.metrics.stock_spread` (the sample's B-window half against its
B′-window half, arena/verdict/calibrate.py). Prints the derived policy as a TOML block to paste into the
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
    from arena.verdict.calibrate import (
        derive_policy,
        leave_one_out,
        policy_toml,
        regrade,
        shipped_digests,
        spreads_from_results,
        trusted,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--k", type=float, default=3.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--regrade", action="store_true", help="judge each result's C-vs-B metrics under the derived policy")
    ap.add_argument("--loo", action="store_true", help="leave-one-out false-reject reading over the stock spreads")
    ap.add_argument(
        "--include-untrusted",
        action="store_true",
        help="take stock spreads from runs of any bundle (default: shipped examples and controls only)",
    )
    args = ap.parse_args(argv)
    digests = None if args.include_untrusted else shipped_digests(Path(__file__).resolve().parents[1] / "examples")
    if digests is not None:
        for path in args.results:
            if not trusted(json.loads(Path(path).read_text()), digests):
                print(
                    f"calibrate_quality: {path}: not a run of a shipped example or control; its stock spread "
                    "is left out (--include-untrusted takes it)",
                    file=sys.stderr,
                )
    spreads = spreads_from_results(args.results, digests)
    try:
        policy, report = derive_policy(spreads, k=args.k)
    except ValueError as e:
        print(f"calibrate_quality: {e} (from {len(args.results)} result file(s))", file=sys.stderr)
        return 2
    print(
        json.dumps(report, indent=1)
        if args.json
        else f"# {report['runs']} stock spreads, k={args.k}\n" + policy_toml(policy)
    )
    if args.regrade:
        for path in args.results:
            for stage, verdict, reasons in regrade(json.loads(Path(path).read_text()), policy):
                print(f"{Path(path).name} {stage}: {verdict} {'; '.join(reasons[:3])}")
    if args.loo:
        try:
            rows = leave_one_out(spreads, k=args.k)
        except ValueError as e:
            print(f"calibrate_quality: {e}", file=sys.stderr)
            return 2
        bad = [r for r in rows if r["verdict"] != "PASS"]
        print(f"leave-one-out: {len(bad)} of {len(rows)} stock-vs-stock comparisons rejected")
        for r in bad:
            print(f"  held out {r['held_out']} {r['direction']}: {r['verdict']} {'; '.join(r['reasons'][:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
