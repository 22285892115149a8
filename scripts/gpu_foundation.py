"""Foundation checks on a CUDA box: verify every example (graphs + compile on) and the graph
controls, then bench every example against stock SGLang. One JSON file with everything.

    source .devpack/dev_env.sh && python3 scripts/gpu_foundation.py --steps verify,bench --out $OUT/foundation.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cacheon_subnet.bench import BenchOptions, bench_bundle  # noqa: E402
from cacheon_subnet.bundle import load_bundle  # noqa: E402
from cacheon_subnet.verify import VerifyOptions, verify_bundle  # noqa: E402

GRAPH_CONTROLS = {"graph_cheat": "graph_replay", "host_sync": "host_sync", "wrong_math": "mismatch"}


def examples(only: list[str]) -> list[Path]:
    out = sorted(p.parent for p in (REPO / "examples").glob("*/manifest.toml"))
    return [p for p in out if not only or p.name in only]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="verify,controls,bench")
    ap.add_argument("--only", default="", help="comma list of example names")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "foundation.json"))
    ap.add_argument("--budget", type=float, default=2.0)
    ap.add_argument("--max-cases", type=int, default=None)
    a = ap.parse_args()
    steps = a.steps.split(",")
    only = [x for x in a.only.split(",") if x]
    results: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verify": {},
        "controls": {},
        "bench": {},
    }
    summary = []

    def save() -> None:
        Path(a.out).write_text(json.dumps(results, indent=1, default=str))

    def run_verify() -> None:
        for ex in examples(only):
            t = time.time()
            r = verify_bundle(load_bundle(ex), VerifyOptions(device="cuda", call_timeout_s=300, import_timeout_s=300))
            results["verify"][ex.name] = r.to_json()
            summary.append(
                f"verify  {ex.name:28} {r.status:4} {time.time() - t:6.1f}s "
                + "; ".join(str(op.failure) for op in r.ops if op.failure)[:300]
            )
            print(summary[-1], flush=True)
            save()

    def run_controls() -> None:
        for name, expected in GRAPH_CONTROLS.items():
            r = verify_bundle(
                load_bundle(REPO / "examples" / "controls" / name),
                VerifyOptions(device="cuda", max_cases=2, call_timeout_s=120),
            )
            got = next((op.failure.reason for op in r.ops if op.failure), "")
            results["controls"][name] = {"expected": expected, "got": got, "report": r.to_json()}
            summary.append(f"control {name:28} expected {expected:14} got {got:14} {'OK' if got == expected else 'WRONG'}")
            print(summary[-1], flush=True)
            save()

    def run_bench() -> None:
        for ex in examples(only):
            r = bench_bundle(load_bundle(ex), BenchOptions(device="cuda", budget_s=a.budget, max_cases=a.max_cases))
            results["bench"][ex.name] = r.to_json()
            print(r.render(), flush=True)
            save()

    for step in steps:  # in the order given, so the most wanted step runs first
        {"verify": run_verify, "controls": run_controls, "bench": run_bench}[step]()
    print("\n".join(["== summary"] + summary))
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
