"""The validator loop: sync -> intake -> fetch -> screen -> verify -> qualify -> settle -> publish -> prune.

Each stage is an object built with its collaborators (validator/stages/, composed in
wiring.py); a pass makes a fresh `PassState`, hands it to every stage in order and turns it
into the `PassSummary` it returns.

Verify and qualify overlap (issue 30 item 3): unless the qualifier times on this host's CPU
(cpu-timing), screens run in background threads (validator/background.py) and the arena in its
own (dispatch.BackgroundArena), so a contribution in the arena never holds the queue's screening
and a long screen never leaves the GPU idle; the loop thread only dispatches, collects and writes.
`run_once()` drains what it started (one pass does all the work it can: `--once`);
`run_forever` passes do not wait, they wake when a background job finishes. Every item of
every stage runs under `Items.guard` (stages/items.py): an error there (a resource error such as
EMFILE, ENOMEM or ENOSPC included: cacheon_subnet/resources.py) is that item's transient error,
backed off and retried a bounded number of times, never a crashed pass; a resource error
outside any item ends only its stage.

Every stage reads its work from the state DB and ends each item in one transaction, so the
loop is resumable from any kill -9: nothing is held only in memory between stages. Chain
failures (anything the backend raises) are logged to the DB and backed off exponentially with
jitter (cacheon_subnet.retry, the one backoff rule); work that needs no chain (fetch, screen,
verify) still proceeds during an outage. Every pass ends by writing its outcome to the state DB
(`last_pass_*`, read by `cacheon status --check`) and to the Prometheus metrics.
"""

from __future__ import annotations

import json
import os
import threading
import time

from cacheon_subnet import lifecycle
from cacheon_subnet.bundle import sweep_scratch
from cacheon_subnet.chain.backend import ChainBackend
from cacheon_subnet.log import get_logger
from cacheon_subnet.netpolicy import policy_for_backend
from cacheon_subnet.records import Qualifier
from cacheon_subnet.resources import describe, is_resource_error
from cacheon_subnet.retry import backoff_s
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.background import CpuSplit
from cacheon_subnet.validator.chainguard import ChainDown, GuardedChain
from cacheon_subnet.validator.config import ValidatorConfig
from cacheon_subnet.validator.fetch import clear_partials
from cacheon_subnet.validator.metrics import Metrics
from cacheon_subnet.validator.screen import Screener, VerifyScreener
from cacheon_subnet.validator.stages.dispatch import DispatchStage
from cacheon_subnet.validator.stages.fetch import Fetcher
from cacheon_subnet.validator.stages.passstate import PassState, PassSummary
from cacheon_subnet.validator.stages.ports import ArenaPool, Stage
from cacheon_subnet.validator.stages.workers import start_workers
from cacheon_subnet.validator.state import TARGETS_KEY, StateDB, acquire_run_lock
from cacheon_subnet.validator.wiring import Collaborators, build_stages

__all__ = ["Fetcher", "PassSummary", "Validator", "ValidatorConfig"]


class Validator:
    """`qualifier`: an arena (judged in a background thread, or in this one with CPU timing or
    --no-overlap) or a pool of them (--arena-gpus / --arena-workers: validator/dispatch.py)."""

    def __init__(
        self,
        config: ValidatorConfig,
        backend: ChainBackend,
        qualifier: Qualifier | ArenaPool,
        *,
        screener: Screener | None = None,
        fetcher: Fetcher | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.cfg = config
        self._lock_fd = acquire_run_lock(config.state_dir)
        lifecycle.set_lease_dir(config.state_dir / "children")  # what we hold, for the next start's reaping
        reaped = lifecycle.reap_leftovers(config.state_dir / "children")  # a crashed run's engines: before the GPU
        swept = sweep_scratch()  # the scratch dirs a kill -9 left (verify workers, scan children)
        self.db = StateDB(config.state_dir)
        self.metrics = metrics or Metrics()
        self.chain = GuardedChain(
            backend, self.db, config.chain_call_retries, config.chain_call_retry_s, on_error=self.metrics.chain_error
        )
        self.urls = config.url_policy or policy_for_backend(backend)  # loopback only on a local chain
        self.qualifier = qualifier
        self.screener = screener or VerifyScreener(device=config.screen_device, max_cases=config.verify_max_cases)
        self.log = get_logger("cacheon.validator", netuid=config.netuid)
        self._chain_failures = 0
        if not config.targets:
            from cacheon_subnet.slots import all_slots

            self.targets = tuple(s.id for s in all_slots())
        else:
            self.targets = config.targets
        self.db.put(TARGETS_KEY, json.dumps(list(self.targets)))  # the page lists every one, crowned or not
        self.workers = start_workers(
            qualifier,
            self.screener,
            overlap=config.overlap,
            screen_device=config.screen_device,
            screen_workers=config.screen_workers,
            screen_cpu_share=config.screen_cpu_share,
        )
        self.stages = build_stages(
            config,
            Collaborators(
                db=self.db,
                chain=self.chain,
                urls=self.urls,
                qualifier=qualifier,
                screener=self.screener,
                workers=self.workers,
                verdicts=self.metrics,
                log=self.log,
                targets=self.targets,
                fetcher=fetcher,
            ),
        )
        self.order: tuple[Stage, ...] = self.stages.order  # what one pass runs, in this order
        removed = clear_partials(config.cache_dir)
        retired = ledger.remeasure_foreign_crowns(self.db, qualifier.arena_id) if qualifier.arena_id else []
        self.log.info(
            "validator.start",
            state=str(self.db.path),
            hotkey=config.hotkey,
            arena=qualifier.arena_id or "?",
            partials_removed=removed,
            url_policy=self.urls.label,
            overlap=self.workers.screens is not None,
            screen_workers=self.workers.screens.workers if self.workers.screens is not None else 0,
            reaped=[r["killed"] for r in reaped],
            scratch_swept=len(swept),
            crowns_remeasured=retired,
            **self.db.counts(),
        )

    @property
    def cpus(self) -> CpuSplit:
        """Which cores the screens (and the leaderboard's process: commands.py) and the arena use."""
        return self.workers.cpus

    def close(self) -> None:
        own = self.workers.own_pool
        for pool in (self.workers.screens, own):
            if pool is not None:
                pool.close()  # waits for what is in flight; a shutdown has killed their children
        judge = self.stages.judge
        if own is not None and isinstance(judge, DispatchStage):
            judge.file_at_exit(own.poll())  # jobs a shutdown ended: NO_DECISION, due after the restart
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
        self.workers.wake.clear()  # a job finishing from here on wakes the next pass
        ps = PassState(drain=drain)
        errors: list[ChainDown] = []
        for stage in self.order:
            if lifecycle.SHUTDOWN.is_set():
                break  # a shutdown: what is in flight is left due, retried after the restart
            try:
                stage.run(ps)
            except ChainDown as exc:
                errors.append(exc)
            except lifecycle.Interrupted as exc:
                self.log.warning("pass.interrupted", stage=stage.name, reason=str(exc)[:300])
                break
            except Exception as exc:
                if not is_resource_error(exc):
                    raise
                ps.exhausted.append(f"{stage.name}: resource exhausted: {describe(exc)}")
                self.log.error("stage.resource_exhausted", stage=stage.name, error=describe(exc))
        return self._summary(ps, errors[0] if errors else None)

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
            if self.workers.polled and self.workers.in_flight():  # our own pools set `wake` when a job ends
                delay = min(delay, self.cfg.busy_poll_s)
            self._wait(stop, delay)
        self.log.info("validator.stop")

    def _wait(self, stop: threading.Event, delay: float) -> None:
        """Until `delay` passed, `stop` is set, or a background job finished (`wake`)."""
        end = time.monotonic() + delay
        while not stop.is_set() and not lifecycle.SHUTDOWN.is_set():
            left = end - time.monotonic()
            if left <= 0 or self.workers.wake.wait(min(left, 0.5)):
                return

    def _summary(self, ps: PassState, error: ChainDown | None) -> PassSummary:
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
        summary = ps.summary(
            None if error is None else str(error),
            active=sum(counts[k] for k in ("queued", "fetched", "screened", "verified")),
            unsettled=len(ledger.unsettled_targets(self.db)),
            next_delay_s=delay,
            in_flight=self.workers.in_flight(),
        )
        self._record_pass(summary, counts)
        self.log.info(
            "pass.done", **{k: v for k, v in summary.__dict__.items() if k not in ("moved", "failed")}, **summary.moved
        )
        return summary

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

    def _backoff(self) -> float:
        return backoff_s(max(0, self._chain_failures - 1), self.cfg.chain_backoff_base_s, self.cfg.chain_backoff_max_s)
