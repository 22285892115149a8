"""Evidence, settlement, crowns and weight publications in the state DB.

Settlement of a target is one transaction: read the incumbent and the unsettled evidence,
run the pure `settle_target`, mark exactly those rows settled (a row already settled makes
the transaction fail), and write the crown change. A restart therefore never settles a row
twice, and a crown never changes without the evidence that changed it being marked.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cacheon_subnet.records import QualifyResult, detail_json
from cacheon_subnet.scoring.settle import Crown, Decision, Evidence, SpeedPolicy, settle_target
from cacheon_subnet.validator import bumps
from cacheon_subnet.validator.blame import incumbent_blamed
from cacheon_subnet.validator.crownrows import crown_of as crown_of  # re-exported: crown reads live there
from cacheon_subnet.validator.crownrows import crowns as crowns
from cacheon_subnet.validator.crownrows import requeue as _requeue
from cacheon_subnet.validator.crownrows import retire as _retire
from cacheon_subnet.validator.crownrows import write_crown as _write_crown
from cacheon_subnet.validator.state import ACTIVE, StateDB, StateError

WEIGHT_STATES = ("pending", "published", "verified", "failed", "deferred")


@dataclass(frozen=True)
class SettleOutcome:
    target: str
    settlement_id: int
    block: int
    crown: Crown | None
    changed: bool
    decisions: tuple[Decision, ...]
    remeasure: tuple[str, ...]  # contributions sent back for another measurement


@dataclass(frozen=True)
class WeightsRow:
    id: int
    state: str
    created_block: int
    block: int | None
    version_key: int
    uids: tuple[int, ...]
    vals: tuple[int, ...]
    attempts: int
    reason: str
    readback: dict[str, Any] | None

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> WeightsRow:
        return cls(
            r["id"],
            r["state"],
            r["created_block"],
            r["block"],
            r["version_key"],
            tuple(json.loads(r["uids"])),
            tuple(json.loads(r["vals"])),
            r["attempts"],
            r["reason"],
            json.loads(r["readback"]) if r["readback"] else None,
        )


# -- evidence -------------------------------------------------------------------------------


def record_evidence(
    con: sqlite3.Connection, cid: str, result: QualifyResult, evaluated_block: int, incumbent_id: str | None
) -> int:
    """Insert one measurement of (contribution, target); round = earlier rows for the pair. The
    detail is stored as its record's JSON (records/detail.py; `{}` for none)."""
    n = con.execute("SELECT COUNT(*) FROM evidence WHERE contribution_id=? AND target=?", (cid, result.target)).fetchone()[0]
    cur = con.execute(
        "INSERT INTO evidence(contribution_id, target, round, verdict, quality_ok, speedup,"
        " speedup_vs_stock, noise, arena_id, label, evaluated_block, incumbent_id, reason, detail,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            cid,
            result.target,
            n,
            result.verdict,
            int(result.quality_ok),
            float(result.speedup),
            float(result.speedup_vs_stock),
            float(result.noise),
            result.arena_id,
            result.label,
            int(evaluated_block),
            incumbent_id,
            result.reason,
            detail_json(result.detail),
            time.time(),
        ),
    )
    return int(cur.lastrowid or 0)


def evidence_rows(db: StateDB, cid: str | None = None) -> list[dict[str, Any]]:
    sql = "SELECT * FROM evidence"
    args: tuple[str, ...] = ()
    if cid is not None:
        sql, args = sql + " WHERE contribution_id=?", (cid,)
    return [dict(r) for r in db.con.execute(sql + " ORDER BY id", args).fetchall()]


def unsettled_targets(db: StateDB) -> list[str]:
    """Targets with unsettled evidence, and those whose re-measure after an arena change must close
    without any (the holder failed verification under the new pins: bumps.stranded)."""
    rows = db.con.execute("SELECT DISTINCT target FROM evidence WHERE settled=0 ORDER BY target")
    return sorted({r[0] for r in rows} | set(bumps.stranded(db, db.con)))


def archives_in_use(db: StateDB) -> frozenset[str]:
    """The digests whose archives a stage may still read (stages/prune.py): contributions in the
    intake, those with unsettled evidence, and crown holders."""
    rows = db.con.execute(
        "SELECT digest FROM contributions WHERE state IN ('queued', 'fetched', 'screened', 'verified')"
        " UNION SELECT c.digest FROM evidence e JOIN contributions c ON c.id = e.contribution_id WHERE e.settled = 0"
        " UNION SELECT c.digest FROM crowns k JOIN contributions c ON c.id = k.contribution_id"
    )
    return frozenset(r[0] for r in rows if r[0])


def remeasure_foreign_crowns(db: StateDB, arena_id: str) -> list[tuple[str, str, str]]:
    """At start: every crown measured in another arena (a pin bump, a new arena config) is kept,
    labelled with its old arena, while its holder is verified again and timed against the new stock;
    settlement then keeps, hands over or retires it with its reason (validator/bumps.py)."""
    return bumps.rebase_foreign_crowns(db, arena_id, bumps.current_pins())


# -- crowns ---------------------------------------------------------------------------------


def _holders(con: sqlite3.Connection, target: str, max_commit: int, block: int, hold_blocks: int) -> list[str]:
    """In-progress contributions that may still bring evidence for `target` and committed no
    later than the evidence being settled: settling now would deny them earlier-commit priority.
    Waiting is bounded: a contribution holds for at most hold_blocks after intake, and the caller
    stops waiting hold_blocks after its oldest unsettled row was measured."""
    marks = ",".join("?" * len(ACTIVE))
    rows = con.execute(
        f"SELECT id, state, todo, seen_block FROM contributions WHERE state IN ({marks}) AND commit_block<=?",
        (*ACTIVE, max_commit),
    ).fetchall()
    out = []
    for r in rows:
        if r["state"] == "verified" and target not in json.loads(r["todo"]):
            continue
        if r["seen_block"] is not None and block - int(r["seen_block"]) >= hold_blocks:
            continue
        out.append(r["id"])
    return out


def _baseline(con: sqlite3.Connection, cid: str | None) -> str | None:
    """What a row was measured against, as the crown now names it: a crown that intake moved to
    an earlier commit of the same content (intake._swap) is the same baseline."""
    if cid is None:
        return None
    r = con.execute("SELECT rule, duplicate_of FROM contributions WHERE id=?", (cid,)).fetchone()
    return r["duplicate_of"] if r is not None and r["rule"] == "duplicate" and r["duplicate_of"] else cid


def settle(
    db: StateDB, target: str, policy: SpeedPolicy, block: int, *, hold_blocks: int = 300, max_remeasure: int = 1
) -> SettleOutcome | list[str] | None:
    """Settle `target`'s unsettled evidence at `block`. Returns None (nothing to settle), the
    ids holding settlement back, or the outcome."""
    with db.tx() as con:
        rows = con.execute(
            "SELECT e.*, c.hotkey, c.commit_block FROM evidence e JOIN contributions c ON"
            " c.id=e.contribution_id WHERE e.settled=0 AND e.target=? ORDER BY e.id",
            (target,),
        ).fetchall()
        bump = bumps.open_bump(con, target)  # the crown is being re-measured after an arena change
        if bump is not None and bumps.holder_busy(db, con, bump):
            return [bump.contribution_id]  # its measurement against the new stock comes first
        if not rows and bump is None:
            return None
        # the wait is bounded per row too: each contribution holds for hold_blocks after its intake,
        # but fresh evidence raises the commit horizon for the next holder, so alternating Sybils
        # (or busy honest traffic) chained holds forever (red team); the oldest row waits no longer
        waited = block - min((int(r["evaluated_block"]) for r in rows), default=block - hold_blocks)
        held = (
            _holders(con, target, max(r["commit_block"] for r in rows), block, hold_blocks) if waited < hold_blocks else []
        )
        if held:
            return held
        incumbent = crown_of(db, target, con)
        at = max([block, *(r["evaluated_block"] for r in rows)])
        evidence = [
            Evidence(
                r["contribution_id"],
                target,
                r["hotkey"],
                r["commit_block"],
                r["verdict"],
                bool(r["quality_ok"]),
                r["speedup"],
                r["noise"],
                r["arena_id"],
                r["evaluated_block"],
                _baseline(con, r["incumbent_id"]),
            )
            for r in rows
        ]
        result = settle_target(target, incumbent, evidence, policy, at)
        new = result.crown
        cur = con.execute(
            "INSERT INTO settlements(target, block, incumbent_id, crown_id, evidence_count, at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                target,
                at,
                incumbent.contribution_id if incumbent else None,
                new.contribution_id if new else None,
                len(rows),
                time.time(),
            ),
        )
        sid = int(cur.lastrowid or 0)
        by_cid = {d.contribution_id: d for d in result.decisions}
        for r in rows:
            d = by_cid[r["contribution_id"]]
            done = con.execute(
                "UPDATE evidence SET settled=1, settlement_id=?, outcome=?, outcome_reason=? WHERE id=? AND settled=0",
                (sid, d.outcome, d.reason, r["id"]),
            )
            if done.rowcount != 1:
                raise StateError(f"evidence {r['id']} of {r['contribution_id']} was settled twice")
        if bump is not None:  # incumbent is None here: crown_of hides a crown under re-measure
            new, retry = bumps.resolve(db, con, bump, result, rows, sid)
            skip = {bump.contribution_id}
            again = _remeasure(
                db,
                con,
                target,
                [d for d in result.decisions if d.contribution_id not in skip],
                rows,
                None,
                policy,
                max_remeasure,
            )
            return SettleOutcome(target, sid, at, new, new is not None, result.decisions, (*again, *filter(None, [retry])))
        changed = new is not None and new != incumbent
        if changed:
            assert new is not None
            _write_crown(con, new, sid, by_cid[new.contribution_id].reason)
        blamed, problem = incumbent_blamed(rows, incumbent) if incumbent is not None and not changed else ([], None)
        if incumbent is not None and blamed:
            crown_row = con.execute("SELECT * FROM crowns WHERE target=?", (target,)).fetchone()
            _retire(
                db,
                con,
                crown_row,
                f"crown retired: measured against it, {blamed[0]} could not be judged "
                f"because {problem}; the holder is measured again against stock",
            )
            _requeue(db, con, target, blamed, "the incumbent it was measured against was retired")
        again = _remeasure(db, con, target, result.decisions, rows, incumbent, policy, max_remeasure)
        return SettleOutcome(target, sid, at, new, changed, result.decisions, again)


def _remeasure(
    db: StateDB,
    con: sqlite3.Connection,
    target: str,
    decisions: Sequence[Decision],
    rows: Sequence[sqlite3.Row],
    incumbent: Crown | None,
    policy: SpeedPolicy,
    limit: int,
) -> tuple[str, ...]:
    """no_decision that a new measurement can fix (stale stack, other arena, noisy box): queue
    the target again for that contribution, at most `limit` times. Implausible speedups are
    flagged, not re-measured."""
    out = []
    for d in decisions:
        if d.outcome != "no_decision" or (incumbent and d.contribution_id == incumbent.contribution_id):
            continue
        mine = [r for r in rows if r["contribution_id"] == d.contribution_id]
        if any(r["verdict"] == "PASS" and r["speedup"] > policy.max_speedup for r in mine):
            continue
        c = db.contribution(d.contribution_id, con)
        if c.remeasures >= limit or c.rule is not None or c.state not in ("qualified", "verified"):
            continue
        todo = tuple(sorted({*c.todo, target}))
        why = f"re-measure {target}: {d.reason}"
        if c.state == "qualified":
            db.move(con, c.id, "verified", why, todo=todo, remeasures=c.remeasures + 1)
        else:
            db.update(con, c.id, {"todo": todo, "remeasures": c.remeasures + 1})
        out.append(c.id)
    return tuple(out)


# -- weight publications --------------------------------------------------------------------


def last_weights(db: StateDB, states: Sequence[str] = WEIGHT_STATES) -> WeightsRow | None:
    marks = ",".join("?" * len(states))
    row = db.con.execute(
        f"SELECT * FROM weights WHERE state IN ({marks}) ORDER BY id DESC LIMIT 1", tuple(states)
    ).fetchone()
    return WeightsRow.from_row(row) if row else None


def weights_rows(db: StateDB) -> list[WeightsRow]:
    return [WeightsRow.from_row(r) for r in db.con.execute("SELECT * FROM weights ORDER BY id")]


def open_weights(db: StateDB, created_block: int, version_key: int, uids: Sequence[int], vals: Sequence[int]) -> WeightsRow:
    """A `pending` publication, written before set_weights so a crash can be resolved later."""
    now = time.time()
    with db.tx() as con:
        cur = con.execute(
            "INSERT INTO weights(state, created_block, version_key, uids, vals, attempts,"
            " created_at, updated_at) VALUES ('pending', ?, ?, ?, ?, 1, ?, ?)",
            (created_block, version_key, json.dumps(list(uids)), json.dumps(list(vals)), now, now),
        )
        row = con.execute("SELECT * FROM weights WHERE id=?", (cur.lastrowid,)).fetchone()
    return WeightsRow.from_row(row)


def update_weights(
    db: StateDB,
    wid: int,
    state: str,
    reason: str = "",
    *,
    block: int | None = None,
    version_key: int | None = None,
    readback: dict[str, Any] | None = None,
    attempt: bool = False,
) -> None:
    if state not in WEIGHT_STATES:
        raise StateError(f"weights {wid}: unknown state {state!r}")
    with db.tx() as con:
        con.execute(
            "UPDATE weights SET state=?, reason=?, block=COALESCE(?, block),"
            " version_key=COALESCE(?, version_key), readback=COALESCE(?, readback),"
            " attempts=attempts+?, updated_at=? WHERE id=?",
            (
                state,
                reason,
                block,
                version_key,
                json.dumps(readback, sort_keys=True) if readback is not None else None,
                int(attempt),
                time.time(),
                wid,
            ),
        )
