"""Issue 33 item 3, the proof on a GPU lease: stock SGLang with a release installed serves the dense
model through sglang.Engine with every crowned kernel active, its greedy outputs within the quality
gate, and its throughput against the same engine without the release, interleaved A B B A on the
same prompts (restarted engines drift; the interleave cancels a linear drift).

  stock-1    SGLANG_PLUGINS=none: no plugin at all (the release installed but not loaded)
  release-1  SGLANG_PLUGINS=<release>: SGLang's load_plugins() runs the release's plugin, which
             routes the crowned slots in every scheduler rank; receipts count each kernel's calls
  release-2, stock-2   the same again, in reverse order

Both engines run the settings the release's serving policy names (descriptor policy.engine: the
attention.decode crown needs attention_backend="triton"; SGLang's Hopper default is FA3).
Quality: greedy tokens of each release engine against stock-1 on the same prompts (exact-match
rate, and |logprob delta| on each sequence's common prefix), gated with arena/verdict/quality.py's
defaults (min_agreement_ratio, max_nll_mean_delta, max_nll_p99_delta); stock-2 against stock-1 is
the control (what an engine restart alone moves).

    cacheon release verify WHEEL --owner SS58 && pip install --no-deps WHEEL
    python3 scripts/release_serve.py --wheel WHEEL --owner SS58 --out $OUT/release_serve.json

--dry-run (CPU, tests): the fake engine (--engine-factory) stands in for sglang.Engine and the
release's activation plan for SGLang's plugin loader (the same environment the plugin's hook hands
each rank); the runtime's version checks read the pins. Exit 0: every check passed; 1: a check
failed (the JSON's problems say which); 2: usage (no wheel, a release that would not activate).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import statistics
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arena.config import load_config  # noqa: E402
from arena.engine.home import seed_caches  # noqa: E402
from arena.engine.host import EngineSpec, run_engine  # noqa: E402
from arena.jobs import checkpoint_job, engine_kwargs, greedy_and_throughput_steps  # noqa: E402
from arena.verdict.quality import QualityPolicy  # noqa: E402
from cacheon_subnet.env import RECEIPT_DIR  # noqa: E402
from cacheon_subnet.release import runtime  # noqa: E402
from cacheon_subnet.release.descriptor import DESCRIPTOR_FILE, Descriptor, parse  # noqa: E402
from cacheon_subnet.release.verify import Outcome, verify_wheel  # noqa: E402
from seams.receipts import coverage, read_receipts  # noqa: E402
from seams.table import seam_environment  # noqa: E402

ORDER = ("stock-1", "release-1", "release-2", "stock-2")
NO_PLUGIN = "none"  # an SGLANG_PLUGINS whitelist that names no installed plugin: nothing loads


def pretend_pinned_runtime(desc: Descriptor) -> None:
    """--dry-run: no SGLang here; the runtime's version checks read the release's own pins."""
    pins = {"sglang": desc.runtime.sglang, "torch": desc.runtime.torch, "triton": desc.runtime.triton}
    pins["sglang-kernel"] = desc.runtime.sglang_kernel
    runtime.installed_version = pins.get  # type: ignore[assignment]


def package_dir(wheel: Path, work: Path, dry_run: bool) -> Path:
    """Where the release is installed: pip's site-packages on the lease; an unpacked copy on a dry run."""
    with zipfile.ZipFile(wheel) as z:
        pkg = next(n.split("/", 1)[0] for n in z.namelist() if n.endswith("/" + DESCRIPTOR_FILE))
        if dry_run:
            z.extractall(work / "site")
            return work / "site" / pkg
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"usage: {pkg} is not installed here: pip install --no-deps {wheel}")
    return Path(next(iter(spec.submodule_search_locations)))


def agreement(ref: list[dict[str, Any]], got: list[dict[str, Any]], gate: QualityPolicy) -> dict[str, Any]:
    """Greedy outputs of one engine against stock-1's on the same prompts."""
    toks = sum(len(r["cont"]) for r in ref) or 1
    same = sum(sum(p == q for p, q in zip(r["cont"], g["cont"])) for r, g in zip(ref, got))
    deltas: list[float] = []
    for r, g in zip(ref, got):
        for (rt, rl), (gt, gl) in zip(r.get("logprobs") or [], g.get("logprobs") or []):
            if rt != gt:
                break  # past the first divergence the contexts differ: no longer comparable
            deltas.append(abs(gl - rl))
    deltas.sort()
    mean = statistics.fmean(deltas) if deltas else 0.0
    p99 = deltas[min(len(deltas) - 1, int(0.99 * len(deltas)))] if deltas else 0.0
    out = {
        "token_match": same / toks,
        "seq_match": sum(r["cont"] == g["cont"] for r, g in zip(ref, got)) / max(1, len(ref)),
        "logprob_delta_mean": mean,
        "logprob_delta_p99": p99,
        "compared_positions": len(deltas),
    }
    out["problems"] = [
        f"{k} {v:.4f} {op} {lim}"
        for k, v, op, lim, bad in (
            (
                "token_match",
                out["token_match"],
                "<",
                gate.min_agreement_ratio,
                out["token_match"] < gate.min_agreement_ratio,
            ),
            ("logprob_delta_mean", mean, ">", gate.max_nll_mean_delta, mean > gate.max_nll_mean_delta),
            ("logprob_delta_p99", p99, ">", gate.max_nll_p99_delta, p99 > gate.max_nll_p99_delta),
        )
        if bad
    ]
    out["ok"] = not out["problems"]
    return out


def steps(cfg: Any, a: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return greedy_and_throughput_steps(cfg, a.greedy_prompts, a.greedy_tokens, a.reps, greedy_top_k=1)


def run(a: argparse.Namespace) -> dict[str, Any]:
    wheel, work = Path(a.wheel), Path(a.work)
    if not wheel.is_file():
        raise SystemExit(f"usage: {wheel}: no such wheel")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as z:
        desc = parse(next(z.read(n) for n in z.namelist() if n.endswith("/" + DESCRIPTOR_FILE)))
    if a.dry_run:
        pretend_pinned_runtime(desc)
    report = verify_wheel(wheel, a.owner)
    res: dict[str, Any] = {
        "dry_run": a.dry_run,
        "wheel": str(wheel),
        "config": a.config,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verify": report.to_json(),
        "slots": [c.slot for c in desc.crowns],
        "crowns": [{"slot": c.slot, "arena_id": c.arena_id, "speedup_vs_stock": c.speedup_vs_stock} for c in desc.crowns],
        "engine_settings": [e.flag for e in desc.policy.engine],
        "order": list(ORDER),
        "engines": {},
        "problems": [],
    }
    if report.outcome is not Outcome.VERIFIED:
        raise SystemExit(f"usage: release verify says {report.outcome.value}: {report.render()}")
    pkg = package_dir(wheel, work, a.dry_run)
    plan = runtime.plan(pkg)
    if isinstance(plan, str):
        raise SystemExit(f"usage: the release would not activate here: {plan}")
    res["release"] = plan.name
    cfg = load_config(a.config)
    kw = engine_kwargs(cfg)
    kw.update({e.server_arg: e.value for e in desc.policy.engine})  # both engines: only the release differs
    res["engine_kwargs"] = kw
    ranks = list(range(int(kw.get("tp_size", 1) or 1)))
    greedy, tput = steps(cfg, a)
    base = {
        "engine_kwargs": kw,
        "engine_factory": a.engine_factory,
        "checkpoint": None if a.engine_factory else checkpoint_job(cfg, Path("/tmp/cacheon-checkpoints")),
    }
    for name in ORDER:
        rdir = work / f"receipts-{name}"
        rdir.mkdir()
        env = {**seed_caches(), **seam_environment(()), "SGLANG_PLUGINS": NO_PLUGIN, RECEIPT_DIR.name: str(rdir)}
        if name.startswith("release"):
            env["SGLANG_PLUGINS"] = plan.name
            if a.dry_run:  # the fake engine has no plugin loader: the environment the plugin's hook hands a rank
                env.update(plan.environ, **{RECEIPT_DIR.name: str(rdir)})
        r = run_engine(EngineSpec(name, {**base, "steps": [greedy, *tput]}, env, timeout_s=a.timeout_s), work)
        e: dict[str, Any] = {"rc": r.rc, "error": r.error, "wall_s": round(r.wall_s, 1)}
        try:
            e["greedy"] = r.step("greedy")["sequences"]
            e["greedy_hash"] = hashlib.sha256(json.dumps([s["cont"] for s in e["greedy"]]).encode()).hexdigest()[:16]
        except KeyError:
            res["problems"].append(f"{name}: no greedy outputs ({r.error or 'see log_tail'})")
            e["log_tail"] = r.log_tail[-3000:]
        e["tput"] = [
            r.step(t["tag"])["output_tokens_per_s"] for t in tput if any(x.get("step") == t["tag"] for x in r.records)
        ]
        receipts = read_receipts(rdir)
        if name.startswith("release"):
            cov = coverage(receipts, res["slots"], ranks)
            e["kernels"] = {
                "ok": cov.ok,
                "problems": list(cov.problems),
                "per_rank": {str(k): v for k, v in cov.per_rank.items()},
            }
            if not cov.ok:
                res["problems"].append(f"{name}: not every crowned kernel served: {'; '.join(cov.problems)[:300]}")
        elif receipts:
            res["problems"].append(f"{name}: a stock engine wrote receipts: the release was active without its plugin")
        res["engines"][name] = e
        print(name, {k: v for k, v in e.items() if k not in ("greedy", "log_tail")}, flush=True)
    finish(res)
    return res


def finish(res: dict[str, Any]) -> None:
    """Quality against stock-1, the stock-2 control, and the interleaved throughput ratio."""
    eng, gate = res["engines"], QualityPolicy()
    ref = eng.get("stock-1", {}).get("greedy")
    res["quality"] = {}
    if ref:
        for name in ("release-1", "release-2", "stock-2"):
            if eng.get(name, {}).get("greedy"):
                res["quality"][name] = agreement(ref, eng[name]["greedy"], gate)
        for name in ("release-1", "release-2"):
            q = res["quality"].get(name)
            if q is not None and not q["ok"]:
                res["problems"].append(f"{name}: greedy outputs outside the quality gate: {'; '.join(q['problems'])}")
    for e in eng.values():
        e.pop("greedy", None)
    s = [x for n in ("stock-1", "stock-2") for x in eng.get(n, {}).get("tput", [])]
    c = [x for n in ("release-1", "release-2") for x in eng.get(n, {}).get("tput", [])]
    if s and c:
        res["throughput"] = {"ratio": statistics.median(c) / statistics.median(s), "stock": s, "release": c}
    else:
        res["problems"].append("throughput: an engine timed nothing")
    res["ok"] = not res["problems"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", required=True, help="the release wheel (pip-installed with --no-deps, except --dry-run)")
    ap.add_argument("--owner", default=None, help="the subnet owner's SS58: release verify binds the signer to it")
    ap.add_argument("--config", default=str(REPO / "configs/arena/dense.toml"))
    ap.add_argument("--work", default="/tmp/cacheon-release-serve")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3, help="timed windows per engine")
    ap.add_argument("--greedy-prompts", type=int, default=64)
    ap.add_argument("--greedy-tokens", type=int, default=64)
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per engine")
    ap.add_argument("--dry-run", action="store_true", help="CPU: the fake engine, the activation plan as the plugin")
    ap.add_argument("--engine-factory", default=None, help="--dry-run: a fake engine class module:attr")
    a = ap.parse_args(argv)
    if a.dry_run != bool(a.engine_factory):
        print("usage: --dry-run and --engine-factory go together", file=sys.stderr)
        return 2
    try:
        res = run(a)
    except SystemExit as e:
        print(str(e.code), file=sys.stderr)
        return 2
    Path(a.out).write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps({k: res.get(k) for k in ("ok", "problems", "throughput", "engine_settings")}, default=str), flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
