#!/usr/bin/env python3
"""The whole judge, timed (issue 30 item 6): `neurons/validator.py` over a queue of N commitments
on a local chain, as an operator runs it, and where each verdict's wall time went.

    python scripts/judge_bench.py --n 6 --out judge-6.json [--config configs/arena/dense.toml]
    python scripts/judge_bench.py --n 12 --out judge-12.json

The mix (N = 6): two faithful kernels with no gain (norm.rmsnorm, activation.silu_and_mul), one
clear loser (demo/cpu_rmsnorm: five torch kernels where stock runs one), one wrong kernel
(controls/wrong_math), one renamed copy of the champion (module and a helper renamed: the copy
identity must catch it), one champion (attention.decode, crowned on the H200 at C/B 1.335).
N = 12 adds attention.decode-onepass (a second champion, head to head), norm.fused_add_rmsnorm and
rope.neox (faithful), controls/nan_output and controls/host_sync (wrong), and a renamed copy of
norm.rmsnorm. Every miner commits before the validator starts: one queue.

Passes of `neurons/validator.py --once` run until the validator is idle (each `--once` pass drains
what it started: screens overlap the arena, loop.py). Its JSON log is parsed into, per
contribution, the wall time of each stage (fetch, static screen, waiting for a screen slot, verify,
waiting for the arena, the arena) and the arena's own stages from its result JSON (engine starts,
resident stage, teacher, confirmation). The report: each verdict's time by stage, verdicts per
GPU-hour (terminal verdicts / wall hours of the run), the total.

CPU dry run (plumbing only, no GPU number): `--mix cpu --config configs/arena/cpu-quick.toml
--screen-device cpu --verify-max-cases 1` (tests/validator/test_judge_bench.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from cacheon_subnet.env import LOG_LEVEL  # noqa: E402

VALIDATOR = "judge-validator"
NETUID = 1
EX = REPO / "examples"
# (hotkey, bundle dir, what it is); "copy-of:" bundles are renamed copies made at run time
MIX_6 = (
    ("faithful-norm", EX / "norm.rmsnorm", "faithful, no gain"),
    ("faithful-silu", EX / "activation.silu_and_mul", "faithful, no gain"),
    ("loser", EX / "demo" / "cpu_rmsnorm", "clear loser"),
    ("wrong", EX / "controls" / "wrong_math", "wrong"),
    ("champion", EX / "attention.decode", "champion"),
    ("copycat", "copy-of:champion", "renamed copy"),
)
MIX_12 = MIX_6 + (
    ("champion-2", EX / "attention.decode-onepass", "second champion"),
    ("faithful-add-norm", EX / "norm.fused_add_rmsnorm", "faithful, no gain"),
    ("faithful-rope", EX / "rope.neox", "faithful, no gain"),
    ("wrong-nan", EX / "controls" / "nan_output", "wrong"),
    ("wrong-sync", EX / "controls" / "host_sync", "wrong"),
    ("copycat-norm", "copy-of:faithful-norm", "renamed copy"),
)
# the CPU dry run: the same roles with bundles the CPU arena judges in seconds
MIX_CPU = (
    ("faithful-norm", EX / "demo" / "stock_equivalent", "faithful, no gain"),
    ("loser", EX / "norm.rmsnorm", "clear loser (interpreted Triton)"),
    ("wrong", EX / "controls" / "wrong_math", "wrong"),
    ("champion", EX / "demo" / "cpu_rmsnorm", "champion"),
    ("copycat", "copy-of:champion", "renamed copy"),
    ("wrong-nan", EX / "controls" / "nan_output", "wrong"),
)
# log events that mark a stage boundary, in the order a contribution meets them
MARKS = (
    "intake.queued",
    "fetch.start",
    "fetch.ok",
    "screen.ok",
    "screen.copy",
    "screen.failed",
    "verify.start",
    "verify.pass",
    "verify.failed",
    "qualify.dispatch",
    "qualify.start",
    "qualify.op",
)


def renamed_copy(src: Path, dst: Path) -> Path:
    """A copy of a bundle with its entry module and one helper renamed: same program, new digest."""
    shutil.copytree(src, dst)
    manifest = (dst / "manifest.toml").read_text()
    entry = re.search(r'entry\s*=\s*"([\w.]+):(\w+)"', manifest)
    if entry is None:
        raise SystemExit(f'{src}: no entry = "module:callable" in manifest.toml')
    module = entry.group(1)
    old = dst / (module.replace(".", "/") + ".py")
    new_module = module.rsplit(".", 1)[-1] + "_fast"
    new_path = old.with_name(new_module + ".py")
    old.rename(new_path)
    prefix = module.rsplit(".", 1)[0] + "." if "." in module else ""
    (dst / "manifest.toml").write_text(manifest.replace(f'"{module}:', f'"{prefix}{new_module}:'))
    text = new_path.read_text()
    helper = re.search(r"^def (_\w+)\(", text, re.M)
    if helper:
        text = re.sub(rf"\b{helper.group(1)}\b", helper.group(1) + "_renamed", text)
    new_path.write_text(text.replace('"""', '"""Renamed copy. ', 1))
    return dst


@dataclass
class Verdict:
    """One contribution's path through the validator, from its log lines."""

    hotkey: str
    role: str
    contribution: str = ""
    marks: dict[str, float] = field(default_factory=dict)  # event -> first timestamp (s since the run's start)
    state: str = ""
    reason: str = ""
    arena_stages: dict[str, float] = field(default_factory=dict)

    def stages(self) -> dict[str, float]:
        m = self.marks

        def span(a: str, *bs: str) -> float | None:
            b = next((m[x] for x in bs if x in m), None)
            return round(b - m[a], 1) if a in m and b is not None else None

        out = {
            "fetch": span("fetch.start", "fetch.ok"),
            "static_screen": span("fetch.ok", "screen.ok", "screen.copy", "screen.failed"),
            "wait_screen": span("screen.ok", "verify.start"),
            "verify": span("verify.start", "verify.pass", "verify.failed"),
            "wait_arena": span("verify.pass", "qualify.dispatch", "qualify.start"),
            "arena": span("qualify.dispatch", "qualify.op") or span("qualify.start", "qualify.op"),
        }
        return {k: v for k, v in out.items() if v is not None}

    def total(self) -> float | None:
        if not self.marks:
            return None
        return round(max(self.marks.values()) - min(self.marks.values()), 1)


def parse_log(lines: list[str], verdicts: dict[str, Verdict], t0: float) -> None:
    """Fill each contribution's marks from the validator's JSON log lines (one object a line)."""
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        event, cid = doc.get("event"), doc.get("contribution")
        if event not in MARKS or not cid or "timestamp" not in doc:
            continue
        v = verdicts.get(cid)
        if v is None:
            continue
        at = datetime.fromisoformat(doc["timestamp"].replace("Z", "+00:00")).timestamp() - t0
        v.marks.setdefault(event, round(at, 2))


def arena_stage_times(detail: dict[str, Any]) -> dict[str, float]:
    """The arena's own stages (engine name -> wall s) from the result JSON its evidence points to."""
    path = detail.get("result_json") if isinstance(detail, dict) else None
    if not path or not Path(path).is_file():
        return {}
    doc = json.loads(Path(path).read_text())
    out = {name: float(s.get("wall_s", 0.0)) for name, s in (doc.get("stages") or {}).items()}
    if doc.get("wall_s") is not None:
        out["verdict_total"] = float(doc["wall_s"])
    return out


def report(verdicts: dict[str, Verdict], wall_s: float) -> dict[str, Any]:
    done = [v for v in verdicts.values() if v.state in ("qualified", "failed", "no_decision")]
    per_hour = len(done) / (wall_s / 3600.0) if wall_s > 0 else None
    return {
        "n": len(verdicts),
        "verdicts": len(done),
        "wall_s": round(wall_s, 1),
        "verdicts_per_gpu_hour": round(per_hour, 1) if per_hour else None,
        "per_verdict": [{**asdict(v), "stages": v.stages(), "total_s": v.total()} for v in verdicts.values()],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="time the whole validator over a mixed queue (local chain)")
    ap.add_argument("--n", type=int, default=6, choices=(6, 12))
    ap.add_argument("--mix", default="gpu", choices=("gpu", "cpu"), help="cpu: the CPU dry run's bundles")
    ap.add_argument("--config", default=str(REPO / "configs" / "arena" / "dense.toml"))
    ap.add_argument("--screen-device", default="cpu", choices=("cpu", "cuda"), help="the validator's default: cpu")
    ap.add_argument("--verify-max-cases", type=int, default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/var/tmp/cacheon-judge", help="wiped only if this script created it")
    ap.add_argument("--max-passes", type=int, default=6)
    ap.add_argument("--pass-timeout-s", type=float, default=3600.0)
    ap.add_argument("--extra", default="", help="more validator flags, space-separated (e.g. --no-overlap)")
    a = ap.parse_args(argv)

    from cacheon_subnet.bundle import pack
    from cacheon_subnet.bundle.archive import load_bundle
    from cacheon_subnet.bundle.digest import hotkey_bound_digest
    from cacheon_subnet.chain.commitment import encode
    from cacheon_subnet.chain.local import LocalChain
    from cacheon_subnet.miner.serve import start_in_thread
    from cacheon_subnet.owned_dir import mark_owned, wipe_owned
    from cacheon_subnet.validator.state import StateDB, StateError

    mix = MIX_CPU if a.mix == "cpu" else MIX_12 if a.n == 12 else MIX_6
    work = Path(a.work)
    wipe_owned(work)
    mark_owned(work)
    serve, bundles = work / "serve", work / "bundles"
    serve.mkdir()
    bundles.mkdir()
    chain_path = work / "chain.sqlite"
    chain = LocalChain.create(chain_path, NETUID, owner_hotkey="owner", weights_rate_limit=1, seconds_per_block=0)
    chain.register(VALIDATOR, "judge-cold", stake=1000.0, validator_permit=True)
    server = start_in_thread(serve)
    verdicts: dict[str, Verdict] = {}
    dirs: dict[str, Path] = {}
    try:
        for hotkey, src, role in mix:
            if isinstance(src, str) and src.startswith("copy-of:"):
                src = renamed_copy(dirs[src.split(":", 1)[1]], bundles / hotkey)
            dirs[hotkey] = Path(src)
            digest = load_bundle(src).digest
            pack(src, serve / f"{digest}.tar.gz")
            chain.register(hotkey, f"{hotkey}-cold")
            chain.commit(hotkey, NETUID, encode(digest, hotkey, f"{server.base_url}/{digest}.tar.gz", chain.url_policy()), 1)
            cid = hotkey_bound_digest(digest, hotkey)
            verdicts[cid] = Verdict(hotkey, role, cid)
            chain.advance(1)  # commit order is the queue's order (a copy comes after its original)
        chain.advance(2)
        state = work / "state"
        argv_v = [
            sys.executable,
            str(REPO / "neurons" / "validator.py"),
            "--netuid",
            str(NETUID),
            "--chain",
            "local",
            "--local-chain",
            str(chain_path),
            "--wallet.hotkey",
            VALIDATOR,
            "--state-dir",
            str(state),
            "--once",
            "--arena",
            a.config,
            "--screen-device",
            a.screen_device,
            *a.extra.split(),
        ]
        if a.verify_max_cases:
            argv_v += ["--verify-max-cases", str(a.verify_max_cases)]
        t0 = time.time()
        passes = []
        for n in range(a.max_passes):
            log_path = work / f"pass{n + 1}.log"
            t = time.monotonic()
            with log_path.open("w") as fe:
                r = subprocess.run(
                    argv_v,
                    stdout=subprocess.PIPE,
                    stderr=fe,
                    text=True,
                    cwd=REPO,
                    timeout=a.pass_timeout_s,
                    env={**os.environ, LOG_LEVEL.name: "info"},
                )
            summary = json.loads(r.stdout) if r.returncode in (0, 1) and r.stdout.strip().startswith("{") else None
            passes.append(
                {"rc": r.returncode, "wall_s": round(time.monotonic() - t, 1), "summary": summary, "log": str(log_path)}
            )
            parse_log(log_path.read_text(errors="replace").splitlines(), verdicts, t0)
            chain.advance(1)
            if summary is None or summary.get("idle"):
                break
        wall = time.time() - t0
        try:
            db = StateDB(state, readonly=True)
            for v in verdicts.values():
                c = db.find(v.contribution)
                if c is not None:
                    v.state, v.reason = c.state, c.reason[:300]
                    rows = db.con.execute("SELECT detail FROM evidence WHERE contribution_id=?", (c.id,)).fetchall()
                    for row in rows:
                        v.arena_stages.update(arena_stage_times(json.loads(row["detail"] or "{}")))
            db.close()
        except StateError as exc:
            print(f"no state: {exc}", file=sys.stderr)
    finally:
        server.stop()
        chain.close()
    out = {
        "script": "scripts/judge_bench.py",
        "config": a.config,
        "mix": a.mix,
        "n": len(mix),
        "screen_device": a.screen_device,
        "argv": argv_v,
        "passes": passes,
        **report(verdicts, wall),
    }
    Path(a.out).write_text(json.dumps(out, indent=1, default=str))
    print(f"{out['verdicts']}/{out['n']} verdicts in {out['wall_s']} s: {out['verdicts_per_gpu_hour']} per GPU-hour")
    for v in out["per_verdict"]:
        print(f"  {v['role']:<22} {v['state']:<12} total {v['total_s']} s  {v['stages']}  arena {v['arena_stages']}")
    return 0 if all(p["summary"] is not None for p in passes) else 1


if __name__ == "__main__":
    sys.exit(main())
