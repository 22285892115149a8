"""Verdict time, drift and role bias with and without the resident timed engine (`[engine]
resident`, issue 30 item 4; docs/arena.md "Resident timed engine"): one sequence of contributions
qualified in one process, once with one engine per verdict (one-shot), once with one engine
across them (resident). Each row: wall time, verdict, C/B, B′/B drift, role bias (the
stock-as-candidate control), and the resident engine's start and post-condition steps.

Items of --sequence: a bundle dir (relative to the repo or absolute), or a control:
  role-bias         stock kernel in the C route (C/B − 1 is the role bias; never a crown)
  slowdown:US       C runs stock + US µs per call: a clear loser (with --sequential: how soon it ends)
  handicap:US       B/B′ run stock + US µs per call: a known gain through the whole PASS path
                    (teacher, fresh confirmation engine): a crowning verdict's time

CPU (the fake engine of tests/arena and the tests' small config):
    .venv/bin/python scripts/resident_timed_bench.py --fake --sequence examples/demo/cpu_rmsnorm --repeat 6
H200: the commands are in docs/benchmarks.md, "Next lease".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from cacheon_subnet.env import ARENA_HOME, JIT_SEEDS  # noqa: E402


def item(name: str) -> tuple[Any, Any, dict[str, Any]]:
    """(bundle, op, RunOptions fields) of one sequence item."""
    from arena.run import stock_control_op
    from cacheon_subnet.bundle import load_bundle

    kind, _, us = name.partition(":")
    if kind == "role-bias":
        return None, stock_control_op("norm.rmsnorm"), {"control": "stock-as-candidate"}
    if kind in ("slowdown", "handicap"):
        return None, stock_control_op("norm.rmsnorm"), {"control": kind, "handicap_us": float(us or 500)}
    path = Path(name)
    b = load_bundle(path if path.is_absolute() else REPO / path)
    return b, b.manifest.ops[0], {}


def row(r: dict[str, Any], wall: float) -> dict[str, Any]:
    speed = r.get("speed") or {}
    post = r.get("resident_engine") or {}
    st = r.get("stages", {}).get("resident", {})
    return {
        "wall_s": round(wall, 2),
        "verdict": r["verdict"],
        "ratio": speed.get("ratio"),
        "run_drift": speed.get("run_drift"),
        "role_bias": r.get("role_bias"),
        "stages_s": {k: v.get("wall_s") for k, v in r.get("stages", {}).items()},
        "reference_s": st.get("host_timing", {}).get("reference_s"),
        "reused": post.get("reused"),
        "post_ok": post.get("ok"),
        "post_s": (post.get("detail") or {}).get("seconds"),
        "reason": str(r.get("reason"))[:160],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs/arena/dense.toml"))
    ap.add_argument("--sequence", default="examples/norm.rmsnorm", help="comma-separated items (see above)")
    ap.add_argument("--repeat", type=int, default=1, help="the sequence this many times")
    ap.add_argument("--modes", default="one-shot,resident")
    ap.add_argument("--sequential", action="store_true", help="[sequential] enabled (a loser stops at min_cycles)")
    ap.add_argument("--teacher-resident", action="store_true", help="[teacher] resident (T beside the timed engine)")
    ap.add_argument("--grade-always", action="store_true")
    ap.add_argument("--fake", action="store_true", help="CPU: the fake engine and the tests' small config")
    ap.add_argument(
        "--fake-engine",
        default="FakeEngine",
        help="CPU: a class of tests/arena/fake_engine.py "
        "(SlowStockEngine: a candidate really faster, so a crowning verdict)",
    )
    ap.add_argument("--max-noise", type=float, default=None, help="[speed] max_noise (the CPU box is noisy)")
    ap.add_argument("--out", default=None, help="write every row as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (each verdict's result.json and records)")
    a = ap.parse_args()
    from arena.config import load_config
    from arena.engine.resident import TeacherPool
    from arena.engine.resident_timed import TimedPool
    from arena.run import RunOptions, qualify

    work = Path(tempfile.mkdtemp(prefix="cacheon-resident-bench-", dir="/var/tmp"))
    work.chmod(0o755)
    factory = None
    if a.fake:
        sys.path.insert(0, str(REPO / "tests" / "arena"))
        import arena_harness as h

        os.environ["PYTHONPATH"] = str(h.seam_harness.write_runtime(work / "fake-sglang"))
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault(JIT_SEEDS.name, "off")
        os.environ.setdefault(ARENA_HOME.name, str(work / "home"))  # engine homes go with the work dir
        cfg, factory = h.small_config(prompts=6, output=6, cycles=3), f"tests.arena.fake_engine:{a.fake_engine}"
    else:
        cfg = load_config(a.config)
    if a.max_noise is not None:
        cfg = replace(cfg, speed=replace(cfg.speed, max_noise=a.max_noise))
    if a.sequential:
        cfg = replace(cfg, sequential=replace(cfg.sequential, enabled=True))
    if a.teacher_resident:
        cfg = replace(cfg, teacher=replace(cfg.teacher, resident=True))
    items = [item(n) for n in a.sequence.split(",")] * a.repeat
    out: dict[str, Any] = {"config": "fake small_config" if a.fake else a.config, "sequence": a.sequence, "repeat": a.repeat}
    for mode in a.modes.split(","):
        c = replace(cfg, engine=replace(cfg.engine, resident=mode == "resident"))
        rows = []
        with TimedPool() as pool, TeacherPool() as teachers:
            for i, (bundle, op, extra) in enumerate(items):
                opts = RunOptions(
                    workdir=work / f"{mode}-{i}",
                    checkpoint_root=work / "ckpt",
                    engine_factory=factory,
                    timed_engines=pool,
                    teachers=teachers,
                    grade_always=a.grade_always,
                    **extra,
                )
                t = time.monotonic()
                rows.append(row(qualify(c, bundle, op, opts), time.monotonic() - t))
                print(f"{mode} {i} " + json.dumps(rows[-1]), flush=True)
        walls = [x["wall_s"] for x in rows]
        out[mode] = {
            "rows": rows,
            "median_s": statistics.median(walls),
            "median_after_first_s": statistics.median(walls[1:] or walls),
        }
    print(json.dumps({m: {k: out[m][k] for k in ("median_s", "median_after_first_s")} for m in a.modes.split(",")}))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    if not a.keep:
        from cacheon_subnet.sandbox import remove_tree

        remove_tree(work)
    else:
        print(f"work dir kept: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
