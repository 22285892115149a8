"""The arena's H200 benchmarks and controls, one qualification after another, one JSON summary.

Runs (pick with --runs, in order):
  faithful     examples/norm.rmsnorm           -> quality PASS; full verdict time; B/B′ drift
  moe-faithful examples/moe.topk_softmax       -> MoE arena: the router slot fires in a real MoE engine, quality PASS
  wrong        examples/controls/wrong_math    -> quality FAIL
  role-bias    stock kernel in the C route     -> role bias (C/B − 1), never a crown
  handicap     B/B′ stock + a GPU spin, C stock -> a known speedup through the full PASS path
               (quality vs T, confirmation engine): the smallest gain the arena crowns, and its time
  never-fires  fp32-only copy of the example   -> FAIL on evidence, right after start-up
  ar-faithful  examples/collective.all_reduce  -> TP=2 arenas: receipts on both ranks, quality PASS
  ar-corrupt   controls/corrupt_one_rank       -> TP=2 arenas: FAIL (rank 1's sums are wrong)
  PATH         any bundle directory (a name with a "/", relative to the repo or absolute), e.g.
               examples/controls/subtle_skip_row: the quality calibration's controls (issue 15)
A name may repeat (e.g. role-bias,role-bias,role-bias: the drift over repeated runs).
--results DIR keeps each run's full result.json (quality metrics, stock spread, windows) there, as
it finishes, for scripts/calibrate_quality.py.

    source .devpack/dev_env.sh && python3 scripts/arena_benchmarks.py --runs faithful,wrong --out $OUT/arena.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arena.config import load_config  # noqa: E402
from arena.run import RunOptions, qualify, stock_control_op  # noqa: E402
from cacheon_subnet.bundle import load_bundle  # noqa: E402

QUALITY_KEYS = ("nll_mean", "nll_p99", "seq_nll_max", "greedy_agreement", "kl_mean", "kl_p99", "logprob_delta_p99")


def fp32_only(dst: Path) -> Path:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(REPO / "examples/norm.rmsnorm", dst)
    m = dst / "manifest.toml"
    m.write_text(m.read_text().replace('dtypes = ["bfloat16", "float16", "float32"]', 'dtypes = ["float32"]'))
    return dst


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs/arena/dense.toml"))
    ap.add_argument("--runs", default="faithful,wrong,role-bias,never-fires")
    ap.add_argument("--work", default="/tmp/cacheon-arena-bench")
    ap.add_argument("--checkpoints", default="/tmp/cacheon-checkpoints")
    ap.add_argument("--out", required=True)
    ap.add_argument("--slot", default="norm.rmsnorm", help="the slot the role-bias and handicap controls route")
    ap.add_argument(
        "--handicap-us",
        type=float,
        default=150.0,
        help="spin per baseline call (dense arena: one norm.rmsnorm call per forward; ~1 %% of a decode step, an estimate)",
    )
    ap.add_argument("--results", default=None, help="copy each run's result.json here as <i>-<name>.json")
    ap.add_argument("--engine-factory", default=None, help="tests only: a fake engine class module:attr")
    a = ap.parse_args()
    cfg = load_config(a.config)
    work = Path(a.work)
    out: dict = {
        "arena_id": cfg.arena_id,
        "config": a.config,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [],
    }
    for i, name in enumerate(a.runs.split(",")):
        path = Path(name) if "/" in name else None
        name = path.name if path else name
        opts = RunOptions(
            workdir=work / f"{i}-{name}",
            checkpoint_root=Path(a.checkpoints),
            engine_factory=a.engine_factory,
            grade_always=True,
        )  # the controls' quality is the point
        if path is not None:
            bundle = load_bundle(path if path.is_absolute() else REPO / path)
            op = bundle.manifest.ops[0]
        elif name in ("role-bias", "handicap"):
            from dataclasses import replace

            control = {
                "role-bias": {"control": "stock-as-candidate"},
                "handicap": {"control": "handicap", "handicap_us": a.handicap_us},
            }[name]
            bundle, op, opts = None, stock_control_op(a.slot), replace(opts, **control)
        else:
            src = {
                "faithful": REPO / "examples/norm.rmsnorm",
                "wrong": REPO / "examples/controls/wrong_math",
                "moe-faithful": REPO / "examples/moe.topk_softmax",
                "ar-faithful": REPO / "examples/collective.all_reduce",
                "ar-corrupt": REPO / "examples/controls/corrupt_one_rank",
                "never-fires": None,
            }[name] or fp32_only(work / "fp32_only")
            bundle = load_bundle(src)
            op = bundle.manifest.ops[0]
        r = qualify(cfg, bundle, op, opts)
        speed = r.get("speed") or {}
        row = {
            "run": name,
            "verdict": r["verdict"],
            "reason": r["reason"][:400],
            "wall_s": r.get("wall_s"),
            "ratio": speed.get("ratio"),
            "noise": speed.get("noise"),
            "bar": speed.get("bar"),
            "drift_cycles": speed.get("drift"),
            "drift": speed.get("run_drift"),
            "role_bias": r.get("role_bias"),
            "cycle_ratio": speed.get("cycle_ratio"),
            "cycle_drift": speed.get("cycle_drift"),
            "by_metric": r.get("speed_by_metric"),
            "confirm": (r.get("confirm") or {}).get("speed"),
            "quality": (r.get("quality") or {}).get("verdict"),
            "evidence_ok": (r.get("evidence") or {}).get("ok"),
            "stages": {
                k: {
                    "wall_s": v["wall_s"],
                    "start_s": next((x["s"] for x in v["startup"] if x["op"] == "started"), None),
                    "swap_s": [round(x["s"], 2) for x in v.get("routes", [])],
                }
                for k, v in r["stages"].items()
            },
            "windows": r.get("windows"),
        }
        qm = (r.get("quality") or {}).get("metrics") or {}
        row["quality_reasons"] = (r.get("quality") or {}).get("reasons")
        row["quality_metrics"] = {k: {m: qm[k].get(m) for m in QUALITY_KEYS} for k in ("b", "c") if k in qm}
        if a.results:
            Path(a.results).mkdir(parents=True, exist_ok=True)
            Path(a.results, f"{i}-{name}.json").write_text(json.dumps(r, indent=1, default=str))
        out["runs"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("windows", "stages", "by_metric")}), flush=True)
        Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    drifts = [abs(d) for row in out["runs"] for d in (row.get("drift_cycles") or [])]
    if drifts:
        out["median_abs_cycle_drift"] = statistics.median(drifts)
    runs = [abs(row["drift"]) for row in out["runs"] if isinstance(row.get("drift"), float) and row["drift"] == row["drift"]]
    if runs:
        out["median_abs_run_drift"] = statistics.median(runs)  # the figure: |B′/B − 1| per run
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
