"""What a validator run is parameterised by: flags -> `ValidatorConfig` (commands.py), nothing
else. Its own module so the loop and its wiring both read it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cacheon_subnet.netpolicy import UrlPolicy
from cacheon_subnet.scoring.settle import SpeedPolicy
from cacheon_subnet.scoring.weights import WeightPolicy
from cacheon_subnet.validator.fetch import FetchPolicy
from cacheon_subnet.validator.intake import IntakePolicy
from cacheon_subnet.validator.publish import PublishPolicy


@dataclass(frozen=True)
class ValidatorConfig:
    """Everything a validator run is parameterised by (flags -> this; nothing else)."""

    netuid: int
    hotkey: str
    state_dir: Path
    interval_s: float = 60.0
    screen_device: str = "cpu"
    verify_max_cases: int | None = None
    targets: tuple[str, ...] = ()  # empty: every slot in the catalog
    fetch: FetchPolicy = field(default_factory=FetchPolicy)
    intake: IntakePolicy = field(default_factory=IntakePolicy)
    speed: SpeedPolicy = field(default_factory=SpeedPolicy)
    weights: WeightPolicy = field(default_factory=WeightPolicy)
    publish: PublishPolicy = field(default_factory=PublishPolicy)
    max_attempts: int = 4  # transient failures per stage before giving up
    retry_base_s: float = 30.0
    retry_max_s: float = 1800.0
    chain_backoff_base_s: float = 2.0  # between passes after a chain failure, doubling
    chain_backoff_max_s: float = 300.0
    chain_call_retries: int = 2  # in-place retries of one backend call before the pass backs off
    chain_call_retry_s: float = 0.5
    settle_hold_blocks: int = 300  # how long an earlier in-progress commit may hold a settlement
    # a NO_DECISION is measured again this often. 2, not 1: the consensus simulation (docs/benchmarks.md
    # "Validators that agree", 2026-12-05) has every validator crown from +1.35 % (MoE) / +1.20 % (dense)
    # instead of +1.75 % / +1.80 % with 1, for ~13 / ~6 more arena runs per 100 near-bar measurements;
    # 3 buys the dense arena nothing more
    max_remeasure: int = 2
    max_items_per_pass: int = 16  # per stage, so settlement and weights are never starved
    fetch_concurrency: int = 4
    url_policy: UrlPolicy | None = None  # None: the backend's own (loopback only on a local chain)
    overlap: bool | None = None  # screens and arena in background threads; None: unless cpu-timing
    screen_workers: int | None = None  # screens at once beside the arena; None: one per screening core
    screen_cpu_share: float = 0.25  # of this host's cores, pinned to screening (the arena keeps the rest)
    busy_poll_s: float = 10.0  # longest wait between passes while a pool that never wakes us (Ray) has work

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        if self.netuid < 0 or not self.hotkey:
            raise ValueError(f"ValidatorConfig: netuid must be >= 0 and hotkey non-empty ({self.netuid}, {self.hotkey!r})")
        if self.max_attempts < 1 or self.interval_s < 0 or self.max_items_per_pass < 1:
            raise ValueError("ValidatorConfig: max_attempts and max_items_per_pass >= 1, interval_s >= 0")
        workers_ok = self.screen_workers is None or self.screen_workers >= 1
        if not workers_ok or not 0 <= self.screen_cpu_share < 1 or self.busy_poll_s <= 0:
            raise ValueError(
                f"ValidatorConfig: screen_workers >= 1 or None ({self.screen_workers}), screen_cpu_share in "
                f"[0, 1) ({self.screen_cpu_share}), busy_poll_s > 0 ({self.busy_poll_s})"
            )

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "bundles"
