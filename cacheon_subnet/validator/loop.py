"""The validator loop: sync -> intake -> fetch -> screen -> verify -> qualify -> settle -> publish.

Verify and qualify overlap (issue 30 item 3): unless the qualifier times on this host's CPU
(cpu-timing), screens run in background threads (validator/background.py) and the arena in its
own (dispatch.BackgroundArena), so a contribution in the arena never holds the queue's screening
and a long screen never leaves the GPU idle; the loop thread only dispatches, collects and writes.
`run_once()` drains what it started (one pass does all the work it can: `--once`);
`run_forever` passes do not wait, they wake when a background job finishes. Every item of
every stage runs under `_item`: an error there (a resource error such as EMFILE, ENOMEM or
ENOSPC included: cacheon_subnet/resources.py) is that item's transient error, backed off and
retried a bounded number of times, never a crashed pass; a resource error outside any item
ends only its stage.

Every stage reads its work from the state DB and ends each item in one transaction, so the
loop is resumable from any kill -9: nothing is held only in memory between stages. Chain
failures (anything the backend raises) are logged to the DB and backed off exponentially with
jitter (cacheon_subnet.retry, the one backoff rule); work that needs no chain (fetch, screen,
verify) still proceeds during an outage. Every pass ends by writing its outcome to the state DB
(`last_pass_*`, read by `cacheon status --check`) and to the Prometheus metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from cacheon_subnet import lifecycle
from cacheon_subnet.bundle import Bundle
from cacheon_subnet.chain.backend import ChainBackend
from cacheon_subnet.log import get_logger
from cacheon_subnet.netpolicy import UrlPolicy, policy_for_backend
from cacheon_subnet.resources import describe, is_resource_error
from cacheon_subnet.retry import backoff_s
from cacheon_subnet.scoring.settle import Crown, ScoringError, SpeedPolicy
from cacheon_subnet.scoring.weights import WeightPolicy
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.background import ScreenPool, pinned, split_cpus
from cacheon_subnet.validator.chainguard import ChainDown, GuardedChain
from cacheon_subnet.validator.copies import settle_copy
from cacheon_subnet.validator.dispatch import BackgroundArena
from cacheon_subnet.validator.fetch import (
    FetchError,
    FetchPolicy,
    clear_partials,
    fetch_bundle,
    guarded_session,
    load_cached,
)
from cacheon_subnet.validator.intake import IntakePolicy, intake
from cacheon_subnet.validator.metrics import Metrics
from cacheon_subnet.validator.publish import Publisher, PublishPolicy
from cacheon_subnet.validator.qualify_result import Qualifier
from cacheon_subnet.validator.qualify_stage import QualifyStages
from cacheon_subnet.validator.screen import Screener, VerifyScreener, static_screen
from cacheon_subnet.validator.state import Contribution, StateDB, acquire_run_lock
from cacheon_subnet.validator.storable import storable
from cacheon_subnet.validator.verify_stage import VerifyStages

Fetcher = Callable[[str, str, Path, FetchPolicy, aiohttp.ClientSession], Awaitable[Path]]


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
    max_remeasure: int = 1
    max_items_per_pass: int = 16  # per stage, so settlement and weights are never starved
    fetch_concurrency: int = 4
    url_policy: UrlPolicy | None = None  # None: the backend's own (loopback only on a local chain)
    overlap: bool | None = None  # screens and arena in background threads; None: unless cpu-timing
    screen_workers: int = 1  # screens at once beside the arena (each a sandboxed worker)
    screen_cpu_share: float = 0.25  # of this host's cores, pinned to screening (the arena keeps the rest)
    busy_poll_s: float = 10.0  # longest wait between passes while a pool that never wakes us (Ray) has work

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        if self.netuid < 0 or not self.hotkey:
            raise ValueError(f"ValidatorConfig: netuid must be >= 0 and hotkey non-empty ({self.netuid}, {self.hotkey!r})")
        if self.max_attempts < 1 or self.interval_s < 0 or self.max_items_per_pass < 1:
            raise ValueError("ValidatorConfig: max_attempts and max_items_per_pass >= 1, interval_s >= 0")
        if self.screen_workers < 1 or not 0 <= self.screen_cpu_share < 1 or self.busy_poll_s <= 0:
            raise ValueError(
                f"ValidatorConfig: screen_workers >= 1 ({self.screen_workers}), screen_cpu_share in "
                f"[0, 1) ({self.screen_cpu_share}), busy_poll_s > 0 ({self.busy_poll_s})"
            )

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "bundles"


@dataclass(frozen=True)
class PassSummary:
    block: int | None = None
    intake: int = 0
    moved: dict[str, int] = field(default_factory=dict)  # stage -> items advanced
    settled: tuple[str, ...] = ()
    crowns_changed: tuple[str, ...] = ()
    weights: str | None = None
    chain_error: str | None = None
    active: int = 0  # contributions not yet terminal
    unsettled: int = 0  # targets with unsettled evidence
    next_delay_s: float = 0.0
    failed: dict[str, int] = field(default_factory=dict)  # stage -> items that ended in an error this pass
    problems: tuple[str, ...] = ()  # why this pass counts as failed (empty: it did its job)
    duration_s: float = 0.0
    in_flight: int = 0  # screens and arena jobs still running in the background

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def idle(self) -> bool:
        """No work left that the loop could do without new commitments."""
        return self.active == 0 and self.unsettled == 0 and self.chain_error is None


class Validator(VerifyStages, QualifyStages):
    def __init__(
        self,
        config: ValidatorConfig,
        backend: ChainBackend,
        qualifier: Qualifier,
        *,
        screener: Screener | None = None,
        fetcher: Fetcher | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.cfg = config
        self._lock_fd = acquire_run_lock(config.state_dir)
        lifecycle.set_lease_dir(config.state_dir / "children")  # what we hold, for the next start's reaping
        reaped = lifecycle.reap_leftovers(config.state_dir / "children")  # a crashed run's engines: before the GPU
        self.db = StateDB(config.state_dir)
        self.metrics = metrics or Metrics()
        self.chain = GuardedChain(
            backend, self.db, config.chain_call_retries, config.chain_call_retry_s, on_error=self.metrics.chain_error
        )
        self.urls = config.url_policy or policy_for_backend(backend)  # loopback only on a local chain
        self.fetch_policy = replace(config.fetch, urls=self.urls)
        self.qualifier = qualifier
        self.screener = screener or VerifyScreener(device=config.screen_device, max_cases=config.verify_max_cases)
        self.fetcher: Fetcher = fetcher or fetch_bundle
        self.log = get_logger("cacheon.validator", netuid=config.netuid)
        self._chain_failures = 0
        self._s: dict[str, Any] = {}
        targets = config.targets
        if not targets:
            from cacheon_subnet.slots import all_slots

            targets = tuple(s.id for s in all_slots())
        self.targets = targets
        self.publisher = Publisher(
            self.db, self.chain, config.netuid, config.hotkey, targets, config.weights, config.publish
        )
        self._start_background(qualifier)
        removed = clear_partials(config.cache_dir)
        arena = getattr(qualifier, "arena_id", None)
        retired = ledger.retire_foreign_crowns(self.db, arena) if isinstance(arena, str) and arena else []
        self.log.info(
            "validator.start",
            state=str(self.db.path),
            hotkey=config.hotkey,
            arena=getattr(qualifier, "arena_id", "?"),
            partials_removed=removed,
            url_policy=self.urls.label,
            overlap=self.screens is not None,
            reaped=[r["killed"] for r in reaped],
            crowns_retired=retired,
            **self.db.counts(),
        )

    def _start_background(self, qualifier: Qualifier) -> None:
        """Screens and the arena in background threads, pinned to their own cores, unless the
        qualifier times on this host's CPU (a CPU screen beside it would be in its windows).
        A pool handed in (--arena-gpus / --arena-workers) is used as it is."""
        pooled = callable(getattr(qualifier, "submit", None)) and callable(getattr(qualifier, "poll", None))
        overlap = self.cfg.overlap
        if overlap is None:
            overlap = not str(getattr(qualifier, "label", "")).startswith("cpu-timing")
        self.wake: threading.Event = getattr(qualifier, "wake", None) or threading.Event()
        # a pool handed in without a wake event (Ray) is polled; every other one wakes the loop itself
        self._polled = pooled and getattr(qualifier, "wake", None) is None
        # a GPU screen never runs beside the arena (the GPU turn), so it keeps every core for its draws
        cpu_screen = not self.cfg.screen_device.startswith("cuda")
        cpus = split_cpus(self.cfg.screen_cpu_share if overlap and cpu_screen else 0)
        self.screens: ScreenPool | None = None
        self._own_pool: BackgroundArena | None = None
        self._pool: Any = qualifier if pooled else None
        self._held = []  # pool results the chain kept us from filing (qualify_stage._dispatch_stage)
        if overlap:
            self.screens = ScreenPool(self.screener, self.cfg.screen_workers, cpus.screen, self.wake)
            if not pooled:
                self._pool = self._own_pool = BackgroundArena(qualifier, cpus.arena, self.wake)
        self.cpus = cpus

    def _arena_pool(self) -> Any:
        return self._pool

    def _in_flight(self) -> int:
        return (len(self.screens.in_flight()) if self.screens is not None else 0) + (
            len(self._pool.in_flight()) if self._pool is not None else 0
        )

    def _own_in_flight(self) -> int:
        """What a draining pass waits for: its own screens and arena, not a pool handed in
        (--arena-gpus / --arena-workers passes never waited for those)."""
        return (len(self.screens.in_flight()) if self.screens is not None else 0) + (
            len(self._own_pool.in_flight()) if self._own_pool is not None else 0
        )

    def close(self) -> None:
        for pool in (self.screens, self._own_pool):
            if pool is not None:
                pool.close()  # waits for what is in flight; a shutdown has killed their children
        if self._own_pool is not None:
            for r in [*self._held, *self._own_pool.poll()]:  # jobs a shutdown ended: NO_DECISION, due after the restart
                try:
                    self._collect(r)
                except ChainDown:  # not filed: the job runs again after the restart
                    self.log.warning("qualify.unfiled_at_exit", key=r.key)
        if lifecycle.lease_dir() == self.cfg.state_dir / "children":
            lifecycle.set_lease_dir(None)
        self.db.close()
        os.close(self._lock_fd)

    # -- the pass --------------------------------------------------------------------------

    def run_once(self, drain: bool = True) -> PassSummary:
        """One pass. Stages are independent: a chain failure in one is logged and the next
        still runs (fetch/screen/verify need no chain; publishing keeps weights fresh).
        `drain`: wait for the screens and arena jobs this pass started (and start what they
        free) before settling; run_forever passes do not wait."""
        self.wake.clear()  # a job finishing from here on wakes the next pass
        self._s = {
            "moved": {},
            "settled": [],
            "crowns": [],
            "intake": 0,
            "block": None,
            "weights": None,
            "failed": {},
            "tried": {},
            "t0": time.monotonic(),
            "exhausted": [],
            "drain": drain,
        }
        errors: list[ChainDown] = []
        for stage in (
            self._sync,
            self._fetch_stage,
            self._screen_stage,
            self._pipeline,
            self._settle_stage,
            self._publish_stage,
        ):
            if lifecycle.SHUTDOWN.is_set():
                break  # a shutdown: what is in flight is left due, retried after the restart
            try:
                stage()
            except ChainDown as exc:
                errors.append(exc)
            except lifecycle.Interrupted as exc:
                self.log.warning("pass.interrupted", stage=stage.__name__.strip("_"), reason=str(exc)[:300])
                break
            except Exception as exc:
                if not is_resource_error(exc):
                    raise
                name = stage.__name__.strip("_").removesuffix("_stage")
                self._s["exhausted"].append(f"{name}: resource exhausted: {describe(exc)}")
                self.log.error("stage.resource_exhausted", stage=name, error=describe(exc))
        return self._summary(errors[0] if errors else None)

    def _pipeline(self) -> None:
        """Verify and qualify, interleaved: what a screen verifies goes to a free arena at once.
        Draining, wait (on the wake event) until none of its own screens and arena jobs is in flight.
        A chain outage stops only qualifying (it needs the block): verify goes on, as it did when it
        was a stage of its own, and the ChainDown is raised at the end."""
        down: list[ChainDown] = []
        while True:
            self._collect_screens()
            self._qualify_unless_down(down)  # first: a GPU arena has priority over a GPU screen
            self._verify_stage()
            self._qualify_unless_down(down)  # what verify just passed
            if not self._s["drain"] or not self._own_in_flight() or lifecycle.SHUTDOWN.is_set():
                break
            self.wake.wait(self.cfg.busy_poll_s)
            self.wake.clear()
        if down:
            raise down[0]

    def _qualify_unless_down(self, down: list[ChainDown]) -> None:
        try:
            self._qualify_stage()
        except ChainDown as exc:
            down.append(exc)

    @contextmanager
    def _item(self, c: Contribution, stage: str) -> Iterator[None]:
        """One item of a stage: whatever goes wrong in it (a resource error, a bug) is this
        item's transient error: counted, backed off, retried up to max_attempts, then
        no_decision. Never the miner's fault, never the pass's end."""
        try:
            yield
        except (ChainDown, lifecycle.Interrupted):
            raise
        except Exception as exc:
            if lifecycle.SHUTDOWN.is_set():
                raise lifecycle.Interrupted(f"{stage} of {c.id} stopped by shutdown") from None
            self._tried(stage, failed=True)
            if is_resource_error(exc):
                why = f"resource exhausted on this validator: {describe(exc)}"
                self.log.warning(f"{stage}.resource_exhausted", contribution=c.id, error=describe(exc))
            else:
                why = f"{type(exc).__name__}: {exc}"
                self.log.exception(f"{stage}.item_error", contribution=c.id, error=why[:300])
            self._transient(c, stage, why, "no_decision")

    def _problems(self, error: ChainDown | None) -> tuple[str, ...]:
        """A pass failed when the chain failed, weights were refused or failed read-back, or
        every item a stage tried ended in an error (a verify/qualify FAIL verdict is a decision,
        not an error; a fetch that fails is one, whoever's fault it is)."""
        s, out = self._s, []
        if error is not None:
            out.append(f"chain: {error}"[:300])
        if s["weights"] in ("failed", "refused", "blocked"):
            out.append(f"weights {s['weights']}: {s.get('weights_detail', '')}"[:300])
        out += s["exhausted"]
        for stage, n in sorted(s["failed"].items()):
            if n and n >= s["tried"].get(stage, 0):
                out.append(f"{stage}: all {n} items tried this pass ended in an error")
        return tuple(out)

    def _record_pass(self, summary: PassSummary, counts: dict[str, int]) -> None:
        now = time.time()
        with self.db.tx() as con:
            self.db.put("last_pass_at", now, con)
            self.db.put("last_pass_ok", int(summary.ok), con)
            self.db.put("last_pass_problems", json.dumps(list(summary.problems)), con)
            self.db.put("chain_failures_consecutive", self._chain_failures, con)
        verified = ledger.last_weights(self.db, ("verified",))
        self.metrics.observe_pass(
            ok=summary.ok,
            duration_s=summary.duration_s,
            at=now,
            counts=counts,
            weights=summary.weights,
            block=summary.block,
            verified_block=verified.block if verified else None,
        )

    def _record_crash(self, error: str) -> None:
        self.metrics.crashed()
        try:
            with self.db.tx() as con:
                self.db.put("last_pass_ok", 0, con)
                self.db.put("last_pass_problems", json.dumps([f"pass crashed: {error}"[:300]]), con)
                self.db.put("last_crash_at", time.time(), con)
        except Exception:  # noqa: BLE001 - the DB itself may be what broke; the log has it
            pass

    def run_forever(self, stop: threading.Event) -> None:
        """Passes until `stop` is set; a pass never takes the process down. Passes do not wait
        for background work: a finished screen or arena job wakes the next one early."""
        while not stop.is_set() and not lifecycle.SHUTDOWN.is_set():
            try:
                delay = self.run_once(drain=False).next_delay_s
            except Exception as exc:  # noqa: BLE001 - a bug in one pass must not stop validating
                self.log.exception("pass.crashed", error=f"{type(exc).__name__}: {exc}")
                self._record_crash(f"{type(exc).__name__}: {exc}")
                self._chain_failures += 1
                delay = self._backoff()
            if self._polled and self._in_flight():  # our own pools set `wake` when a job ends
                delay = min(delay, self.cfg.busy_poll_s)
            self._wait(stop, delay)
        self.log.info("validator.stop")

    def _wait(self, stop: threading.Event, delay: float) -> None:
        """Until `delay` passed, `stop` is set, or a background job finished (`wake`)."""
        end = time.monotonic() + delay
        while not stop.is_set() and not lifecycle.SHUTDOWN.is_set():
            left = end - time.monotonic()
            if left <= 0 or self.wake.wait(min(left, 0.5)):
                return

    def _summary(self, error: ChainDown | None) -> PassSummary:
        if error is not None:
            self._chain_failures += 1
            delay = self._backoff()
            self.log.warning(
                "chain.error",
                op=error.op,
                kind=error.kind,
                error=str(error.cause)[:300],
                consecutive=self._chain_failures,
                retry_in_s=round(delay, 2),
            )
        else:
            self._chain_failures = 0
            delay = self.cfg.interval_s
        counts = self.db.counts()
        s = self._s
        summary = PassSummary(
            block=s["block"],
            intake=s["intake"],
            moved=dict(s["moved"]),
            settled=tuple(s["settled"]),
            crowns_changed=tuple(s["crowns"]),
            weights=s["weights"],
            chain_error=None if error is None else str(error),
            active=sum(counts[k] for k in ("queued", "fetched", "screened", "verified")),
            unsettled=len(ledger.unsettled_targets(self.db)),
            next_delay_s=delay,
            failed=dict(s["failed"]),
            problems=self._problems(error),
            duration_s=round(time.monotonic() - s["t0"], 3),
            in_flight=self._in_flight(),
        )
        self._record_pass(summary, counts)
        self.log.info(
            "pass.done", **{k: v for k, v in summary.__dict__.items() if k not in ("moved", "failed")}, **summary.moved
        )
        return summary

    def _backoff(self) -> float:
        return backoff_s(max(0, self._chain_failures - 1), self.cfg.chain_backoff_base_s, self.cfg.chain_backoff_max_s)

    def _retry_delay(self, attempts: int) -> float:
        return backoff_s(attempts, self.cfg.retry_base_s, self.cfg.retry_max_s)

    def _moved(self, stage: str) -> None:
        self._s["moved"][stage] = self._s["moved"].get(stage, 0) + 1

    def _tried(self, stage: str, failed: bool = False) -> None:
        key = "failed" if failed else "tried"
        self._s[key][stage] = self._s[key].get(stage, 0) + 1
        if failed:
            self._tried(stage)

    # -- stages ----------------------------------------------------------------------------

    def _sync(self) -> None:
        block = self.chain.current_block()
        self._s["block"] = block
        mg = self.chain.metagraph(self.cfg.netuid)
        commitments = self.chain.revealed_commitments(self.cfg.netuid)
        events = intake(self.db, commitments, self.cfg.intake, block, self.urls)
        for e in events:
            self.log.info("intake." + e.outcome, contribution=e.contribution_id, hotkey=e.hotkey, reason=e.reason[:300])
        self._s["intake"] = len(events)
        with self.db.tx() as con:
            self.db.put("last_sync_block", block, con)
            self.db.put("metagraph_neurons", len(mg.neurons), con)
            self.db.put("last_sync_at", time.time(), con)

    def _transient(self, c: Contribution, stage: str, why: str, give_up: str) -> None:
        """Count a transient failure; after max_attempts end in `give_up` (failed/no_decision)."""
        why = storable(why)
        if c.attempts + 1 >= self.cfg.max_attempts:
            self.db.transition(c.id, give_up, f"{stage}: {why} (gave up after {c.attempts + 1} attempts)")
            self.log.warning(f"{stage}.gave_up", contribution=c.id, state=give_up, reason=why[:300])
        else:
            delay = self._retry_delay(c.attempts)
            self.db.retry_later(c.id, f"{stage}: {why} (attempt {c.attempts + 1}, retry in {delay:.0f} s)", delay)
            self.log.info(f"{stage}.retry", contribution=c.id, reason=why[:300], retry_in_s=round(delay, 1))

    def _fetch_stage(self) -> None:
        items = self.db.due("queued")[: self.cfg.max_items_per_pass]
        if items:
            with pinned(self.cpus.screen):  # unpacking and digesting beside a timed window: the screens' cores
                asyncio.run(self._fetch_all(items))

    async def _fetch_all(self, items: list[Contribution]) -> None:
        sem = asyncio.Semaphore(self.cfg.fetch_concurrency)
        async with guarded_session(self.fetch_policy) as session:

            async def one(c: Contribution) -> None:
                async with sem:
                    self.log.info("fetch.start", contribution=c.id, url=c.url)
                    try:
                        path = await self.fetcher(
                            c.url or "", c.digest or "", self.cfg.cache_dir, self.fetch_policy, session
                        )
                    except FetchError as exc:
                        self._tried("fetch", failed=True)
                        if exc.transient:  # the miner's server, or our own disk ("io": never the miner's fault)
                            self._transient(c, "fetch", str(exc), "no_decision" if exc.reason == "io" else "failed")
                        else:
                            self.db.transition(c.id, "failed", f"fetch: {exc.reason}: {exc.detail}"[:2000])
                            self.log.info("fetch.failed", contribution=c.id, reason=str(exc)[:300])
                        return
                    except Exception as exc:  # noqa: BLE001 - our side (disk, fds, a bug): not the miner's fault
                        self._tried("fetch", failed=True)
                        why = (
                            f"resource exhausted on this validator: {describe(exc)}"
                            if is_resource_error(exc)
                            else f"{type(exc).__name__}: {exc}"
                        )
                        self._transient(c, "fetch", why, "no_decision")
                        return
                    self._tried("fetch")
                    self.db.transition(
                        c.id, "fetched", "archive cached, content digest matches", detail={**c.detail, "archive": path.name}
                    )
                    self._moved("fetched")
                    self.log.info("fetch.ok", contribution=c.id, archive=path.name)

            await asyncio.gather(*(one(c) for c in items))

    def _bundle(self, c: Contribution) -> Bundle | None:
        bundle = load_cached(self.cfg.cache_dir, c.digest or "")
        if bundle is None:
            self.db.transition(c.id, "queued", "cached archive missing; fetching again")
            self.log.warning("cache.missing", contribution=c.id)
        return bundle

    def _incumbent_bundle(self, crown: Crown) -> Bundle | None:
        """The crowned contribution's archive from the cache (the arena runs it in the B windows);
        None when it is gone, and the qualifier then falls back to a derived ratio."""
        digest = self.db.contribution(crown.contribution_id).digest
        return load_cached(self.cfg.cache_dir, digest or "")

    def _screen_stage(self) -> None:
        with pinned(self.cpus.screen):  # the static scan's child too: never on the arena's cores
            for c in self.db.due("fetched")[: self.cfg.max_items_per_pass]:
                with self._item(c, "screen"):
                    self._screen_one(c)

    def _screen_one(self, c: Contribution) -> None:
        bundle = self._bundle(c)
        if bundle is None:
            return
        result = static_screen(bundle)
        if not result.passed:
            self.db.transition(c.id, "failed", "screen: " + "; ".join(result.reasons)[:2000])
            self.log.info("screen.failed", contribution=c.id, reasons=list(result.reasons)[:5])
            return
        with self.db.tx() as con:  # a copy of a judged contribution costs no verify or GPU time
            copy = settle_copy(self.db, con, c, bundle)
            if copy is None or copy.contribution_id != c.id:
                self.db.move(con, c.id, "screened", "static screen clean")
        if copy is not None:
            self.log.info("screen.copy", contribution=copy.contribution_id, outcome=copy.outcome, reason=copy.reason[:300])
        if copy is not None and copy.contribution_id == c.id:
            return
        self._moved("screened")
        self.log.info("screen.ok", contribution=c.id, ops=result.detail.get("ops"))

    def _settle_stage(self) -> None:
        targets = ledger.unsettled_targets(self.db)
        if not targets:
            return
        block = self.chain.current_block()
        for target in targets:
            try:
                out = ledger.settle(
                    self.db,
                    target,
                    self.cfg.speed,
                    block,
                    hold_blocks=self.cfg.settle_hold_blocks,
                    max_remeasure=self.cfg.max_remeasure,
                )
            except ScoringError as exc:  # rolled back; one bad target must not stop the others or weights
                self.log.error("settle.error", target=target, error=str(exc)[:500])
                continue
            if out is None:
                continue
            if isinstance(out, list):
                self.log.info("settle.held", target=target, waiting_for=out[:5])
                continue
            self._s["settled"].append(target)
            for d in out.decisions:
                self.log.info(
                    "settle.decision",
                    target=target,
                    contribution=d.contribution_id,
                    outcome=d.outcome,
                    reason=d.reason[:300],
                )
            if out.changed and out.crown is not None:
                self._s["crowns"].append(target)
                self.log.info(
                    "settle.crown",
                    target=target,
                    contribution=out.crown.contribution_id,
                    hotkey=out.crown.hotkey,
                    speedup_vs_stock=round(out.crown.speedup_vs_stock, 4),
                    block=out.block,
                )
            for cid in out.remeasure:
                self.log.info("settle.remeasure", target=target, contribution=cid)

    def _publish_stage(self) -> None:
        result = self.publisher.step()
        self._s["weights"], self._s["weights_detail"] = result.action, result.detail
        self.log.info("weights." + result.action, weights_id=result.weights_id, detail=result.detail[:300])
