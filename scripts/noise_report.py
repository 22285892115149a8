"""Join timed arena windows with box_monitor samples: per window throughput next to the GPU's
SM clock, utilisation, power and the host's CPU busy/steal, and a split of slow vs normal windows.

    python3 scripts/noise_report.py ab.json monitor.jsonl [--window-s 0.9]

A window spans [at, at + its duration]; the duration is the output tokens over the throughput
when the config is known (--tokens), else --window-s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

KEYS = ("clocks.sm", "utilization.gpu", "power.draw", "busy", "steal")


def per_window(
    windows: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    tokens: int | None,
    window_s: float,
    metric: str = "output_tokens_per_s",
) -> list[dict[str, Any]]:
    rows = []
    for w in windows:
        if w.get("at") is None or w.get(metric) is None:
            continue
        dur = tokens / w[metric] if tokens else window_s
        inside = [s for s in samples if w["at"] <= s["t"] <= w["at"] + dur]
        row = {"index": w["index"], "role": w["role"], "tps": w[metric], "n": len(inside)}
        for k in KEYS:
            vals = [s[k] for s in inside if isinstance(s.get(k), (int, float))]
            row[k] = statistics.fmean(vals) if vals else None
        reasons = sorted({s["reasons"] for s in inside if s.get("reasons") not in (None, "0x0000000000000000")})
        row["reasons"] = reasons
        rows.append(row)
    return rows


def split(rows: list[dict[str, Any]], slow: float = 0.95) -> dict[str, Any]:
    """Windows below `slow` × the 90th percentile are 'slow'; compare their means to the rest."""
    if not rows:
        return {}
    tps = sorted(r["tps"] for r in rows)
    ref = tps[int(0.9 * (len(tps) - 1))]
    out: dict[str, Any] = {"ref_tps": ref}
    for name, group in (
        ("slow", [r for r in rows if r["tps"] < slow * ref]),
        ("normal", [r for r in rows if r["tps"] >= slow * ref]),
    ):
        out[name] = {"windows": len(group)}
        for k in KEYS:
            vals = [r[k] for r in group if r[k] is not None]
            out[name][k] = round(statistics.fmean(vals), 4) if vals else None
        out[name]["reasons"] = sorted({x for r in group for x in r["reasons"]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("monitor")
    ap.add_argument("--tokens", type=int, default=None, help="output tokens per window (prompts × output_len)")
    ap.add_argument("--window-s", type=float, default=0.9)
    a = ap.parse_args(argv)
    data = json.load(open(a.results))
    samples = [json.loads(line) for line in open(a.monitor) if line.strip()]
    for run in data.get("runs", [data]):
        rows = per_window(run.get("windows") or [], samples, a.tokens, a.window_s)
        print(json.dumps({"run": run.get("run"), "split": split(rows)}))
        for r in rows:
            print("  " + " ".join(f"{k}={(round(v, 3) if isinstance(v, float) else v)}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
