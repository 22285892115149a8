"""Verify (screened -> verified/failed): the sandboxed verify_bundle, in this thread or through
a pool of background screens (validator/background.py) that overlaps the arena.

Why a pool: a CPU screen takes minutes (interpreted Triton) and a GPU arena several more; run
one after the other, every contribution in the queue waits on both. In the pool the loop thread
only dispatches and collects: every verdict is written here, by the loop thread, in one
transaction."""

from __future__ import annotations

from cacheon_subnet import lifecycle
from cacheon_subnet.bundle import Bundle
from cacheon_subnet.validator.background import ScreenJob, ScreenOutcome
from cacheon_subnet.validator.screen import Screener, ScreenResult
from cacheon_subnet.validator.stages.items import Archives, Items
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import Log, ScreenJobs
from cacheon_subnet.validator.stages.workers import GpuTurn
from cacheon_subnet.validator.state import Contribution, StateDB
from cacheon_subnet.validator.storable import storable


class VerifyStage:
    """`screens` None: verify in this thread, at most `max_items` a pass; else keep every free
    screen busy with due work (`turn`: never a GPU screen beside an arena job)."""

    name = "verify"

    def __init__(
        self,
        db: StateDB,
        items: Items,
        archives: Archives,
        screener: Screener,
        log: Log,
        *,
        screens: ScreenJobs | None = None,
        turn: GpuTurn | None = None,
        device: str = "cpu",
        max_items: int = 16,
    ) -> None:
        self.db, self.items, self.archives, self.screener, self.log = db, items, archives, screener, log
        self.screens, self.device, self.max_items = screens, device, max_items
        self.turn = turn or GpuTurn(device.startswith("cuda"), screens)

    def collect(self, ps: PassState) -> None:
        if self.screens is not None:
            for out in self.screens.poll():
                self._collect_one(ps, out)

    def run(self, ps: PassState) -> None:
        if self.screens is None:
            return self._serial(ps)
        self.collect(ps)
        if self.turn.arena_busy():
            return  # never a GPU screen beside an arena: its timed windows would feel it
        running = self.screens.in_flight()
        for c in self.db.due("screened"):
            if self.screens.free_slots() <= 0:
                break
            if c.id in running:
                continue
            with self.items.guard(ps, c, "verify"):
                bundle = self.archives.bundle(c)
                if bundle is None:
                    continue
                self.log.info("verify.start", contribution=c.id, device=self.device, background=True)
                self.screens.submit(ScreenJob(f"{c.id}|a{c.attempts}", c.id, bundle))

    def _serial(self, ps: PassState) -> None:
        for c in self.db.due("screened")[: self.max_items]:
            with self.items.guard(ps, c, "verify"):
                bundle = self.archives.bundle(c)
                if bundle is None:
                    continue
                self.log.info("verify.start", contribution=c.id, device=self.device)
                result = self.screener(bundle)  # raising: infrastructure, the guard's transient error (or shutdown)
                if lifecycle.SHUTDOWN.is_set():  # its workers were killed under it: no verdict
                    raise lifecycle.Interrupted(f"verify of {c.id} stopped by shutdown")
                self._verdict(ps, c, bundle, result)

    def _collect_one(self, ps: PassState, out: ScreenOutcome) -> None:
        """One background screen into the DB: a verdict, or a transient error (backoff, bounded
        retries, then no_decision). An outcome for an attempt that is no longer current (the
        contribution moved on, or a shutdown killed its worker) is dropped."""
        if lifecycle.SHUTDOWN.is_set():
            return  # its worker may have been killed under it: no verdict, retried after restart
        c = self.db.find(out.contribution_id)
        if c is None or c.state != "screened" or out.key != f"{c.id}|a{c.attempts}":
            self.log.info("verify.stale_result", contribution=out.contribution_id, key=out.key)
            return
        with self.items.guard(ps, c, "verify"):
            if out.result is None:
                ps.attempted("verify", failed=True)
                self.items.transient(c, "verify", out.error or "no result", "no_decision")
                return
            bundle = self.archives.bundle(c)
            if bundle is None:
                return
            self._verdict(ps, c, bundle, out.result, out.wall_s)

    def _verdict(
        self, ps: PassState, c: Contribution, bundle: Bundle, result: ScreenResult, wall_s: float | None = None
    ) -> None:
        ps.attempted("verify")
        detail = {**c.detail, "verify": result.detail}
        if result.passed:
            todo = tuple(sorted({op.slot for op in bundle.manifest.ops}))
            self.db.transition(c.id, "verified", "verify PASS", todo=todo, detail=detail)
            ps.advanced("verified")
            self.log.info("verify.pass", contribution=c.id, targets=list(todo), wall_s=wall_s)
        elif result.undecided:  # not the bundle's fault, not a pass: e.g. CUDA trials on a CPU validator
            why = storable("verify: " + "; ".join(result.reasons))[:2000]
            self.db.transition(c.id, "no_decision", why, detail=detail)
            self.log.info("verify.no_decision", contribution=c.id, reasons=list(result.reasons)[:5], wall_s=wall_s)
        else:
            why = storable("verify: " + "; ".join(result.reasons))[:2000]  # a bundle's own words: storable
            self.db.transition(c.id, "failed", why, detail=detail)
            self.log.info("verify.failed", contribution=c.id, reasons=list(result.reasons)[:5], wall_s=wall_s)
