"""`cacheon arena ...` (registered via cli.EXTENSIONS).

cacheon arena run --config configs/arena/dense.toml --bundle DIR|TAR [--incumbent DIR|TAR] [--op SLOT[/VARIANT]]
                  [--workdir DIR] [--out result.json] [--json]
    exit 0 PASS, 1 FAIL, 3 NO_DECISION, 2 usage error
cacheon arena id --config ...      the arena id and the identity it is the digest of
cacheon arena digest --model-dir DIR [--manifest FILE] [--config C]
    a real checkpoint's content digest (for `[model] digest`), its per-file manifest written to
    FILE; with --config, check DIR against that config's declared digest (exit 1 naming the file)
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from arena.engine.startdiag import brief
from cacheon_subnet.cliout import ARENA, ARENA_PLAIN, Exit, emit
from cacheon_subnet.env import ARENA_HOME
from cacheon_subnet.errors import UsageError

EXIT = {"PASS": Exit.OK, "FAIL": Exit.FAIL, "NO_DECISION": Exit.NO_DECISION}


def _pick_op(bundle: Any, want: str | None) -> Any:
    ops = list(bundle.manifest.ops)
    if want:
        ops = [o for o in ops if want in (o.key, o.slot)]
        if not ops:
            raise UsageError(f"--op {want!r}: no such op in the bundle (ops: {[o.key for o in bundle.manifest.ops]})")
    if len(ops) != 1:
        raise UsageError(f"the bundle has {len(ops)} ops ({[o.key for o in ops]}): pick one with --op")
    return ops[0]


def summary(r: dict[str, Any]) -> str:
    lines = [
        f"cacheon arena  {r['arena']} ({r['arena_id']})  bundle {r['bundle_digest'][:16]}…  {r['op']}"
        + (f"  [control: {r['control']}, role bias {r['role_bias']:+.3%}]" if r.get("role_bias") is not None else ""),
        f"verdict: {r['verdict']}  — {r['reason']}",
        f"wall: {r.get('wall_s')} s   result: {r.get('result_path')}",
    ]
    s = r.get("speed")
    if s:
        lines.append(
            f"speed: C/B median {s['ratio']:.4f}  noise {s['noise']:.3%}  bar {s['bar']:.4f}  "
            f"cycles {len(s['ratios'])}  drift B′/B {', '.join(f'{d:+.2%}' for d in s['drift'])}"
        )
    for metric, m in (r.get("speed_by_metric") or {}).items():  # the same windows on every clock
        if metric != "total_tokens_per_s":
            lines.append(
                f"  by {metric}: C/B {m['ratio']:.4f}  B′/B {m['run_drift']:+.2%}  noise {m['noise']:.2%}"
                f"  ({m['verdict']}{', the verdict' if metric == r.get('metric') else ''})"
            )
    qv = r.get("quality")
    if qv:
        lines.append(f"quality: {qv['verdict']}  " + "; ".join(qv.get("reasons", [])[:3]))
    ev = r.get("evidence")
    if ev:
        lines.append(
            f"evidence: {'ok' if ev['ok'] else 'FAIL: ' + '; '.join((ev['problems'] or ev.get('arena_problems') or ev['baseline_problems'])[:3])}"
        )
        lines += [f"  left to stock: {n}" for n in (ev.get("notes") or [])[:3]]
    for name, st in r.get("stages", {}).items():
        start = next((x["s"] for x in st.get("startup", []) if x.get("op") == "started"), None)
        swaps = [x["s"] for x in st.get("routes", [])]
        lines.append(
            f"engine {name}: wall {st['wall_s']} s, start {start} s, gpu free {st['gpu_free']}"
            + (f", {len(swaps)} route swaps (median {sorted(swaps)[len(swaps) // 2]:.1f} s)" if swaps else "")
        )
        if why := brief(st.get("startup"), st.get("host_timing")):
            lines.append(f"  start: {why}")
    return "\n".join(lines)


def cmd_arena_run(args: argparse.Namespace) -> int:
    from arena.config import ArenaConfigError, load_config
    from arena.qualifier import GpuQualifier
    from arena.run import qualify
    from cacheon_subnet.bundle import load_bundle

    try:
        cfg = load_config(args.config)
    except ArenaConfigError as e:
        raise UsageError(str(e)) from None
    from dataclasses import replace

    from arena.run import stock_control_op

    incumbent = None
    if (args.control in ("handicap", "slowdown")) != (args.handicap_us is not None):
        raise UsageError("--handicap-us MICROSECONDS goes with --control handicap or slowdown, and only with them")
    if args.control:
        if args.incumbent:
            raise UsageError("--incumbent makes no sense with --control")
        if args.bundle or not args.slot:
            raise UsageError(f"--control {args.control} takes --slot SLOT and no --bundle (it runs no contribution)")
        if args.handicap_us is not None and not 0 < args.handicap_us <= 100_000:
            raise UsageError(f"--handicap-us {args.handicap_us:g}: expected 0 < µs <= 100000")
        from cacheon_subnet.errors import SlotError
        from cacheon_subnet.slots import get_slot

        try:
            get_slot(args.slot)
        except SlotError:
            raise UsageError(f"--slot {args.slot!r}: unknown slot (see cacheon slots)") from None
        from arena.qualifier import default_home
        from arena.run import RunOptions

        bundle, op = None, stock_control_op(args.slot)
        home = default_home() / "arena"
        opts = RunOptions(
            workdir=home / cfg.arena_id / f"control-{args.control}-{args.slot}",
            checkpoint_root=home / "checkpoints",
            control=args.control,
            handicap_us=args.handicap_us or 0.0,
        )
    else:
        if not args.bundle:
            raise UsageError("--bundle is required (or --control stock-as-candidate --slot SLOT)")
        bundle = load_bundle(Path(args.bundle))
        op = _pick_op(bundle, args.op)
        opts = GpuQualifier(cfg).options(bundle, op)
        if args.incumbent:
            inc = load_bundle(Path(args.incumbent))
            inc_op = next((o for o in inc.manifest.ops if o.slot == op.slot), None)
            if inc_op is None:
                raise UsageError(f"--incumbent {args.incumbent}: no op for slot {op.slot}")
            incumbent = (inc, inc_op)
    if args.workdir:
        opts = replace(opts, workdir=Path(args.workdir))
    if getattr(args, "grade_always", False):  # a caller-built Namespace may predate the flag
        opts = replace(opts, grade_always=True)
    from arena.run import ArenaUnavailable

    try:
        result = qualify(cfg, bundle, op, opts, incumbent=incumbent)
    except ArenaUnavailable as e:
        raise UsageError(f"cacheon arena run: {e}") from None
    if args.out:
        shutil.copyfile(result["result_path"], args.out)
    emit(args, result, lambda: summary(result), ARENA)
    return EXIT[result["verdict"]]


def cmd_arena_warm(args: argparse.Namespace) -> int:
    """One pristine engine warms the seed JIT caches: exit 0 warmed, 1 the engine failed, 2 usage."""
    from arena.config import ArenaConfigError, load_config
    from arena.engine.home import default_home
    from arena.engine.warm import warm
    from arena.run import ArenaUnavailable, preflight

    try:
        cfg = load_config(args.config)
    except ArenaConfigError as e:
        raise UsageError(str(e)) from None
    try:
        preflight()
    except ArenaUnavailable as e:
        raise UsageError(f"cacheon arena warm: {e}") from None
    home = default_home() / "arena"
    res = warm(cfg, Path(args.workdir) if args.workdir else home / cfg.arena_id / "warm", home / "checkpoints")
    emit(args, res.to_json(), lambda: _warm_text(cfg, res), ARENA_PLAIN)
    return Exit.OK if res.ok else Exit.FAIL


def _warm_text(cfg: Any, res: Any) -> str:
    start = {s.name: next((x["s"] for x in s.startup if x.get("op") == "started"), None) for s in res.stages}
    lines = [
        f"cacheon arena warm  {cfg.name} ({cfg.arena_id}): {'warmed' if res.ok else 'FAILED: ' + str(res.error)}",
        f"seed caches: {res.files_after - res.files_before} new files ({res.files_after} in all) in "
        + ", ".join(sorted(set(res.caches.values()))),
    ]
    for s in res.stages:
        lines.append(f"engine {s.name}: wall {s.wall_s:.1f} s, start {start[s.name]} s")
        if why := brief(s.startup, s.host_timing):
            lines.append(f"  start: {why}")
    lines.append(f"wall: {res.wall_s:.1f} s")
    return "\n".join(lines)


def cmd_arena_id(args: argparse.Namespace) -> int:
    from arena.config import ArenaConfigError, load_config

    try:
        cfg = load_config(args.config)
    except ArenaConfigError as e:
        raise UsageError(str(e)) from None
    emit(args, {"arena_id": cfg.arena_id, "identity": cfg.identity()}, cfg.arena_id, ARENA_PLAIN)
    return Exit.OK


def cmd_arena_digest(args: argparse.Namespace) -> int:
    from arena.config import ArenaConfigError, load_config
    from arena.model.model_dir import CheckpointMismatch, check, load_manifest, scan, write_manifest

    try:
        if args.config:
            cfg = load_config(args.config)
            if not cfg.real:
                raise UsageError(f"{args.config}: not an arena on a real checkpoint (no [model] path)")
            want = load_manifest(cfg.resolve(cfg.model.manifest)) if cfg.model.manifest else None
            m = check(args.model_dir or cfg.model_dir, cfg.model.digest or "", want)
        else:
            if not args.model_dir:
                raise UsageError("arena digest: --model-dir DIR (or --config C) is required")
            m = scan(args.model_dir)
    except ArenaConfigError as e:
        raise UsageError(str(e)) from None
    except CheckpointMismatch as e:
        print(f"cacheon arena digest: REFUSED: {e}")
        return Exit.FAIL
    if args.manifest:
        write_manifest(m, args.manifest)
    emit(args, m.to_json(), m.digest, ARENA_PLAIN)
    return Exit.OK


def register(sub: Any, groups: dict[str, Any]) -> None:
    a = sub.add_parser("arena", help="qualify a bundle in a real SGLang engine on the GPU (B/C/B′ + T)")
    asub = a.add_subparsers(dest="arena_cmd", required=True)
    r = asub.add_parser("run", help="one full verdict: exit 0 PASS, 1 FAIL, 3 NO_DECISION, 2 usage")
    r.add_argument("--config", required=True, help="configs/arena/<name>.toml")
    r.add_argument("--bundle", help="bundle directory or .tar.gz")
    r.add_argument(
        "--control",
        choices=["stock-as-candidate", "handicap", "slowdown"],
        help="stock-as-candidate: role bias (SGLang's kernel in the candidate route); handicap: a "
        "known speedup (B runs SGLang's kernel + a GPU spin, C the kernel alone); slowdown: a known "
        "loss (C runs the kernel + the spin, B the kernel alone); all need --slot",
    )
    r.add_argument(
        "--handicap-us",
        type=float,
        help="the spin per call, in µs, of the baseline (handicap) or of the candidate (slowdown: a known loss)",
    )
    r.add_argument("--slot", help="the slot of a --control run")
    r.add_argument("--incumbent", help="the crowned bundle of the same slot: B and B′ run it (head-to-head)")
    r.add_argument("--op", help="which op of the bundle (slot id or op key), when it has several")
    r.add_argument(
        "--workdir",
        help=f"where engines, receipts and result.json go (default ${ARENA_HOME.name}/arena/<arena id>/..., "
        f"home {ARENA_HOME.default})",
    )
    r.add_argument("--out", help="also copy the result JSON here")
    r.add_argument(
        "--grade-always",
        action="store_true",
        help="grade quality with the teacher whatever the speed verdict (the validator grades only a "
        "speed PASS; this costs one more engine start)",
    )
    r.add_argument("--json", action="store_true")
    r.set_defaults(handler=cmd_arena_run)
    w = asub.add_parser(
        "warm",
        help="warm the engines' JIT seed caches with one pristine engine (after an install or "
        "a pin move): later engines start warm; exit 0 warmed, 1 failed, 2 usage",
    )
    w.add_argument("--config", required=True, help="configs/arena/<name>.toml")
    w.add_argument("--workdir", help=f"the warm engine's work dir (default ${ARENA_HOME.name}/arena/<arena id>/warm)")
    w.add_argument("--json", action="store_true")
    w.set_defaults(handler=cmd_arena_warm)
    i = asub.add_parser("id", help="print the arena id of a config")
    i.add_argument("--config", required=True, help="configs/arena/<name>.toml")
    i.add_argument("--json", action="store_true")
    i.set_defaults(handler=cmd_arena_id)
    d = asub.add_parser("digest", help="a real checkpoint's content digest and per-file manifest ([model] digest)")
    d.add_argument("--model-dir", help="HF-format checkpoint directory")
    d.add_argument("--manifest", help="write the per-file manifest here ([model] manifest)")
    d.add_argument("--config", help="check the directory against this arena config's declared digest")
    d.add_argument("--json", action="store_true")
    d.set_defaults(handler=cmd_arena_digest)
