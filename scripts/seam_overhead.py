"""Seam overhead in one resident engine: SGLang with every seam hook taken out ("pristine") vs
the seam installed with every call routed to stock ("stock": no candidate selected).

Why one engine: restarted engines drift by up to 10 % on the lent H200
(../shared/device/README.md), far more than the 0.5 % this figure must resolve. So the arena's
machinery times both inside one engine: B/B′ = pristine (every hooked binding put back to
SGLang's own function, graphs recaptured), C = stock route (hooks in, dispatch routes to stock,
graphs recaptured), B C C B′ cycles, medians. The engine arms every local seam adapter and the
stock-as-candidate control for norm.rmsnorm (so the scheduler is active and answers the route
RPC). Receipts must acknowledge every swap; a pristine swap must report restored bindings.

    source .devpack/dev_env.sh && python3 scripts/seam_overhead.py --out $OUT/overhead.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arena.config import load_config  # noqa: E402
from arena.engine.home import seed_caches  # noqa: E402
from arena.engine.host import EngineSpec, run_engine  # noqa: E402
from arena.jobs import checkpoint_job, engine_kwargs, resident_steps, window_tag  # noqa: E402
from arena.verdict.evidence import check  # noqa: E402
from arena.verdict.speed import judge  # noqa: E402
from cacheon_subnet.env import RECEIPT_DIR, SEAM_STRICT, STOCK_AS_CANDIDATE  # noqa: E402
from seams.receipts import read_receipts  # noqa: E402
from seams.table import local_bindings, seam_environment  # noqa: E402

CONTROL_SLOT = "norm.rmsnorm"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--metric",
        default="output_tokens_per_s",
        choices=("output_tokens_per_s", "total_tokens_per_s"),
        help="a wall clock: the seam's cost is host time (dispatch) as much as GPU time, and this "
        "engine runs without the forward clock",
    )
    ap.add_argument("--config", default=str(REPO / "configs/arena/dense.toml"))
    ap.add_argument("--bindings", default="local", help="'local' (every non-collective adapter) or a comma list")
    ap.add_argument("--work", default="/tmp/cacheon-seam-overhead")
    ap.add_argument("--checkpoints", default="/tmp/cacheon-checkpoints")
    ap.add_argument("--out", required=True)
    ap.add_argument("--engine-factory", default=None, help="tests only: a fake engine class module:attr")
    a = ap.parse_args(argv)
    cfg = load_config(a.config)
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    receipts_dir = work / "receipts"
    receipts_dir.mkdir(parents=True)
    bindings = local_bindings() if a.bindings == "local" else tuple(a.bindings.split(","))
    steps, windows = resident_steps(cfg, baseline="pristine", candidate="stock", quality=False)
    job = {
        "engine_kwargs": engine_kwargs(cfg),
        "engine_factory": a.engine_factory,
        "steps": steps,
        "checkpoint": None if a.engine_factory else checkpoint_job(cfg, Path(a.checkpoints)),
    }
    env = {
        **seed_caches(),
        **seam_environment(bindings),
        STOCK_AS_CANDIDATE.name: CONTROL_SLOT,
        SEAM_STRICT.name: "1",
        "SGLANG_PLUGINS": "cacheon",
        RECEIPT_DIR.name: str(receipts_dir),
    }
    t0 = time.monotonic()
    run = run_engine(
        EngineSpec(
            "overhead",
            job,
            env,
            timeout_s=cfg.limits.total_timeout_s,
            start_timeout_s=cfg.limits.engine_start_timeout_s,
            ranks=tuple(range(cfg.engine.tp_size)),
        ),  # route RPCs carry host nonces
        work,
        cfg.limits.gpu_free_timeout_s,
    )
    receipts = read_receipts(receipts_dir)
    swaps = [(s["epoch"], s["route"]) for s in steps if s["op"] == "route"]
    ev = check(receipts, CONTROL_SLOT, range(cfg.engine.tp_size), swaps, graphs_on=cfg.engine.cuda_graph)
    acks = [x for r in receipts for x in r.get("routes", [])]
    unrestored = [x["epoch"] for x in acks if x.get("route") == "pristine" and not x.get("hooks_restored", 0) > 0]
    samples = []
    for w in windows:
        try:
            samples.append((w, float(run.step(window_tag(w))[a.metric])))
        except KeyError:
            continue
    problems = list(ev.problems) + [f"pristine swap {e} restored no binding" for e in unrestored]
    if run.error:
        problems.insert(0, f"engine: {run.error}")
    speed = judge(samples, cfg.speed) if samples and not run.error else None
    out = {
        "arena_id": cfg.arena_id,
        "config": a.config,
        "bindings": list(bindings),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - t0, 1),
        "start_s": next((r["s"] for r in run.records if r.get("op") == "started"), None),
        "swap_s": [round(r["s"], 2) for r in run.records if r.get("op") == "route"],
        "hooks_restored": [x.get("hooks_restored") for x in acks],
        "problems": problems,
        "metric": a.metric,
        # C/B: seam installed (every call routed to stock) over pristine SGLang
        "seam_over_pristine": speed.ratio if speed else None,
        "drift": speed.run_drift if speed else None,
        "speed": speed.to_json() if speed else None,
        "windows": [{"index": w.index, "cycle": w.cycle, "role": w.role, "route": w.route, "value": v} for w, v in samples],
    }
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: out[k] for k in ("seam_over_pristine", "drift", "wall_s", "start_s", "problems")}, default=str))
    return 0 if speed and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
