"""Qualify (verified -> qualified/failed) with one arena in the loop's own thread, and the
filing of a verdict that the pool stage (dispatch.py) shares: every op's evidence lands in one
transaction, with a pool job's idempotency key, so a retried or twice-delivered job counts once.
Arena trouble says nothing about the bundle: retried, then NO_DECISION."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from cacheon_subnet import lifecycle
from cacheon_subnet.bundle import Bundle
from cacheon_subnet.records import Qualifier, QualifyResult, result_problem
from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.stages.items import Archives, Items
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import BlockClock, Log, PairedQualifier, VerdictCounter
from cacheon_subnet.validator.state import Contribution, StateDB
from cacheon_subnet.validator.storable import storable
from cacheon_subnet.words import VERDICT_WORDS


class Filing:
    """Writes verdicts into the state DB (the loop thread's alone)."""

    def __init__(self, db: StateDB, chain: BlockClock, log: Log) -> None:
        self.db, self.chain, self.log = db, chain, log

    def record(
        self,
        c: Contribution,
        target: str,
        result: QualifyResult,
        start: int,
        incumbent_id: str | None,
        key: str | None = None,
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
                self.finish(con, c)
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

    def finish(self, con: sqlite3.Connection, c: Contribution) -> None:
        """Every target measured: failed when every op FAILed, else qualified (settlement decides)."""
        rows = con.execute(
            "SELECT target, verdict, reason FROM evidence WHERE contribution_id=? AND id IN"
            " (SELECT MAX(id) FROM evidence WHERE contribution_id=? GROUP BY target)",
            (c.id, c.id),
        ).fetchall()
        text = "; ".join(f"{r['target']} {VERDICT_WORDS.get(r['verdict'], r['verdict'])}: {r['reason']}" for r in rows)
        if rows and all(r["verdict"] == "FAIL" for r in rows):
            self.db.move(con, c.id, "failed", "qualify: " + text[:2000], todo=())
        else:
            self.db.move(con, c.id, "qualified", text[:2000], todo=())

    def finish_now(self, c: Contribution) -> None:
        with self.db.tx() as con:
            self.finish(con, c)

    def note_interrupted(self, c: Contribution, target: str, cause: str) -> str:
        """The verdict in flight is NO_DECISION and the item stays due, no attempt counted (the
        validator stopped; the arena did not fail): the next start qualifies it again."""
        why = storable(f"qualify: {target}: NO_DECISION, interrupted by shutdown; retried after restart ({cause})")
        with self.db.tx() as con:
            self.db.update(con, c.id, {"reason": why[:2000], "next_try_at": 0})
        self.log.warning("qualify.interrupted", contribution=c.id, target=target, verdict="NO_DECISION")
        return why


class QualifyStage:
    """One arena in the loop's thread (no overlap: the CPU-timing arena, or --no-overlap).
    `paired`: the same qualifier when it runs the incumbent's bundle head-to-head."""

    name = "qualify"

    def __init__(
        self,
        db: StateDB,
        chain: BlockClock,
        items: Items,
        archives: Archives,
        filing: Filing,
        qualifier: Qualifier,
        verdicts: VerdictCounter,
        log: Log,
        *,
        paired: PairedQualifier | None = None,
        max_items: int = 16,
    ) -> None:
        self.db, self.chain, self.items, self.archives, self.filing = db, chain, items, archives, filing
        self.qualifier, self.paired, self.verdicts, self.log, self.max_items = qualifier, paired, verdicts, log, max_items

    def run(self, ps: PassState) -> None:
        for c in self.db.due("verified")[: self.max_items]:
            with self.items.guard(ps, c, "qualify"):
                bundle = self.archives.bundle(c)
                if bundle is not None:
                    self._qualify(ps, c, bundle)

    def _qualify(self, ps: PassState, c: Contribution, bundle: Bundle) -> None:
        if not c.todo:  # defensive: nothing left to measure, close it
            self.filing.finish_now(c)
            return
        for target in c.todo:
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
                result = self._measure(bundle, target, incumbent)
            except Exception as exc:  # noqa: BLE001 - arena trouble says nothing about the bundle
                ps.attempted("qualify", failed=True)
                if isinstance(exc, lifecycle.Interrupted) or lifecycle.SHUTDOWN.is_set():
                    why = self.filing.note_interrupted(c, target, str(exc))
                    raise lifecycle.Interrupted(why) from exc
                self.items.transient(c, "qualify", f"{target}: {type(exc).__name__}: {exc}", "no_decision")
                return
            ps.attempted("qualify")
            self.verdicts.verdict(result.verdict)
            self.filing.record(c, target, result, start, incumbent.contribution_id if incumbent else None)
        ps.advanced("qualified")

    def _measure(self, bundle: Bundle, target: str, incumbent: Crown | None) -> QualifyResult:
        op = next((o for o in bundle.manifest.ops if o.slot == target), None)
        if op is None:
            raise LookupError(f"bundle has no op for target {target}")
        if incumbent is not None and self.paired is not None:
            result = self.paired.qualify(bundle, op, incumbent, incumbent_bundle=self.archives.incumbent(incumbent))
        else:
            result = self.qualifier.qualify(bundle, op, incumbent)
        if lifecycle.SHUTDOWN.is_set():  # its engines were killed under it: not the bundle's verdict
            raise lifecycle.Interrupted(f"{target}: qualification stopped by shutdown")
        problem = result_problem(result)
        if problem is not None:
            raise ValueError(problem)
        return result if result.target == target else replace(result, target=target)
