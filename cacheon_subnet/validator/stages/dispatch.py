"""Qualify through a pool of arenas (verified -> qualified/failed): our own background arena, or
one per GPU / on other hosts (validator/dispatch.py). Each pass collects what finished (this
thread alone writes the DB), then keeps every free arena busy with due work, oldest commit first.

Why results are held: filing a verdict reads the block, so a chain outage between the pool
handing a result over and its filing would lose it, and the GPU would judge it again. Held
results are filed first on the next pass (and at close)."""

from __future__ import annotations

from dataclasses import replace

from cacheon_subnet import lifecycle
from cacheon_subnet.records import result_problem
from cacheon_subnet.resources import describe, is_resource_error
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.chainguard import ChainDown
from cacheon_subnet.validator.dispatch import JobResult, QualifyJob, finished_jobs, job_key
from cacheon_subnet.validator.stages.items import Archives, Items
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import ArenaPool, BlockClock, Log, VerdictCounter
from cacheon_subnet.validator.stages.qualify import Filing
from cacheon_subnet.validator.stages.workers import GpuTurn
from cacheon_subnet.validator.state import Contribution, StateDB
from cacheon_subnet.validator.storable import storable


class DispatchStage:
    name = "qualify"

    def __init__(
        self,
        db: StateDB,
        chain: BlockClock,
        items: Items,
        archives: Archives,
        filing: Filing,
        pool: ArenaPool,
        verdicts: VerdictCounter,
        log: Log,
        *,
        head_to_head: bool = False,
        turn: GpuTurn | None = None,
    ) -> None:
        self.db, self.chain, self.items, self.archives, self.filing = db, chain, items, archives, filing
        self.pool, self.verdicts, self.log, self.head_to_head = pool, verdicts, log, head_to_head
        self.turn = turn or GpuTurn(False)
        self.held: list[JobResult] = []  # results the chain kept us from filing: filed first next pass

    def run(self, ps: PassState) -> None:
        results, self.held = [*self.held, *self.pool.poll()], []
        for i, r in enumerate(results):
            try:
                self.collect(ps, r)
            except ChainDown:  # filed when the chain answers again: a finished job is never lost and run again
                self.held = results[i:]
                raise
            except BaseException:
                self.held = results[i + 1 :]
                raise
        if self.turn.screens_busy():
            return  # a screen on the GPU has its turn: no timed window beside it (stages/verify.py)
        running = {tuple(k.split("|")[:2]) for k in self.pool.in_flight()}
        for c in self.db.due("verified"):
            if self.pool.free_slots() <= 0:
                break
            with self.items.guard(ps, c, "qualify"):
                self._dispatch_one(c, running)

    def file_at_exit(self, results: list[JobResult]) -> None:
        """At close: what the held list and our own pool still hold (jobs a shutdown ended:
        NO_DECISION, due after the restart). Unfiled under a chain outage: run again after it."""
        ps = PassState()
        for r in [*self.held, *results]:
            try:
                self.collect(ps, r)
            except ChainDown:
                self.log.warning("qualify.unfiled_at_exit", key=r.key)
        self.held = []

    def _dispatch_one(self, c: Contribution, running: set[tuple[str, ...]]) -> None:
        """Submit every target of `c` that is due, not running and not recorded."""
        if not c.todo:
            self.filing.finish_now(c)
            return
        bundle = None
        for target in c.todo:
            key = job_key(c.id, target, c.attempts, c.remeasures, finished_jobs(self.db, c.id, target))
            if self.pool.free_slots() <= 0 or (c.id, target) in running or self.db.get("job:" + key) is not None:
                continue
            bundle = bundle or self.archives.bundle(c)
            if bundle is None:
                return
            op = next((o for o in bundle.manifest.ops if o.slot == target), None)
            if op is None:
                self.items.transient(c, "qualify", f"{target}: bundle has no op for target {target}", "no_decision")
                return
            incumbent = ledger.crown_of(self.db, target)
            start = self.chain.current_block()
            if incumbent is not None and start <= incumbent.crowned_block:
                continue  # measured in the crown's own block it would be stale; next pass
            inc = self.archives.incumbent(incumbent) if incumbent is not None and self.head_to_head else None
            files = dict(inc.files) if inc is not None else None
            self.pool.submit(QualifyJob(key, c.id, target, dict(bundle.files), op, incumbent, files, start))
            running.add((c.id, target))
            self.log.info(
                "qualify.dispatch",
                contribution=c.id,
                target=target,
                key=key,
                incumbent=incumbent.contribution_id if incumbent else "stock",
            )

    def collect(self, ps: PassState, r: JobResult) -> None:
        """One finished job into the DB, once: a key already recorded (a retried or twice-delivered
        job) or a contribution that moved on meanwhile is dropped."""
        if self.db.get("job:" + r.key) is not None:
            self.log.warning("qualify.duplicate_result", key=r.key, worker=r.worker)
            return
        if lifecycle.SHUTDOWN.is_set():  # its engines may have been killed under it, whatever it said
            c = self.db.find(r.contribution_id)
            if c is not None and c.state == "verified":
                cause = r.error or f"{r.result.verdict if r.result else '?'} under shutdown"
                self.filing.note_interrupted(c, r.target, cause)
            return
        c = self.db.find(r.contribution_id)
        if c is None or c.state != "verified" or r.target not in c.todo:
            self.db.put("job:" + r.key, "stale")
            self.log.info("qualify.stale_result", key=r.key, state=c.state if c else None)
            return
        problem = None if r.result is None else result_problem(r.result)
        if r.result is None or problem is not None:
            ps.attempted("qualify", failed=True)
            self.db.put("job:" + r.key, "error")
            self.items.transient(c, "qualify", f"{r.target}: {r.error or problem} (on {r.worker})", "no_decision")
            return
        result = r.result if r.result.target == r.target else replace(r.result, target=r.target)
        try:
            self.filing.record(c, r.target, result, r.start_block, r.incumbent_id, key=r.key)
        except (ChainDown, lifecycle.Interrupted):
            raise
        except Exception as exc:  # noqa: BLE001 - an answer this validator cannot file is the job's error
            # (retried, then NO_DECISION), never a crashed pass that loses it and runs the job again
            why = describe(exc) if is_resource_error(exc) else f"{type(exc).__name__}: {exc}"
            self.log.warning("qualify.unrecordable", key=r.key, error=storable(why)[:300])
            ps.attempted("qualify", failed=True)
            self.db.put("job:" + r.key, "error")
            self.items.transient(c, "qualify", f"{r.target}: result could not be recorded: {why}", "no_decision")
            return
        ps.attempted("qualify")
        self.verdicts.verdict(result.verdict)
        ps.advanced("qualified")
