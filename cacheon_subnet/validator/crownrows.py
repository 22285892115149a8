"""The crown table's rows: read, write, record in history, retire, send a holder back.

Why apart from ledger.py: settlement (ledger) and a pin bump's re-measure (bumps.py) both write
crowns, and both must write them the same way (a history row for every change, a holder sent back
to be verified again the same way); this module is what both stand on. Every writer takes the
caller's transaction: a crown never changes without the rows that explain it.

A crown under re-measure after an arena change (an open row of `pin_bumps`) stays in `crowns`,
labelled with its old arena, so its holder is still paid and every reader still sees it; but it
is nobody's baseline: `crown_of` hides it, so challengers and the holder itself are measured
against the new stock until the verdict (bumps.py).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.validator.state import StateDB

_HIDDEN = "target NOT IN (SELECT target FROM pin_bumps WHERE state='open')"


def crown_from_row(r: sqlite3.Row) -> Crown:
    return Crown(
        r["target"],
        r["hotkey"],
        r["contribution_id"],
        r["commit_block"],
        r["crowned_block"],
        r["measured_speedup"],
        r["speedup_vs_stock"],
        r["arena_id"],
    )


def crown_of(db: StateDB, target: str, con: sqlite3.Connection | None = None) -> Crown | None:
    """The crown a measurement of `target` runs against (None: stock). A crown being re-measured
    after an arena change is hidden: it was never verified under the new pins."""
    row = (con or db.con).execute(f"SELECT * FROM crowns WHERE target=? AND {_HIDDEN}", (target,)).fetchone()
    return crown_from_row(row) if row else None


def crowns(db: StateDB) -> list[Crown]:
    """Every crown, those under re-measure included (still paid, labelled with their old arena)."""
    return [crown_from_row(r) for r in db.con.execute("SELECT * FROM crowns ORDER BY target")]


def crown_row(con: sqlite3.Connection, target: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = con.execute("SELECT * FROM crowns WHERE target=?", (target,)).fetchone()
    return row


def write_crown(con: sqlite3.Connection, c: Crown, sid: int, reason: str) -> None:
    values = (
        c.target,
        c.hotkey,
        c.contribution_id,
        c.commit_block,
        c.crowned_block,
        c.measured_speedup,
        c.speedup_vs_stock,
        c.arena_id,
        sid,
    )
    con.execute(
        "INSERT OR REPLACE INTO crowns(target, hotkey, contribution_id, commit_block,"
        " crowned_block, measured_speedup, speedup_vs_stock, arena_id, settlement_id,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*values, time.time()),
    )
    con.execute(
        "INSERT INTO crown_history(target, hotkey, contribution_id, commit_block, crowned_block,"
        " measured_speedup, speedup_vs_stock, arena_id, settlement_id, reason, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*values, reason, time.time()),
    )


def remove(con: sqlite3.Connection, r: sqlite3.Row, why: str) -> None:
    """Delete crown row `r`; its history row says why."""
    con.execute("DELETE FROM crowns WHERE target=?", (r["target"],))
    con.execute(
        "INSERT INTO crown_history(target, hotkey, contribution_id, commit_block, crowned_block,"
        " measured_speedup, speedup_vs_stock, arena_id, settlement_id, reason, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            r["target"],
            r["hotkey"],
            r["contribution_id"],
            r["commit_block"],
            r["crowned_block"],
            r["measured_speedup"],
            r["speedup_vs_stock"],
            r["arena_id"],
            r["settlement_id"],
            why,
            time.time(),
        ),
    )


def send_back(db: StateDB, con: sqlite3.Connection, cid: str, target: str, why: str) -> bool:
    """Have holder `cid` verified again (new pins, new shapes) and measured on `target`, like any
    challenger. False when it cannot be (a rule retired it, or it ended failed / no_decision)."""
    c = db.contribution(cid, con)
    if c.rule is not None:
        return False
    if c.state == "qualified":  # verified again first, then measured (remeasures+1: a fresh job key)
        db.move(con, c.id, "screened", why, remeasures=c.remeasures + 1)
    elif c.state == "verified":
        db.update(con, c.id, {"todo": tuple(sorted({*c.todo, target})), "remeasures": c.remeasures + 1})
    return c.state in ("qualified", "verified", "queued", "fetched", "screened")


def retire(db: StateDB, con: sqlite3.Connection, r: sqlite3.Row, why: str) -> str:
    """Remove crown row `r` (history says why) and send its holder back to be verified and
    measured again like any challenger. Returns the holder's contribution id."""
    remove(con, r, why)
    send_back(db, con, r["contribution_id"], r["target"], why)
    return str(r["contribution_id"])


def requeue(db: StateDB, con: sqlite3.Connection, target: str, ids: Sequence[str], why: str) -> None:
    """Queue `target` again for contributions whose no_decision was not theirs (any count)."""
    for cid in ids:
        c = db.contribution(cid, con)
        if c.rule is not None or c.state not in ("qualified", "verified", "no_decision"):
            continue
        todo = tuple(sorted({*c.todo, target}))
        if c.state == "verified":
            db.update(con, c.id, {"todo": todo, "remeasures": c.remeasures + 1})
        else:
            db.move(con, c.id, "verified", f"re-measure {target}: {why}", todo=todo, remeasures=c.remeasures + 1)
