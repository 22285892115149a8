"""The seams issue's GPU proof, in one device call (engines run one after another):

  stock-1    no seam armed: greedy reference outputs + decode throughput
  nocand-1   seam armed, a candidate whose dtypes never match (bf16 engine, fp32-only op):
             every call routes to stock -> throughput vs stock
  faithful   examples/norm.rmsnorm: receipts active/fired/completed on every scheduler rank,
             greedy outputs vs stock
  wrong      examples/controls/wrong_math (skips the norm weight): receipts fire and the
             outputs diverge — caught, never a silent stock fallback
  raising    examples/controls/raises_in_call in strict mode: the engine must abort
  stock-2, nocand-2   the throughput pair again (ABAB: restarted engines drift)

CUDA graphs and piecewise graphs on, synthetic realistic checkpoint (configs/arena/dense.toml).

    source .devpack/dev_env.sh && python3 scripts/seam_proof.py --out $OUT/seam_proof.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arena.config import load_config  # noqa: E402
from arena.engine.home import seed_caches  # noqa: E402
from arena.engine.host import EngineSpec, run_engine  # noqa: E402
from arena.jobs import checkpoint_job, engine_kwargs, greedy_and_throughput_steps  # noqa: E402
from cacheon_subnet.bundle import load_bundle  # noqa: E402
from cacheon_subnet.bundle.engine_tree import build_tree  # noqa: E402
from cacheon_subnet.env import ENGINE_TREE, ENGINE_TREE_DIGEST, RECEIPT_DIR, SEAM_STRICT  # noqa: E402
from seams.receipts import coverage, read_receipts  # noqa: E402
from seams.table import seam_environment  # noqa: E402

SLOT = "norm.rmsnorm"


def fp32_only_copy(src: Path, dst: Path) -> Path:
    """The faithful example, declared fp32-only: armed but never eligible in a bf16 engine."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    m = dst / "manifest.toml"
    text = m.read_text()
    start = text.index("dtypes")
    end = text.index("\n", start)
    m.write_text(text[:start] + 'dtypes = ["float32"]' + text[end:])
    return dst


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(REPO / "configs/arena/dense.toml"))
    ap.add_argument("--work", default="/tmp/cacheon-seam-proof")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engine-factory", default=None, help="tests only: a fake engine class module:attr")
    ap.add_argument("--greedy-prompts", type=int, default=64, help="prompts of the greedy comparison step")
    ap.add_argument("--greedy-tokens", type=int, default=64, help="tokens each greedy prompt generates")
    ap.add_argument("--engines", default="stock-1,nocand-1,faithful,wrong,raising,stock-2,nocand-2")
    a = ap.parse_args()
    cfg = load_config(a.config)
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    greedy, tput = greedy_and_throughput_steps(cfg, a.greedy_prompts, a.greedy_tokens, a.reps)
    base = {
        "engine_kwargs": engine_kwargs(cfg),
        "engine_factory": a.engine_factory,
        "checkpoint": None if a.engine_factory else checkpoint_job(cfg, Path("/tmp/cacheon-checkpoints")),
    }
    bundles = {
        "nocand": fp32_only_copy(REPO / "examples/norm.rmsnorm", work / "fp32_only"),
        "faithful": REPO / "examples/norm.rmsnorm",
        "wrong": REPO / "examples/controls/wrong_math",
        "raising": REPO / "examples/controls/raises_in_call",
    }
    res: dict = {
        "config": a.config,
        "arena_id": cfg.arena_id,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "engines": {},
    }

    def save() -> None:
        Path(a.out).write_text(json.dumps(res, indent=1, default=str))

    for name in a.engines.split(","):
        kind = name.split("-")[0]
        env = {**seed_caches(), "SGLANG_PLUGINS": "cacheon"}
        rdir = work / f"receipts-{name}"
        rdir.mkdir()
        if kind == "stock":
            env.update(seam_environment(()))
        else:
            bundle = load_bundle(bundles[kind])
            tree = build_tree(work / f"tree-{name}", [(bundle, list(bundle.manifest.ops))])
            env.update(
                seam_environment(("norm",)),
                **{
                    ENGINE_TREE.name: str(tree.root),
                    ENGINE_TREE_DIGEST.name: tree.digest,
                    RECEIPT_DIR.name: str(rdir),
                    SEAM_STRICT.name: "1",
                },
            )
        steps = [greedy] + (tput if kind in ("stock", "nocand") else [])
        run = run_engine(EngineSpec(name, {**base, "steps": steps}, env, timeout_s=300), work)
        e: dict = {
            "wall_s": round(run.wall_s, 1),
            "rc": run.rc,
            "error": run.error,
            "gpu_free": run.gpu_free,
            "startup": [r for r in run.records if r.get("op") in ("checkpoint", "started")],
        }
        try:
            g = run.step("greedy")
            e["greedy"] = [s["cont"] for s in g["sequences"]]
            e["greedy_hash"] = hashlib.sha256(json.dumps(e["greedy"]).encode()).hexdigest()[:16]
        except KeyError:
            pass
        tp = [run.step(t["tag"])["output_tokens_per_s"] for t in tput if any(r.get("step") == t["tag"] for r in run.records)]
        if tp:
            e["tput"] = tp
        rc = read_receipts(rdir)
        e["receipts"] = rc
        if kind != "stock":
            cov = coverage(rc, [SLOT], [0])
            e["coverage"] = {"ok": cov.ok, "problems": list(cov.problems)}
        if e["error"] and kind != "raising":
            e["log_tail"] = run.log_tail[-3000:]
        if kind == "raising":
            e["log_tail"] = run.log_tail[-1500:]
        res["engines"][name] = e
        ref = res["engines"].get("stock-1", {}).get("greedy")
        if ref and e.get("greedy"):
            toks = sum(len(x) for x in ref)
            same = sum(sum(p == q for p, q in zip(x, y)) for x, y in zip(ref, e["greedy"]))
            e["vs_stock1"] = {
                "token_match": same / toks,
                "seq_match": sum(x == y for x, y in zip(ref, e["greedy"])) / len(ref),
            }
        print(name, {k: v for k, v in e.items() if k not in ("greedy", "receipts", "log_tail")}, flush=True)
        save()
    s = [x for n in ("stock-1", "stock-2") for x in res["engines"].get(n, {}).get("tput", [])]
    c = [x for n in ("nocand-1", "nocand-2") for x in res["engines"].get(n, {}).get("tput", [])]
    if s and c:
        res["nocand_vs_stock"] = {"median_ratio": statistics.median(c) / statistics.median(s), "stock": s, "nocand": c}
        print("no-candidate / stock throughput:", res["nocand_vs_stock"], flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
