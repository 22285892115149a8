"""Cacheon: contribute faster, faithful GPU kernels to a pinned SGLang engine and get paid on a
Bittensor subnet. Miners scaffold, verify, bench, pack and submit kernel bundles; validators
verify them in a sandbox, time them in an arena, settle crowns and publish weights.

Exit codes, every verb: 0 ok/PASS, 1 FAIL (the bundle or check failed), 2 usage error (bad flag,
missing path, no CUDA for --device cuda)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from arena import commands as arena_commands
from cacheon_subnet import demo
from cacheon_subnet.chain import commands as chain_commands
from cacheon_subnet.cliout import Exit, add_log_to, emit, show_defaults
from cacheon_subnet.env import LOG_LEVEL
from cacheon_subnet.errors import BundleError, CacheonError, UsageError
from cacheon_subnet.miner import commands as miner_commands
from cacheon_subnet.release import commands as release_commands
from cacheon_subnet.validator import commands as validator_commands
from native import commands as native_commands
from seams import commands as seams_commands

Command = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, Command] = {}


def command(name: str) -> Callable[[Command], Command]:
    def deco(fn: Command) -> Command:
        _COMMANDS[name] = fn
        return fn

    return deco


# -- slots / bundles -------------------------------------------------------------------------
@command("slots")
def cmd_slots(args: argparse.Namespace) -> int:
    from cacheon_subnet.slots import all_slots

    specs = all_slots()
    payload = [
        {
            "id": s.id,
            "version": s.version,
            "signature": s.signature(),
            "summary": s.summary,
            "dtypes": list(s.dtypes),
            "graph_dynamic": list(s.graph_dynamic),
            "sglang_target": s.sglang_target,
            "collective": s.collective,
            "world_sizes": list(s.world_sizes),
            "args": [
                {
                    "name": a.name,
                    "role": a.role,
                    "dtype": a.dtype,
                    "shape": list(a.shape),
                    "layout": a.layout,
                    "graph_dynamic": a.graph_dynamic,
                    "doc": a.doc,
                }
                for a in s.args
            ],
            "params": [{"name": p.name, "kind": p.kind, "doc": p.doc} for p in s.params],
        }
        for s in specs
    ]
    lines = []
    for s in specs:
        lines += [f"{s.key:28} {s.summary}", f"    {s.signature()}", f"    sglang: {s.sglang_target}"]
        if s.collective:
            lines.append(f"    collective: one process per rank, world sizes {list(s.world_sizes)} (verify --world-size N)")
    emit(args, payload, "\n".join(lines))
    return Exit.OK


@command("pack")
def cmd_pack(args: argparse.Namespace) -> int:
    from cacheon_subnet.bundle import load_bundle, pack
    from cacheon_subnet.verify.static import bound as policy_bound

    # the validators' scan and budget, in a bounded child (no sandbox wall: the miner's own machine)
    findings = list(policy_bound.static_check(load_bundle(args.src), walled=False).findings)
    if findings:  # syntax errors included: every validator rejects it before running a line
        payload = {"status": "refused", "reasons": findings, "source": args.src}
        emit(
            args,
            payload,
            "cacheon pack: refused, the static policy scan fails (validators reject this bundle "
            "unexecuted; `cacheon verify` shows the same):\n" + "\n".join(f"  {f}" for f in findings),
        )
        return Exit.FAIL
    out = args.out or f"{Path(args.src).resolve().name}.tar.gz"
    bundle = pack(args.src, out)
    payload = {"archive": str(out), "digest": bundle.digest, "files": len(bundle.files), "bytes": bundle.size}
    if args.hotkey:
        from cacheon_subnet.bundle import hotkey_bound_digest

        payload["hotkey_digest"] = hotkey_bound_digest(bundle.digest, args.hotkey)
    emit(args, payload, "\n".join(f"{k}: {v}" for k, v in payload.items()) + _ID_NOTE)
    return Exit.OK


_ID_NOTE = (
    "\n(digest: the bundle's content alone; hotkey_digest = sha256(digest + hotkey) is the contribution id "
    "validators and `cacheon status` show)"
)


@command("digest")
def cmd_digest(args: argparse.Namespace) -> int:
    from cacheon_subnet.bundle import hotkey_bound_digest, load_bundle

    bundle = load_bundle(args.bundle)
    payload = {"digest": bundle.digest, "files": len(bundle.files), "ops": [o.key for o in bundle.manifest.ops]}
    if args.hotkey:
        payload["hotkey_digest"] = hotkey_bound_digest(bundle.digest, args.hotkey)
    emit(args, payload, "\n".join(f"{k}: {v}" for k, v in payload.items()) + _ID_NOTE)
    return Exit.OK


@command("verify")
def cmd_verify(args: argparse.Namespace) -> int:
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.verify import VerifyOptions, verify_bundle

    try:
        bundle = load_bundle(args.bundle)
    except BundleError as e:
        if e.rule == "not-found":
            raise UsageError(str(e)) from None
        reason = "manifest" if e.rule.startswith("manifest") else "bundle"
        payload = {"status": "FAIL", "reasons": [f"{reason}: {e}"], "source": args.bundle}
        emit(args, payload, f"cacheon verify: FAIL\n  {reason}: {e}")
        return Exit.FAIL
    from cacheon_subnet.verify.native_gate import check_native, has_cuda

    if has_cuda(bundle) and not _cuda_visible(args.device):  # compiled + static checks; trials need a GPU: exit 3
        native = check_native(bundle)
        emit(args, native.to_json(), native.render())
        return native.exit_code
    opts = VerifyOptions(
        device=args.device,
        tier=args.tier,
        call_timeout_s=args.call_timeout,
        import_timeout_s=args.import_timeout,
        seed=args.seed,
        max_cases=args.max_cases,
        graph_check=False if args.no_graph else None,
        compile_check=not args.no_compile,
        world_size=args.world_size,
        arena=_arena_shapes(args.arena) if args.arena else None,
        deadline_s=args.deadline,
    )
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise CacheonError("--device cuda requested but no CUDA device is visible")
    report = verify_bundle(bundle, opts)
    emit(args, report.to_json(), report.render())
    return Exit.OK if report.passed else Exit.FAIL


def _cuda_visible(device: str) -> bool:
    """--device cuda on a box with a CUDA device: a CUDA bundle's trials run (verify_bundle compiles first)."""
    import torch

    return device.startswith("cuda") and torch.cuda.is_available()


def _arena_shapes(path: str):  # noqa: ANN202 - ArenaShapes, imported lazily
    """The token counts of an arena config, read here in the CLI layer (the library never imports
    arena/) and handed to verify as plain numbers."""
    from cacheon_subnet.verify.shapes import from_arena_config

    try:
        from arena.config import load_config
    except ImportError as e:
        raise UsageError(f"--arena {path}: the arena package is not importable here ({e})") from None
    return from_arena_config(load_config(path))


@command("bench")
def cmd_bench(args: argparse.Namespace) -> int:
    from cacheon_subnet.bench import BenchOptions, bench_bundle
    from cacheon_subnet.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    report = bench_bundle(
        bundle,
        BenchOptions(
            device=_bench_device(args.device),
            budget_s=args.budget,
            tier=args.tier,
            target_rel_err=args.target_rel_err,
            max_cases=args.max_cases,
            arena=_arena_shapes(args.arena) if args.arena else None,
        ),
    )
    emit(args, report.to_json(), report.render())
    return Exit.OK if report.ok else Exit.FAIL


def _bench_device(asked: str | None) -> str:
    """Default: cuda where a CUDA device is visible, else cpu (said on stderr). An explicit
    --device cuda without one is a usage error, before any table or worker."""
    import torch

    has_cuda = torch.cuda.is_available()
    if asked == "cuda" and not has_cuda:
        raise UsageError(
            "--device cuda requested but no CUDA device is visible (use --device cpu: timing vs the "
            "fp32 reference, advisory)"
        )
    if asked is None:
        if not has_cuda:
            print(
                "cacheon bench: no CUDA device visible; timing on cpu against the fp32 reference (advisory; "
                "pass --device cuda on a GPU box)",
                file=sys.stderr,
            )
        return "cuda" if has_cuda else "cpu"
    return asked


@command("miner init")
def cmd_miner_init(args: argparse.Namespace) -> int:
    from cacheon_subnet.miner.scaffold import Lang, scaffold

    path = scaffold(args.slot, Path(args.dir), force=args.force, lang=Lang(args.lang))
    nxt = f"cacheon verify {path} --device cpu" if args.lang == "triton" else f"cacheon native build {path}"
    emit(args, {"created": str(path), "slot": args.slot}, f"created {path} for slot {args.slot}\nnext: {nxt}")
    return Exit.OK


@command("chain-compat")
def cmd_chain_compat(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from cacheon_subnet.chain.compat import check_sdk, render

    report = check_sdk()
    emit(args, {"exit_code": report.exit_code, "rows": [asdict(r) for r in report.rows]}, render(report))
    return report.exit_code


@command("doctor")
def cmd_doctor(args: argparse.Namespace) -> int:
    from cacheon_subnet.sandbox.probe import doctor

    return doctor(as_json=args.json, gpu=args.gpu)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cacheon",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Start: `cacheon demo` (the whole loop on one machine), then README "
        "'For miners'. Run from a checkout: .venv/bin/cacheon, or "
        "`source .venv/bin/activate` first.",
    )
    p.add_argument("--log-level", default=None, help=f"debug|info|warning|error (env {LOG_LEVEL.name})")
    add_log_to(p)
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars (stderr, TTY only) or progress lines (stderr)"
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("slots", help="list the slot ABI catalog")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("pack", help="deterministic .tar.gz of a bundle directory")
    s.add_argument("src", help="bundle directory (manifest.toml at its root)")
    s.add_argument("-o", "--out", help="archive path (default: <bundle dir name>.tar.gz here)")
    s.add_argument("--hotkey", help="also print the hotkey-bound digest")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("digest", help="canonical content digest of a bundle")
    s.add_argument("bundle", help="bundle directory or .tar.gz")
    s.add_argument("--hotkey", help="also print the hotkey-bound digest (the contribution id)")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("verify", help="check a bundle exactly as a validator would (exit 0 PASS, 1 FAIL)")
    s.add_argument("bundle", help="bundle directory or .tar.gz")
    s.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="cuda adds CUDA graph capture/replay and torch.compile"
    )
    s.add_argument("--tier", choices=["verify", "gpu", "bench"], help="workload shape set (default by device)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--seed", type=int, help="fix the input seed (debugging; validators use a secret one)")
    s.add_argument("--call-timeout", type=float, default=120.0, help="seconds per kernel call")
    s.add_argument(
        "--deadline",
        type=float,
        help="seconds for the whole verify (the validator screens with 900 on "
        "a GPU, 3600 on CPU): ops still unchecked then FAIL `timeout`",
    )
    s.add_argument("--import-timeout", type=float, default=120.0, help="seconds for the worker to import the bundle")
    s.add_argument(
        "--max-cases",
        type=int,
        metavar="N",
        help="at most N of the slot's tier shapes per op (default: all); verify adds its odd and --arena "
        "sizes beyond them, so the report's `cases` counts both and `tier_cases` the capped ones",
    )
    s.add_argument("--no-graph", action="store_true", help="skip CUDA graph capture/replay")
    s.add_argument("--no-compile", action="store_true", help="skip torch.compile(fullgraph=True)")
    s.add_argument(
        "--arena",
        metavar="CONFIG",
        help="configs/arena/<name>.toml: also verify every decode batch size "
        "and prefill size that arena runs (all of them on --device cuda, a sample on cpu)",
    )
    s.add_argument(
        "--world-size",
        type=int,
        metavar="N",
        help="collective slots: ranks to verify on, one sandboxed process each (gloo on CPU, NCCL on "
        "CUDA); default: each slot's declared world sizes. Usage error for single-rank slots",
    )

    s = sub.add_parser("bench", help="time a bundle's kernels against stock SGLang (or the reference)")
    s.add_argument("bundle", help="bundle directory or .tar.gz")
    s.add_argument(
        "--device", default=None, choices=["cpu", "cuda"], help="default: cuda if a CUDA device is visible, else cpu"
    )
    s.add_argument("--tier", default="bench", choices=["verify", "gpu", "bench"], help="workload shape set")
    s.add_argument(
        "--budget",
        type=float,
        default=3.0,
        help="seconds of timing per case, both sides together; each side still runs at least 23 calls, so a "
        "case whose calls are slow (CPU, large sizes) takes longer: bench prints its estimate per case",
    )
    s.add_argument(
        "--target-rel-err", type=float, default=0.001, help="stop timing a case once stderr/mean falls below this"
    )
    s.add_argument("--max-cases", type=int, metavar="N", help="time at most N cases per op (default: all)")
    s.add_argument(
        "--arena",
        metavar="CONFIG",
        help="configs/arena/<name>.toml: time the sizes that arena runs "
        "through each slot (its timed window's decode batch and prefill forward first, then every captured "
        "decode batch and prefill size), on its model's shapes (a real checkpoint: its config.json)",
    )
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("chain-compat", help="check the installed bittensor SDK still has every call we use")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("doctor", help="print the sandbox isolation in force here (exit 0 only if every layer holds)")
    s.add_argument("--gpu", action="store_true", help="also require the NVIDIA devices inside the sandbox")
    s.add_argument("--json", action="store_true")

    m = sub.add_parser("miner", help="miner tools").add_subparsers(dest="miner_cmd", required=True)
    s = m.add_parser("init", help="scaffold a bundle that passes verify")
    s.add_argument("--slot", required=True, help="slot id, e.g. norm.rmsnorm (`cacheon slots` lists them)")
    s.add_argument("dir", help="directory to create (must be empty or absent)")
    s.add_argument("--force", action="store_true", help="overwrite a non-empty directory")
    s.add_argument("--lang", choices=["triton", "cuda"], default="triton", help="kernel language of the scaffold")
    s.add_argument("--json", action="store_true")

    # Each package adds its own verbs: register(sub, groups) calls add_parser(...) and
    # set_defaults(handler=fn) where fn(args) -> exit code.
    for package in EXTENSIONS:
        package.register(sub, {"miner": m})
    return show_defaults(p)


EXTENSIONS = (
    miner_commands,
    validator_commands,
    demo,
    chain_commands,
    seams_commands,
    arena_commands,
    native_commands,
    release_commands,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from cacheon_subnet import log, progress

    log.route_cli(level=args.log_level, to=args.log_to)
    progress.set_quiet(args.quiet)
    name = args.cmd
    for attr in ("miner_cmd",):
        if getattr(args, attr, None):
            name = f"{name} {getattr(args, attr)}"
    fn = getattr(args, "handler", None) or _COMMANDS.get(name)
    if fn is None:
        parser.error(f"unknown command {name!r}")
    try:
        return fn(args)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:  # e.g. `cacheon slots --json | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    except BundleError as e:  # a missing path is usage (2), like every verb; a bad bundle is FAIL (1)
        print(f"error: {e}", file=sys.stderr)
        return Exit.USAGE if e.rule == "not-found" else Exit.FAIL
    except CacheonError as e:
        print(f"error: {e}", file=sys.stderr)
        return Exit.USAGE


def run() -> NoReturn:
    """The `cacheon` console script: main() and a quick exit (procs.exit_now: no ~0.3 s of
    interpreter teardown after torch, on every command)."""
    from cacheon_subnet.procs import run_main

    run_main(main)


if __name__ == "__main__":
    run()
