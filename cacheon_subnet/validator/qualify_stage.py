"""The qualify stage of the validator loop (verified -> qualified/failed), one arena in this
thread or a pool of them (validator/dispatch.py): every op's evidence lands in one transaction,
with a pool job's idempotency key, so a retried or twice-delivered job counts once. A mixin of
`loop.Validator`, whose state DB, chain, qualifier and retry helpers it uses."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cacheon_subnet import lifecycle
from cacheon_subnet.bundle import Bundle
from cacheon_subnet.resources import describe, is_resource_error
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.chainguard import ChainDown
from cacheon_subnet.validator.dispatch import JobResult, QualifyJob, finished_jobs, job_key
from cacheon_subnet.validator.qualify_result import result_problem
from cacheon_subnet.validator.state import Contribution
from cacheon_subnet.validator.storable import storable
from cacheon_subnet.words import VERDICT_WORDS


class QualifyStages:
    """Needs (from loop.Validator): db, chain, qualifier, metrics, log, cfg, and the helpers
    _bundle, _incumbent_bundle, _tried, _transient, _moved, _item, _arena_pool, _gpu_screens_running."""

    db: Any
    chain: Any
    qualifier: Any
    metrics: Any
    log: Any
    _held: list[JobResult]  # pool results not yet filed (the chain was down): filed first next pass

    def _qualify_stage(self) -> None:
        if self._arena_pool() is not None:
            return self._dispatch_stage()  # arenas in background threads or on other hosts (dispatch.py)
        for c in self.db.due("verified")[: self.cfg.max_items_per_pass]:
            with self._item(c, "qualify"):
                bundle = self._bundle(c)
                if bundle is not None:
                    self._qualify(c, bundle)

    def _qualify(self, c: Contribution, bundle: Bundle) -> None:
        if not c.todo:  # defensive: nothing left to measure, close it
            with self.db.tx() as con:
                self._finish(con, c)
            return
        for target in c.todo:
            op = next((o for o in bundle.manifest.ops if o.slot == target), None)
            incumbent = ledger.crown_of(self.db, target)
            start = self.chain.current_block()
            if incumbent is not None and start <= incumbent.crowned_block:
                self.log.info("qualify.wait_block", contribution=c.id, target=target)
                return  # measured in the crown's own block it would be stale; next pass
            self.log.info(
                "qualify.start",
                contribution=c.id,
                target=target,
                incumbent=incumbent.contribution_id if incumbent else "stock",
            )
            try:
                if op is None:
                    raise LookupError(f"bundle has no op for target {target}")
                if incumbent is not None and getattr(self.qualifier, "head_to_head", False):
                    result = self.qualifier.qualify(
                        bundle, op, incumbent, incumbent_bundle=self._incumbent_bundle(incumbent)
                    )
                else:
                    result = self.qualifier.qualify(bundle, op, incumbent)
                if lifecycle.SHUTDOWN.is_set():  # its engines were killed under it: not the bundle's verdict
                    raise lifecycle.Interrupted(f"{target}: qualification stopped by shutdown")
                problem = result_problem(result)
                if problem is not None:
                    raise ValueError(problem)
            except Exception as exc:  # noqa: BLE001 - arena trouble says nothing about the bundle
                self._tried("qualify", failed=True)
                if isinstance(exc, lifecycle.Interrupted) or lifecycle.SHUTDOWN.is_set():
                    self._interrupted(c, target, exc)
                self._transient(c, "qualify", f"{target}: {type(exc).__name__}: {exc}", "no_decision")
                return
            self._tried("qualify")
            self.metrics.verdict(result.verdict)
            if result.target != target:
                result = replace(result, target=target)
            self._record(c, target, result, start, incumbent.contribution_id if incumbent else None)
        self._moved("qualified")

    def _record(
        self, c: Contribution, target: str, result: Any, start: int, incumbent_id: str | None, key: str | None = None
    ) -> None:
        """One op's evidence, in one transaction (with the job's idempotency key, if any).
        A pool job that started no later than the target's current crown was measured before that
        crown: it keeps its start block, so settlement reads it as stale. Filed at the block it came
        back, a job measured against a crown that was retired and settled again meanwhile (same
        holder id, another crowned_block and speedup_vs_stock) passed the staleness check and was
        settled against numbers the holder no longer has (red team: a 1.20x challenger dethroned
        a re-measured 1.30x holder and was crowned at 1.42x)."""
        evaluated = max(start, self.chain.current_block())
        if isinstance(result.reason, str):
            result = replace(result, reason=storable(result.reason))  # a bundle's own words: storable
        crown = ledger.crown_of(self.db, target) if key is not None else None
        if crown is not None and start <= crown.crowned_block:
            evaluated = start
        with self.db.tx() as con:
            ledger.record_evidence(con, c.id, result, evaluated, incumbent_id)
            if key is not None:
                self.db.put("job:" + key, result.verdict, con)
            c = self.db.contribution(c.id, con)
            todo = tuple(t for t in c.todo if t != target)
            if todo:
                self.db.update(con, c.id, {"todo": todo, "attempts": 0})
            else:
                self._finish(con, c)
        self.log.info(
            "qualify.op",
            contribution=c.id,
            target=target,
            verdict=result.verdict,
            speedup=round(result.speedup, 4),
            vs_stock=round(result.speedup_vs_stock, 4),
            noise=round(result.noise, 4),
            arena=result.arena_id,
            label=result.label,
        )

    def _dispatch_stage(self) -> None:
        """A pool of arenas: collect what finished (this thread alone writes the DB), then keep
        every free arena busy with due work, oldest commit first."""
        pool: Any = self._arena_pool()
        results, self._held = [*self._held, *pool.poll()], []
        for i, r in enumerate(results):
            try:
                self._collect(r)
            except ChainDown:  # filed when the chain answers again: a finished job is never lost and run again
                self._held = results[i:]
                raise
            except BaseException:
                self._held = results[i + 1 :]
                raise
        if self._gpu_screens_running():
            return  # a screen on the GPU has its turn: no timed window beside it (verify_stage)
        running = {tuple(k.split("|")[:2]) for k in pool.in_flight()}
        for c in self.db.due("verified"):
            if pool.free_slots() <= 0:
                break
            with self._item(c, "qualify"):
                self._dispatch_one(pool, c, running)

    def _dispatch_one(self, pool: Any, c: Contribution, running: set[tuple[str, ...]]) -> None:
        """Submit every target of `c` that is due, not running and not recorded."""
        if not c.todo:
            with self.db.tx() as con:
                self._finish(con, c)
            return
        bundle = None
        for target in c.todo:
            key = job_key(c.id, target, c.attempts, c.remeasures, finished_jobs(self.db, c.id, target))
            if pool.free_slots() <= 0 or (c.id, target) in running or self.db.get("job:" + key) is not None:
                continue
            bundle = bundle or self._bundle(c)
            if bundle is None:
                return
            op = next((o for o in bundle.manifest.ops if o.slot == target), None)
            if op is None:
                self._transient(c, "qualify", f"{target}: bundle has no op for target {target}", "no_decision")
                return
            incumbent = ledger.crown_of(self.db, target)
            start = self.chain.current_block()
            if incumbent is not None and start <= incumbent.crowned_block:
                continue  # measured in the crown's own block it would be stale; next pass
            inc = self._incumbent_bundle(incumbent) if incumbent is not None and pool.head_to_head else None
            pool.submit(
                QualifyJob(
                    key, c.id, target, dict(bundle.files), op, incumbent, dict(inc.files) if inc is not None else None, start
                )
            )
            running.add((c.id, target))
            self.log.info(
                "qualify.dispatch",
                contribution=c.id,
                target=target,
                key=key,
                incumbent=incumbent.contribution_id if incumbent else "stock",
            )

    def _collect(self, r: JobResult) -> None:
        """One finished job into the DB, once: a key already recorded (a retried or twice-delivered
        job) or a contribution that moved on meanwhile is dropped."""
        if self.db.get("job:" + r.key) is not None:
            self.log.warning("qualify.duplicate_result", key=r.key, worker=r.worker)
            return
        if lifecycle.SHUTDOWN.is_set():  # its engines may have been killed under it, whatever it said
            c = self.db.find(r.contribution_id)
            if c is not None and c.state == "verified":
                self._note_interrupted(c, r.target, r.error or f"{r.result.verdict if r.result else '?'} under shutdown")
            return
        c = self.db.find(r.contribution_id)
        if c is None or c.state != "verified" or r.target not in c.todo:
            self.db.put("job:" + r.key, "stale")
            self.log.info("qualify.stale_result", key=r.key, state=c.state if c else None)
            return
        problem = None if r.result is None else result_problem(r.result)
        if r.result is None or problem is not None:
            why = r.error or problem
            self._tried("qualify", failed=True)
            self.db.put("job:" + r.key, "error")
            self._transient(c, "qualify", f"{r.target}: {why} (on {r.worker})", "no_decision")
            return
        result = r.result if r.result.target == r.target else replace(r.result, target=r.target)
        try:
            self._record(c, r.target, result, r.start_block, r.incumbent_id, key=r.key)
        except (ChainDown, lifecycle.Interrupted):
            raise
        except Exception as exc:  # noqa: BLE001 - an answer this validator cannot file is the job's error
            # (retried, then NO_DECISION), never a crashed pass that loses it and runs the job again
            why = describe(exc) if is_resource_error(exc) else f"{type(exc).__name__}: {exc}"
            self.log.warning("qualify.unrecordable", key=r.key, error=storable(why)[:300])
            self._tried("qualify", failed=True)
            self.db.put("job:" + r.key, "error")
            self._transient(c, "qualify", f"{r.target}: result could not be recorded: {why}", "no_decision")
            return
        self._tried("qualify")
        self.metrics.verdict(result.verdict)
        self._moved("qualified")

    def _interrupted(self, c: Contribution, target: str, exc: Exception) -> None:
        """The verdict in flight is NO_DECISION and the item stays due, no attempt counted (the
        validator stopped; the arena did not fail): the next start qualifies it again."""
        why = self._note_interrupted(c, target, str(exc))
        raise lifecycle.Interrupted(why) from exc

    def _note_interrupted(self, c: Contribution, target: str, cause: str) -> str:
        why = storable(f"qualify: {target}: NO_DECISION, interrupted by shutdown; retried after restart ({cause})")
        with self.db.tx() as con:
            self.db.update(con, c.id, {"reason": why[:2000], "next_try_at": 0})
        self.log.warning("qualify.interrupted", contribution=c.id, target=target, verdict="NO_DECISION")
        return why

    def _finish(self, con: Any, c: Contribution) -> None:
        rows = con.execute(
            "SELECT target, verdict, reason FROM evidence WHERE contribution_id=? AND id IN"
            " (SELECT MAX(id) FROM evidence WHERE contribution_id=? GROUP BY target)",
            (c.id, c.id),
        ).fetchall()
        text = "; ".join(f"{r['target']} {VERDICT_WORDS.get(r['verdict'], r['verdict'])}: {r['reason']}" for r in rows)[
            :2000
        ]
        if rows and all(r["verdict"] == "FAIL" for r in rows):
            self.db.move(con, c.id, "failed", "qualify: " + text, todo=())
        else:
            self.db.move(con, c.id, "qualified", text, todo=())
