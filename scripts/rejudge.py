"""Re-judge recorded arena windows with the current `arena.verdict.speed.judge`: the verdict's pooled
ratio, the reported paired and per-cycle statistics and the drift, per run and per clock.

Why: statistics change between sessions; the recorded windows (docs/results/) let every new
estimator be read on old runs first (a post-hoc reading, never a validation).

    python3 scripts/rejudge.py docs/results/2026-11-29/h200-dense1024-*.json [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arena.config_sections import SPEED_METRICS, SpeedSection  # noqa: E402
from arena.verdict.speed import Window, judge_each  # noqa: E402


def runs(doc: dict[str, Any]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(name, windows) for a scripts/arena_benchmarks.py summary or a single result.json."""
    if "runs" in doc:
        for r in doc["runs"]:
            yield r.get("run", "?"), r.get("windows") or []
    elif "windows" in doc:
        yield doc.get("control") or doc.get("op", "result"), doc["windows"]


def rejudge(windows: list[dict[str, Any]], policy: SpeedSection) -> dict[str, dict[str, float]]:
    rows = [(Window(w["index"], w["cycle"], w["role"], w.get("route", "")), w) for w in windows]
    metrics = [m for m in SPEED_METRICS if m != "total_tokens_per_s"]  # ranks like output tok/s
    return {
        m: {
            "pooled": v.ratio - 1,
            "paired": v.paired_ratio - 1,
            "paired_se": v.paired_se,
            "cycle": v.cycle_ratio - 1,
            "drift": v.run_drift,
            "noise": v.noise,
            "verdict": v.verdict,
        }
        for m, v in judge_each(rows, metrics, policy).items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--config", default=None, help="judge with this arena config's [speed] policy (default: the SpeedSection defaults)"
    )
    a = ap.parse_args(argv)
    policy = SpeedSection()
    if a.config:
        from arena.config import ArenaConfigError, load_config

        try:
            policy = load_config(a.config).speed
        except ArenaConfigError as e:
            print(e, file=sys.stderr)
            return 2
    rows = []
    for f in a.results:
        try:
            doc = json.loads(Path(f).read_text())
        except (OSError, ValueError) as e:
            print(f"{f}: cannot read a result JSON ({e})", file=sys.stderr)
            return 2
        for name, windows in runs(doc):
            rows.append({"file": Path(f).name, "run": name, "by_metric": rejudge(windows, policy)})
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        for m, v in r["by_metric"].items():
            print(
                f"{r['file'][:48]:48} {r['run'][:12]:12} {m[:24]:24} pooled {v['pooled']:+.2%}  paired {v['paired']:+.2%}"
                f" (s.e. {v['paired_se']:.2%})  per-cycle {v['cycle']:+.2%}  drift {v['drift']:+.2%}  {v['verdict']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
