"""CLI verbs for the validator: `cacheon status` and `cacheon validator run` (same flags as
neurons/validator.py, which is a thin wrapper around `add_run_args` + `run_from_args`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cacheon_subnet.cliout import PRETTY, Exit, add_log_to, emit, show_defaults
from cacheon_subnet.env import HOME
from cacheon_subnet.errors import CacheonError, UsageError
from cacheon_subnet.validator.run_args import add_run_args  # noqa: F401 - re-exported: callers import the verb's parser from here

if TYPE_CHECKING:
    from cacheon_subnet.validator.run_args import ValidatorArgs

CPU_ARENA_KEYS = {
    "kind",
    "name",
    "tier",
    "cases",
    "budget_s",
    "hard_budget_factor",
    "target_rel_err",
    "max_noise",
    "call_timeout_s",
    "max_case_bytes",
    "min_iters",
    "noise_floor",
    "bias_allowance",
}


def load_qualifier(spec: str) -> Any:
    """--arena: "cpu" (slot-level CPU timing, labelled cpu-timing) or a configs/arena/*.toml.

    A `kind = "gpu"` config needs SGLang and a GPU here; without them we stop with an error rather
    than quietly timing on the CPU, because CPU numbers published as if they were engine
    measurements would crown the wrong kernels.
    (Imported here, not at the top: both arenas import torch, and `cacheon --help` should not.)"""
    from arena import qualifier_from_config
    from arena.cpu.qualifier import CpuQualifier

    if spec == "cpu":
        return CpuQualifier()
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"--arena {spec!r}: not 'cpu' and no such file (expected configs/arena/<name>.toml)")
    try:
        conf = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--arena {path}: not valid TOML ({exc})") from None
    kind = conf.get("kind")
    if kind == "cpu":
        unknown = set(conf) - CPU_ARENA_KEYS
        if unknown:
            raise UsageError(f'--arena {path}: unknown keys {sorted(unknown)} for kind = "cpu"')
        opts = {k: v for k, v in conf.items() if k not in ("kind", "name")}
        return CpuQualifier(**opts)
    if kind == "gpu":
        try:
            return qualifier_from_config(path)
        except (CacheonError, RuntimeError) as exc:  # a bad arena config, or no SGLang / GPU here
            raise UsageError(f"--arena {path}: {exc}") from None
    raise UsageError(f'--arena {path}: kind = {kind!r}; expected "gpu" or "cpu"')


def fan_out(qualifier: Any, gpus: str | None, workers: str | None) -> Any:
    """--arena-gpus: one arena per GPU of this host; --arena-workers: Ray workers (one GPU per job).
    Either way the loop submits jobs and writes every result itself (validator/dispatch.py)."""
    if gpus and workers:
        raise UsageError("--arena-gpus and --arena-workers exclude each other (Ray assigns the GPUs of its workers)")
    if (gpus or workers) and getattr(qualifier, "label", "") == "cpu-timing":
        raise UsageError("--arena-gpus / --arena-workers need a GPU arena config (--arena configs/arena/<name>.toml)")
    if gpus:
        from cacheon_subnet.validator.dispatch import LocalPool

        devices = tuple(g.strip().replace("+", ",") for g in gpus.split(",") if g.strip())
        if not devices or not all(d.replace(",", "").isdigit() for d in devices):
            raise UsageError(f"--arena-gpus {gpus!r}: expected GPU indices like 0,1,2,3 (TP groups as 0+1,2+3)")
        return LocalPool(qualifier, devices)
    if workers:
        from cacheon_subnet.validator.ray_pool import RayPool, RayUnavailable

        engine = getattr(getattr(qualifier, "config", None), "engine", None)
        try:  # a TP arena asks Ray for tp_size GPUs per job
            return RayPool(qualifier, workers, num_gpus=float(engine.tp_size) if engine else 1.0)
        except (RayUnavailable, ValueError) as exc:
            raise UsageError(str(exc)) from None
    return qualifier


def run_from_args(args: argparse.Namespace) -> int:
    from cacheon_subnet import fdbudget, lifecycle
    from cacheon_subnet.chain import LocalChain, make_backend
    from cacheon_subnet.log import get_logger
    from cacheon_subnet.validator import startup
    from cacheon_subnet.validator.loop import Validator
    from cacheon_subnet.validator.run_args import ChainKind, ValidatorArgs

    a = ValidatorArgs.from_namespace(args)  # the one read of the namespace
    log = get_logger("cacheon.validator.startup", netuid=a.netuid)
    fdbudget.log_budget(log)  # soft RLIMIT_NOFILE up to the hard limit: a reserve for the work itself
    local = startup.is_local(a.chain, a.subtensor_network)
    try:
        startup.check_sandbox(local, log)
        arena = startup.arena_spec(a.arena, local, a.subtensor_network)
        qualifier = startup.check_timing(load_qualifier(arena), local, a.allow_cpu_timing, a.subtensor_network)
        if a.chain == ChainKind.LOCAL:
            if not a.local_chain:
                raise UsageError("--chain local needs --local-chain PATH")
            backend: Any = LocalChain.open(a.local_chain)
            hotkey = a.wallet_hotkey
        else:
            backend = make_backend(
                "bittensor",
                network=a.subtensor_network,
                wallet_name=a.wallet_name,
                wallet_hotkey=a.wallet_hotkey,
                wallet_path=a.wallet_path,
            )
            hotkey = backend.hotkey
        gpu_arena = not str(getattr(qualifier, "label", "")).startswith("cpu-timing")
        arena_config = getattr(qualifier, "config", None) if gpu_arena else None
        qualifier = fan_out(qualifier, a.arena_gpus, a.arena_workers)
        ident = startup.identity()
        log.info("validator.identity", **ident)
        compat = startup.check_compat(a.chain, gpu_arena)
        reg = startup.check_registration(backend, a.netuid, hotkey)
        floor = startup.check_version_key(backend, a.netuid)
    except startup.StartupError as exc:
        log.error("validator.startup_failed", error=str(exc)[:2000])
        raise UsageError(f"start-up check failed: {exc}") from None
    net = startup.network_key(a.chain, a.subtensor_network, a.local_chain)
    state_dir = a.state_dir or startup.default_state_dir(net, a.netuid, hotkey)
    startup.deny_to_children(state_dir, a.wallet_path)
    try:
        config = a.config(hotkey, state_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from cacheon_subnet import __spec_version__

    log.info(
        "validator.config",
        chain=a.chain.value,
        network=a.subtensor_network,
        local=local,
        netuid=a.netuid,
        hotkey=hotkey,
        uid=reg["uid"],
        stake=reg["stake"],
        state_dir=str(state_dir),
        arena=arena,
        arena_id=getattr(qualifier, "arena_id", "?"),
        label=getattr(qualifier, "label", "?"),
        allow_cpu_timing=a.allow_cpu_timing,
        screen_device=a.screen_device,
        interval_s=a.interval_s,
        once=a.once,
        dry_run=a.dry_run,
        spec_version=__spec_version__,
        chain_version_key=floor,
        **compat,
    )
    stop = threading.Event()
    install_signal_handlers(stop)
    # The run lock, then a crashed run's leftovers reaped (Validator.__init__): before any engine,
    # the start-up warm's included, touches the GPU; the warm engine is leased like any other.
    validator = Validator(config, backend, qualifier, screener=_screener(arena, config))
    board = None
    try:
        if a.metrics_port is not None:
            port = validator.metrics.serve(a.metrics_port, a.metrics_addr)
            validator.log.info("metrics.serving", addr=a.metrics_addr, port=port)
        if arena_config is not None and not a.no_warm and not a.arena_workers:
            if _warm_seeds(arena_config, log) == "interrupted":
                return Exit.OK
        if a.leaderboard:
            from cacheon_subnet.validator.background import pinned

            with pinned(validator.cpus.screen):  # the page's process and its restarts off the arena's cores
                board = _start_leaderboard(a, state_dir, backend, hotkey)  # the dir the loop writes
        if a.once:
            summary = validator.run_once()
            print(PRETTY.dumps({**summary.__dict__, "idle": summary.idle, "ok": summary.ok}))
            if not summary.ok:
                print("pass failed: " + "; ".join(summary.problems), file=sys.stderr)
            return Exit.OK if summary.ok else Exit.FAIL
        validator.run_forever(stop)
        return Exit.OK
    finally:
        if board is not None:
            board.stop()
        validator.metrics.stop()
        validator.close()
        lifecycle.kill_live(wait=True)  # nothing sandboxed outlives the validator


def _warm_seeds(arena_config: Any, log: Any) -> str:
    """Empty seed caches (a fresh install, a pin move): one pristine engine warms them before the
    first pass, so the first verdicts start warm. A failure is logged, never fatal: engines then
    start cold (slower, same verdicts)."""
    from arena.engine.warm import maybe_warm
    from cacheon_subnet import lifecycle

    try:
        res = maybe_warm(arena_config)
    except lifecycle.Interrupted:
        return "interrupted"
    except Exception as exc:  # noqa: BLE001 - an optimisation: never stop the validator for it
        log.warning("arena.warm_failed", error=str(exc)[:1000])
        return "failed"
    if res is None:
        return "skipped"
    event = log.info if res.ok else log.warning
    event(
        "arena.warmed" if res.ok else "arena.warm_failed",
        wall_s=round(res.wall_s, 1),
        new_files=res.files_after - res.files_before,
        error=res.error,
    )
    return "warmed" if res.ok else "failed"


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM/SIGINT (pm2 stop/restart): stop in-flight arenas now (kill their groups), end the
    pass without recording their verdicts, exit within pm2's kill timeout. A second signal is
    not needed and changes nothing."""
    from cacheon_subnet import lifecycle

    def handler(signum: int, _frame: Any) -> None:
        if not stop.is_set():
            stop.set()
            lifecycle.request_shutdown()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def _announce_address(a: ValidatorArgs, bound_port: int | None = None) -> tuple[str, int] | None:
    """(ip, port) to announce, None for 'none'; UsageError when it cannot be known. Without
    --leaderboard-announce the listen address is announced, with the port actually bound."""
    import ipaddress

    from cacheon_subnet.validator.web.server import LeaderboardError, parse_listen

    text = a.leaderboard_announce or a.leaderboard or ""
    if text == "none":
        return None
    try:
        ip, port = parse_listen(text)
        addr = ipaddress.ip_address(ip)
        if not a.leaderboard_announce and bound_port:
            port = bound_port
    except (LeaderboardError, ValueError):
        raise UsageError(
            f"--leaderboard-announce {text!r}: expected IP:PORT with a literal IPv4/IPv6 address "
            "(the chain stores an IP, not a host name), or 'none'"
        ) from None
    if addr.is_unspecified or port == 0:
        raise UsageError(
            f"--leaderboard {a.leaderboard}: cannot announce {text!r} (a wildcard address or port "
            "0); pass --leaderboard-announce PUBLIC_IP:PORT, or 'none'"
        )
    return str(addr), port


def _start_leaderboard(a: ValidatorArgs, state_dir: Path, backend: Any, hotkey: str) -> Any:
    """Serve the state dir's snapshot from a web process of its own (web/supervisor.py: its own uid,
    bounded connections; restarted if it dies, stopped with the validator), then announce it (a
    chain error is logged: the validator keeps validating without an announced endpoint)."""
    from cacheon_subnet.chain import ChainError
    from cacheon_subnet.chain.endpoints import announce
    from cacheon_subnet.log import get_logger
    from cacheon_subnet.validator.web.server import LeaderboardError, parse_listen
    from cacheon_subnet.validator.web.supervisor import WebSupervisor

    try:
        host, port = parse_listen(a.leaderboard or "")
    except LeaderboardError as exc:
        raise UsageError(f"--leaderboard: {exc}") from None
    if port:
        _announce_address(a)  # a bad announce address is a usage error before anything starts
    try:
        board = WebSupervisor(state_dir, host, port).start()
    except (LeaderboardError, ValueError) as exc:
        raise UsageError(f"--leaderboard: {exc}") from None
    try:
        where = _announce_address(a, board.port)
    except UsageError:
        board.stop()
        raise
    log = get_logger("cacheon.validator.web")
    if where is not None:
        try:
            served = announce(backend, a.netuid, hotkey, *where)
            log.info("web.announced" if served else "web.announce_unchanged", ip=where[0], port=where[1])
        except ChainError as exc:
            log.warning("web.announce_failed", error=str(exc), ip=where[0], port=where[1])
    return board


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """`cacheon leaderboard`: serve an existing state dir read-only (beside or without its validator),
    from the same bounded web process of its own as `validator run --leaderboard`."""
    from cacheon_subnet.validator.state import DB_NAME
    from cacheon_subnet.validator.web.server import LeaderboardError, parse_listen
    from cacheon_subnet.validator.web.supervisor import serve_forever

    args.state_dir = _status_dir(args.state_dir)
    if not (Path(args.state_dir) / DB_NAME).is_file():
        raise UsageError(f"--state-dir {args.state_dir}: no {DB_NAME} there (run the validator first)")
    try:
        host, port = parse_listen(args.listen)
        serve_forever(args.state_dir, host, port)
    except (LeaderboardError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return Exit.OK


def _screener(arena_path: str, config: Any) -> Any:
    """With a GPU arena, screening verifies the token counts that arena runs (verify/shapes.py);
    None (the loop's default screener) for the CPU arena."""
    if arena_path == "cpu" or not Path(arena_path).is_file():
        return None
    from cacheon_subnet.validator.screen import VerifyScreener
    from cacheon_subnet.verify.shapes import from_arena_config

    try:
        from arena.config import load_config
    except ImportError:
        return None  # load_qualifier already refused a GPU config without the arena package
    try:
        shapes = from_arena_config(load_config(arena_path))
    except CacheonError:
        return None  # a kind = "cpu" config (slot-level timing): the tier cases are its shapes
    return VerifyScreener(device=config.screen_device, max_cases=config.verify_max_cases, arena=shapes)


def cmd_status(args: argparse.Namespace) -> int:
    from cacheon_subnet.validator import status

    try:
        report = status.collect(_status_dir(args.state_dir))
    except CacheonError as exc:
        raise UsageError(str(exc)) from None
    check = getattr(args, "check", False)
    problems = status.health(report, args.max_pass_age) if check else []
    if args.json and check:
        report = {**report, "health": {"healthy": not problems, "reasons": problems}}
    health = "\n\nhealth: " + ("OK" if not problems else "UNHEALTHY\n" + "\n".join(f"  - {p}" for p in problems))
    emit(args, report, lambda: status.render(report) + (health if check else ""))
    return Exit.FAIL if problems else Exit.OK


def _status_args(s: argparse.ArgumentParser) -> None:
    from cacheon_subnet.validator.status import DEFAULT_MAX_PASS_AGE_MIN

    s.add_argument(
        "--state-dir",
        dest="state_dir",
        default=None,
        help=f"default: the one dir under ${HOME.name}/validator/<network>/<netuid>/<hotkey>",
    )
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--check",
        action="store_true",
        help="health check: exit 1 with the reasons when the validator is unhealthy "
        "(no completed pass for --max-pass-age minutes, last pass failed, set_weights "
        "refused or failing, repeated chain errors); exit 0 when healthy",
    )
    s.add_argument(
        "--max-pass-age",
        dest="max_pass_age",
        type=float,
        default=DEFAULT_MAX_PASS_AGE_MIN,
        metavar="MIN",
        help=f"with --check: minutes without a completed pass that count as "
        f"unhealthy (default {DEFAULT_MAX_PASS_AGE_MIN:g})",
    )


def _status_dir(given: str | None) -> str:
    """--state-dir, else the one validator state dir under $CACHEON_HOME/validator."""
    if given:
        return given
    from cacheon_subnet.validator.startup import cacheon_home, existing_state_dirs

    found = existing_state_dirs()
    if len(found) == 1:
        return str(found[0])
    root = cacheon_home() / "validator"
    if not found:
        raise UsageError(f"no validator state dir under {root}; pass --state-dir DIR")
    raise UsageError(
        f"{len(found)} validator state dirs under {root}; pick one with --state-dir: " + ", ".join(str(f) for f in found)
    )


def register(sub: Any, groups: dict[str, Any]) -> None:
    """cli.EXTENSIONS hook."""
    s = sub.add_parser("status", help="the validator's queue, verdicts, crowns and weights")
    _status_args(s)
    s.set_defaults(handler=cmd_status)
    v = sub.add_parser("validator", help="validator tools").add_subparsers(dest="validator_cmd", required=True)
    r = v.add_parser("run", help="run the validator loop (same flags as neurons/validator.py)")
    add_run_args(r)
    r.set_defaults(handler=run_from_args)
    s = v.add_parser("status", help="same as `cacheon status`")
    _status_args(s)
    s.set_defaults(handler=cmd_status)
    groups["validator"] = v
    s = sub.add_parser("leaderboard", help="serve a validator state dir's leaderboard page and JSON API (read-only)")
    s.add_argument(
        "--state-dir",
        dest="state_dir",
        default=None,
        help=f"default: the one dir under ${HOME.name}/validator/<network>/<netuid>/<hotkey>",
    )
    s.add_argument("--listen", default="127.0.0.1:8090", metavar="HOST:PORT", help="bind address (default 127.0.0.1:8090)")
    s.set_defaults(handler=cmd_leaderboard)


def main(argv: list[str] | None = None) -> int:
    """Entry point for neurons/validator.py."""
    p = argparse.ArgumentParser(prog="neurons/validator.py", description="Cacheon subnet validator")
    add_run_args(p)
    p.add_argument("--log-level", default=None, help="debug|info|warning|error")
    add_log_to(p)
    args = show_defaults(p).parse_args(argv)
    from cacheon_subnet import log

    log.route_cli(level=args.log_level, to=args.log_to)
    try:
        return run_from_args(args)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except CacheonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.USAGE
