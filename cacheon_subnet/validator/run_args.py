"""`validator run`'s flags, read once: the argparse namespace (commands.add_run_args) -> a typed,
frozen `ValidatorArgs`; the run's `ValidatorConfig` is built from it. The parser (`add_run_args`) lives
here too, so a flag and its reader sit in one module.

Why: the run read its namespace in a dozen places, some with getattr and a default of their
own, so a flag's default could differ between the parser and its reader. Here every flag is
read in one place with the type the parser gives it, and nothing else touches the namespace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from cacheon_subnet.env import HOME, LOCAL_CHAIN
from cacheon_subnet.validator.config import ValidatorConfig
from cacheon_subnet.validator.startup import CPU_OPT_IN_LABEL


class ChainKind(StrEnum):
    """--chain: the embedded LocalChain file, or a subtensor through the bittensor SDK."""

    LOCAL = "local"
    BITTENSOR = "bittensor"


@dataclass(frozen=True)
class ValidatorArgs:
    netuid: int
    chain: ChainKind = ChainKind.BITTENSOR
    subtensor_network: str = "finney"
    wallet_name: str = "default"
    wallet_hotkey: str = "default"
    wallet_path: str | None = None
    local_chain: str | None = None
    state_dir: Path | None = None
    arena: str | None = None
    allow_cpu_timing: bool = False
    screen_device: str = "cpu"
    interval_s: float = 60.0
    once: bool = False
    dry_run: bool = False
    no_warm: bool = False
    arena_gpus: str | None = None
    arena_workers: str | None = None
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    verify_max_cases: int | None = None
    screen_workers: int | None = None  # None: auto (stages/workers.screen_worker_count)
    screen_cpu_share: float = 0.25
    overlap: bool | None = None  # --no-overlap: False; None: overlap unless cpu-timing
    leaderboard: str | None = None
    leaderboard_announce: str | None = None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> ValidatorArgs:
        """The namespace add_run_args parsed (every dest is there: the parser sets its defaults)."""
        return cls(
            netuid=ns.netuid,
            chain=ChainKind(ns.chain),
            subtensor_network=ns.subtensor_network,
            wallet_name=ns.wallet_name,
            wallet_hotkey=ns.wallet_hotkey,
            wallet_path=ns.wallet_path,
            local_chain=ns.local_chain,
            state_dir=Path(ns.state_dir) if ns.state_dir else None,
            arena=ns.arena,
            allow_cpu_timing=ns.allow_cpu_timing,
            screen_device=ns.screen_device,
            interval_s=ns.interval,
            once=ns.once,
            dry_run=ns.dry_run,
            no_warm=ns.no_warm,
            arena_gpus=ns.arena_gpus,
            arena_workers=ns.arena_workers,
            metrics_port=ns.metrics_port,
            metrics_addr=ns.metrics_addr,
            verify_max_cases=ns.verify_max_cases,
            screen_workers=ns.screen_workers,
            screen_cpu_share=ns.screen_cpu_share,
            overlap=ns.overlap,
            leaderboard=ns.leaderboard,
            leaderboard_announce=ns.leaderboard_announce,
        )

    def config(self, hotkey: str, state_dir: Path) -> ValidatorConfig:
        """The loop's config for this run; ValueError when a value is out of range."""
        config = ValidatorConfig(
            netuid=self.netuid,
            hotkey=hotkey,
            state_dir=state_dir,
            interval_s=self.interval_s,
            screen_device=self.screen_device,
            verify_max_cases=self.verify_max_cases,
            overlap=self.overlap,
            screen_workers=self.screen_workers,
            screen_cpu_share=self.screen_cpu_share,
        )
        if self.dry_run:
            config = replace(config, publish=replace(config.publish, dry_run=True))
        return config


def _screen_workers(raw: str) -> int | None:
    """`auto` (None: one per screening core) or a whole number >= 1 (ValidatorConfig checks it)."""
    if raw.strip().lower() == "auto":
        return None
    try:
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r}: a whole number or auto") from None


def add_run_args(p: argparse.ArgumentParser) -> None:
    """The validator flags, in the conventions Bittensor operators expect."""
    p.add_argument("--netuid", type=int, required=True, help="the subnet's uid on the chain (required)")
    p.add_argument(
        "--subtensor.network",
        dest="subtensor_network",
        default="finney",
        help="finney | test | local | ws://... (bittensor chain only)",
    )
    p.add_argument("--wallet.name", dest="wallet_name", default="default", help="bittensor wallet (coldkey) name")
    p.add_argument(
        "--wallet.hotkey",
        dest="wallet_hotkey",
        default="default",
        help="wallet hotkey name; on --chain local it is the hotkey itself",
    )
    p.add_argument(
        "--wallet.path",
        dest="wallet_path",
        default=None,
        help="wallets directory (default: the SDK's, ~/.bittensor/wallets)",
    )
    p.add_argument(
        "--chain",
        choices=("local", "bittensor"),
        default="bittensor",
        help="bittensor: the real chain (--subtensor.network); local: a LocalChain SQLite file (--local-chain)",
    )
    p.add_argument(
        "--local-chain",
        dest="local_chain",
        default=LOCAL_CHAIN.get(),
        help=f"LocalChain SQLite file (--chain local; env {LOCAL_CHAIN.name})",
    )
    p.add_argument(
        "--state-dir",
        dest="state_dir",
        default=None,
        help=f"default ${HOME.name}/validator/<network>/<netuid>/<hotkey> ({HOME.name}: {HOME.default})",
    )
    p.add_argument(
        "--arena",
        default=None,
        help='configs/arena/<name>.toml (kind = "gpu"; required on a '
        'non-local chain) or "cpu" (the default on a local chain)',
    )
    p.add_argument(
        "--allow-cpu-timing",
        dest="allow_cpu_timing",
        action="store_true",
        help="on a non-local chain, publish weights from CPU timing (host-timed slot calls, advisory, "
        f"not engine measurements); every record is labelled {CPU_OPT_IN_LABEL!r}",
    )
    p.add_argument(
        "--screen-device", dest="screen_device", default="cpu", help="device verify screens bundles on: cpu or cuda"
    )
    p.add_argument("--interval", type=float, default=60.0, help="seconds between passes")
    p.add_argument(
        "--once",
        action="store_true",
        help="one pass, print its summary as JSON, exit 0 if it did its job, 1 if it failed "
        "(chain error, weights refused/failed, or every item a stage tried ended in an error)",
    )
    p.add_argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="everything (checks, sync, fetch, verify, arena, settle) but set_weights: the vector is logged",
    )
    p.add_argument(
        "--no-warm",
        dest="no_warm",
        action="store_true",
        help="skip the start-up warm of the engines' JIT seed caches (done only when they are empty: "
        "one pristine engine, ~2 min on the H200; see `cacheon arena warm`)",
    )
    p.add_argument(
        "--arena-gpus",
        dest="arena_gpus",
        default=None,
        help="GPUs of this host, one arena each: 0,1,2,3 (or TP groups 0+1,2+3); default: one arena",
    )
    p.add_argument(
        "--arena-workers",
        dest="arena_workers",
        default=None,
        help="qualify on a Ray cluster: ray://HOST:PORT or auto (optional extra `ray`)",
    )
    p.add_argument(
        "--metrics-port",
        dest="metrics_port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on PORT (off by default; see docs/observability.md)",
    )
    p.add_argument(
        "--metrics-addr",
        dest="metrics_addr",
        default="127.0.0.1",
        help="address the metrics endpoint binds (default 127.0.0.1)",
    )
    p.add_argument(
        "--verify-max-cases",
        dest="verify_max_cases",
        type=int,
        default=None,
        help="screen with at most N shapes per dtype (a quick local trial; default: all)",
    )
    p.add_argument(
        "--screen-workers",
        dest="screen_workers",
        type=_screen_workers,
        default=None,
        metavar="N|auto",
        help="screens run at once beside the arena, each a sandboxed worker (default auto: one per core "
        "pinned to screening, e.g. 4 of 16 cores; 1 on hosts under 4 cores and for a GPU screen)",
    )
    p.add_argument(
        "--screen-cpu-share",
        dest="screen_cpu_share",
        type=float,
        default=0.25,
        metavar="F",
        help="share of this host's cores pinned to screening; the arena keeps the rest (default 0.25; "
        "0: no pinning; hosts under 4 cores are never split)",
    )
    p.add_argument(
        "--no-overlap",
        dest="overlap",
        action="store_false",
        default=None,
        help="screen and judge one after the other in the loop's thread (default: screens overlap a GPU "
        "arena; always serial with CPU timing, whose windows a CPU screen would disturb)",
    )
    p.add_argument(
        "--leaderboard",
        metavar="HOST:PORT",
        default=None,
        help="serve the read-only leaderboard page and JSON API on HOST:PORT and announce it on "
        "chain as this hotkey's axon (off by default)",
    )
    p.add_argument(
        "--leaderboard-announce",
        dest="leaderboard_announce",
        metavar="IP:PORT",
        default=None,
        help="the public address to announce (default: the --leaderboard address; required when that "
        "is 0.0.0.0/::/a host name); 'none' serves without announcing",
    )
