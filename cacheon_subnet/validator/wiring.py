"""Builds a validator's stages from its config and collaborators (the one place that knows
which concrete stage takes which collaborator). loop.Validator owns what this returns.

Why apart from loop.py: the loop reads as the pass (order, errors, summary); which arena path
runs (in this thread or through a pool) and which collaborators each stage gets is decided
here, once, when the validator starts."""

from __future__ import annotations

from dataclasses import dataclass, replace

from cacheon_subnet.netpolicy import UrlPolicy
from cacheon_subnet.records import Qualifier
from cacheon_subnet.validator.chainguard import GuardedChain
from cacheon_subnet.validator.config import ValidatorConfig
from cacheon_subnet.validator.publish import Publisher
from cacheon_subnet.validator.screen import Screener
from cacheon_subnet.validator.stages.dispatch import DispatchStage
from cacheon_subnet.validator.stages.fetch import Fetcher, FetchStage
from cacheon_subnet.validator.stages.items import Archives, Items, RetryPolicy
from cacheon_subnet.validator.stages.pipeline import Pipeline
from cacheon_subnet.validator.stages.ports import ArenaPool, HeadToHead, Log, PairedQualifier, Stage, VerdictCounter
from cacheon_subnet.validator.stages.prune import PruneStage
from cacheon_subnet.validator.stages.qualify import Filing, QualifyStage
from cacheon_subnet.validator.stages.screen import ScreenStage
from cacheon_subnet.validator.stages.settle import PublishStage, SettleStage
from cacheon_subnet.validator.stages.sync import SyncStage
from cacheon_subnet.validator.stages.verify import VerifyStage
from cacheon_subnet.validator.stages.workers import GpuTurn, Workers
from cacheon_subnet.validator.state import StateDB


@dataclass(frozen=True)
class Stages:
    """Every stage of a validator, by name; `order` is what one pass runs."""

    sync: SyncStage
    fetch: FetchStage
    screen: ScreenStage
    verify: VerifyStage
    judge: QualifyStage | DispatchStage  # the arena in this thread, or through a pool
    pipeline: Pipeline
    settle: SettleStage
    publish: PublishStage
    prune: PruneStage

    @property
    def order(self) -> tuple[Stage, ...]:
        return (self.sync, self.fetch, self.screen, self.pipeline, self.settle, self.publish, self.prune)


@dataclass(frozen=True)
class Collaborators:
    """What the stages are built from besides the config (made by loop.Validator)."""

    db: StateDB
    chain: GuardedChain
    urls: UrlPolicy
    qualifier: Qualifier | ArenaPool
    screener: Screener
    workers: Workers
    verdicts: VerdictCounter
    log: Log
    targets: tuple[str, ...]
    fetcher: Fetcher | None = None


def build_stages(cfg: ValidatorConfig, w: Collaborators) -> Stages:
    db, chain, log, n = w.db, w.chain, w.log, cfg.max_items_per_pass
    items = Items(db, log, RetryPolicy(cfg.max_attempts, cfg.retry_base_s, cfg.retry_max_s))
    archives = Archives(db, cfg.cache_dir, log)
    turn = GpuTurn(cfg.screen_device.startswith("cuda"), w.workers.screens, w.workers.pool)
    screen_cpus = w.workers.cpus.screen
    verify = VerifyStage(
        db, items, archives, w.screener, log, screens=w.workers.screens, turn=turn, device=cfg.screen_device, max_items=n
    )
    judge = _judge(cfg, w, items, archives, turn)
    publisher = Publisher(db, chain, cfg.netuid, cfg.hotkey, w.targets, cfg.weights, cfg.publish)
    return Stages(
        sync=SyncStage(db, chain, cfg.netuid, cfg.intake, w.urls, log),
        fetch=FetchStage(
            db,
            items,
            replace(cfg.fetch, urls=w.urls),
            cfg.cache_dir,
            log,
            fetcher=w.fetcher,
            cpus=screen_cpus,
            max_items=n,
            concurrency=cfg.fetch_concurrency,
        ),
        screen=ScreenStage(db, items, archives, log, cpus=screen_cpus, max_items=n),
        verify=verify,
        judge=judge,
        pipeline=Pipeline(verify, judge, w.workers, cfg.busy_poll_s),
        settle=SettleStage(db, chain, cfg.speed, log, hold_blocks=cfg.settle_hold_blocks, max_remeasure=cfg.max_remeasure),
        publish=PublishStage(publisher, log),
        prune=PruneStage(db, cfg.cache_dir, log),
    )


def _judge(
    cfg: ValidatorConfig, w: Collaborators, items: Items, archives: Archives, turn: GpuTurn
) -> QualifyStage | DispatchStage:
    """Through a pool when there is one (our own background arena, or one handed in), else the
    qualifier in the loop's thread."""
    filing = Filing(w.db, w.chain, w.log)
    pool, q = w.workers.pool, w.qualifier
    if pool is not None:
        pair = isinstance(pool, HeadToHead) and pool.head_to_head
        return DispatchStage(w.db, w.chain, items, archives, filing, pool, w.verdicts, w.log, head_to_head=pair, turn=turn)
    if isinstance(q, ArenaPool):  # start_workers always keeps a pool handed in: a wiring bug
        raise TypeError(f"{type(q).__name__} is a pool of arenas, but no pool was started for it")
    paired = q if isinstance(q, PairedQualifier) and q.head_to_head else None
    return QualifyStage(
        w.db, w.chain, items, archives, filing, q, w.verdicts, w.log, paired=paired, max_items=cfg.max_items_per_pass
    )
