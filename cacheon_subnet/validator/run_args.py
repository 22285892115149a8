"""`validator run`'s flags, read once: the argparse namespace (commands.add_run_args) -> a typed,
frozen `ValidatorArgs`; the run's `ValidatorConfig` is built from it.

Why: the run read its namespace in a dozen places, some with getattr and a default of their
own, so a flag's default could differ between the parser and its reader. Here every flag is
read in one place with the type the parser gives it, and nothing else touches the namespace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from cacheon_subnet.validator.config import ValidatorConfig


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
    screen_workers: int = 1
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
