"""The verify stage of the validator loop (screened -> verified/failed), in this thread or
through a pool of background screens (validator/background.py) that overlaps the arena.

Why a pool: a CPU screen takes minutes (interpreted Triton) and a GPU arena several more; run
one after the other, every contribution in the queue waits on both. In the pool the loop thread
only dispatches and collects: every verdict is written here, by the loop thread, in one
transaction. A mixin of `loop.Validator` (db, log, cfg, screener, and the helpers _bundle,
_tried, _transient, _moved, _item)."""

from __future__ import annotations

from typing import Any

from cacheon_subnet import lifecycle
from cacheon_subnet.bundle import Bundle
from cacheon_subnet.validator.background import ScreenJob, ScreenOutcome, ScreenPool
from cacheon_subnet.validator.screen import ScreenResult
from cacheon_subnet.validator.state import Contribution
from cacheon_subnet.validator.storable import storable


class VerifyStages:
    db: Any
    log: Any
    cfg: Any
    screener: Any
    screens: ScreenPool | None

    def _collect_screens(self) -> None:
        if self.screens is not None:
            for out in self.screens.poll():
                self._collect_screen(out)

    def _verify_stage(self) -> None:
        if self.screens is None:
            return self._verify_serial()
        self._collect_screens()
        if self._gpu_turn_taken_by_arena():
            return  # never a GPU screen beside an arena: its timed windows would feel it
        running = self.screens.in_flight()
        for c in self.db.due("screened"):
            if self.screens.free_slots() <= 0:
                break
            if c.id in running:
                continue
            with self._item(c, "verify"):
                bundle = self._bundle(c)
                if bundle is None:
                    continue
                self.log.info("verify.start", contribution=c.id, device=self.cfg.screen_device, background=True)
                self.screens.submit(ScreenJob(f"{c.id}|a{c.attempts}", c.id, bundle))

    def _verify_serial(self) -> None:
        for c in self.db.due("screened")[: self.cfg.max_items_per_pass]:
            with self._item(c, "verify"):
                bundle = self._bundle(c)
                if bundle is None:
                    continue
                self.log.info("verify.start", contribution=c.id, device=self.cfg.screen_device)
                result = self.screener(bundle)  # raising: infrastructure, _item's transient error (or shutdown)
                if lifecycle.SHUTDOWN.is_set():  # its workers were killed under it: no verdict
                    raise lifecycle.Interrupted(f"verify of {c.id} stopped by shutdown")
                self._verdict(c, bundle, result)

    def _collect_screen(self, out: ScreenOutcome) -> None:
        """One background screen into the DB: a verdict, or a transient error (backoff, bounded
        retries, then no_decision). An outcome for an attempt that is no longer current (the
        contribution moved on, or a shutdown killed its worker) is dropped."""
        if lifecycle.SHUTDOWN.is_set():
            return  # its worker may have been killed under it: no verdict, retried after restart
        c = self.db.find(out.contribution_id)
        if c is None or c.state != "screened" or out.key != f"{c.id}|a{c.attempts}":
            self.log.info("verify.stale_result", contribution=out.contribution_id, key=out.key)
            return
        with self._item(c, "verify"):
            if out.result is None:
                self._tried("verify", failed=True)
                self._transient(c, "verify", out.error or "no result", "no_decision")
                return
            bundle = self._bundle(c)
            if bundle is None:
                return
            self._verdict(c, bundle, out.result, out.wall_s)

    def _verdict(self, c: Contribution, bundle: Bundle, result: ScreenResult, wall_s: float | None = None) -> None:
        self._tried("verify")
        detail = {**c.detail, "verify": result.detail}
        if result.passed:
            todo = tuple(sorted({op.slot for op in bundle.manifest.ops}))
            self.db.transition(c.id, "verified", "verify PASS", todo=todo, detail=detail)
            self._moved("verified")
            self.log.info("verify.pass", contribution=c.id, targets=list(todo), wall_s=wall_s)
        else:
            why = storable("verify: " + "; ".join(result.reasons))[:2000]  # a bundle's own words: storable
            self.db.transition(c.id, "failed", why, detail=detail)
            self.log.info("verify.failed", contribution=c.id, reasons=list(result.reasons)[:5], wall_s=wall_s)

    def _gpu_turn_taken_by_arena(self) -> bool:
        """A screen on a GPU waits while an arena job is in flight (and the arena waits for it:
        qualify_stage); a CPU screen never touches the GPU (no device nodes in its sandbox)."""
        pool = self._arena_pool()
        return self.cfg.screen_device.startswith("cuda") and pool is not None and bool(pool.in_flight())

    def _gpu_screens_running(self) -> bool:
        return self.screens is not None and self.cfg.screen_device.startswith("cuda") and bool(self.screens.in_flight())

    def _arena_pool(self) -> Any:
        raise NotImplementedError
