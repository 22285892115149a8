"""A pin bump on the validator side: every crown measured in another arena is re-measured
against the new stock, then kept (re-based in the new arena) or retired with its reason.

Why: a speedup only means something in the arena it was measured in (scoring/settle.py), and the
arena id covers the pins (arena/config.py identity()): moving SGLang, sglang-kernel or torch makes
every crown's number a claim about an engine nobody serves any more. Dropping the crowns would
burn every slot's share on the day of the bump and forget what the subnet had found; keeping them
as they are would leave them unchallengeable (every new PASS is "not comparable"). So each one
stays, paid and labelled with its old arena and pins, while its holder is verified again and timed
against the new stock; settlement waits for that measurement (challengers timed meanwhile are
measured against the same stock), then the crown stays with its new arena id, goes to a challenger
that beat it there, or is retired with the number that lost it. One row of `pin_bumps` per re-measure,
written in the same transaction as the crown change: a kill -9 anywhere resumes where it was.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cacheon_subnet import pins as _pins
from cacheon_subnet.scoring.settle import Crown, Decision, Settlement
from cacheon_subnet.validator import crownrows
from cacheon_subnet.validator.state import ACTIVE, StateDB

MAX_TRIES = 2  # a holder's re-measure that could not be judged is repeated this many times, then retired
_KV = "arena_pins:"  # kv key prefix: the pins each arena this validator ran was built on


class BumpState(StrEnum):
    OPEN = "open"  # the holder is being re-measured; the crown is kept with its old arena
    KEPT = "kept"  # it still wins against the new stock: re-based in the new arena
    RETIRED = "retired"  # it no longer wins (or could not be measured): removed, reason kept
    CANCELLED = "cancelled"  # the validator went back to the crown's own arena before the verdict


@dataclass(frozen=True)
class Bump:
    id: int
    target: str
    contribution_id: str
    old_arena: str
    new_arena: str
    old_pins: dict[str, str] | None
    new_pins: dict[str, str]
    tries: int

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> Bump:
        old = json.loads(r["old_pins"]) if r["old_pins"] else None
        return cls(
            r["id"],
            r["target"],
            r["contribution_id"],
            r["old_arena"],
            r["new_arena"],
            old,
            json.loads(r["new_pins"]),
            r["tries"],
        )

    @property
    def head(self) -> str:
        """What moved: 'pin bump sglang 0.5.13.post1 -> 0.5.14', or the arena ids when the pins did not."""
        if self.old_pins is not None:
            moved = [
                f"{k.replace('_', '-')} {self.old_pins.get(k, '?')} -> {v}"
                for k, v in sorted(self.new_pins.items())
                if self.old_pins.get(k) != v
            ]
            if moved:
                return "pin bump " + ", ".join(moved)
            return f"arena change {self.old_arena} -> {self.new_arena} (pins unchanged)"
        return f"arena change {self.old_arena} -> {self.new_arena} (the old arena's pins were not recorded)"


def current_pins() -> dict[str, str]:
    """The pins the arena id covers (arena/config.py identity()), read at call time."""
    return {"sglang": _pins.SGLANG_PIN, "sglang_kernel": _pins.SGLANG_KERNEL_PIN, "torch": _pins.TORCH_PIN}


def open_bump(con: sqlite3.Connection, target: str) -> Bump | None:
    r = con.execute("SELECT * FROM pin_bumps WHERE target=? AND state='open'", (target,)).fetchone()
    return Bump.from_row(r) if r else None


def _close(con: sqlite3.Connection, b: Bump, state: BumpState, reason: str, speedup: float | None = None) -> None:
    con.execute(
        "UPDATE pin_bumps SET state=?, reason=?, speedup=?, closed_at=? WHERE id=? AND state='open'",
        (state.value, reason, speedup, time.time(), b.id),
    )


def _pins_of(con: sqlite3.Connection, arena: str) -> dict[str, str] | None:
    r = con.execute("SELECT value FROM kv WHERE key=?", (_KV + arena,)).fetchone()
    return dict(json.loads(r[0])) if r else None


def rebase_foreign_crowns(db: StateDB, arena_id: str, pins: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """At start: open a re-measure for every crown measured in another arena than `arena_id`
    (idempotent: a restart finds its open rows and changes nothing). Returns (target, holder, what
    was done) for the log."""
    out: list[tuple[str, str, str]] = []
    with db.tx() as con:
        db.put(_KV + arena_id, json.dumps(dict(pins), sort_keys=True), con)
        for r in con.execute("SELECT * FROM pin_bumps WHERE state='open'").fetchall():
            crown = crownrows.crown_row(con, r["target"])
            if crown is None or crown["arena_id"] == arena_id:  # back in the crown's own arena
                _close(con, Bump.from_row(r), BumpState.CANCELLED, f"back in arena {arena_id} before the verdict")
                out.append((r["target"], r["contribution_id"], "cancelled"))
        for crown in con.execute("SELECT * FROM crowns WHERE arena_id!=?", (arena_id,)).fetchall():
            b = open_bump(con, crown["target"])
            if b is not None and b.new_arena == arena_id:
                continue  # a restart in the middle of the re-measure: its state is all in the DB
            if b is not None:  # the arena moved again before the verdict: re-measure in this one
                con.execute(
                    "UPDATE pin_bumps SET new_arena=?, new_pins=?, tries=0 WHERE id=?",
                    (arena_id, json.dumps(dict(pins), sort_keys=True), b.id),
                )
            else:
                con.execute(
                    "INSERT INTO pin_bumps(target, contribution_id, hotkey, old_arena, new_arena, old_pins,"
                    " new_pins, state, opened_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'open', ?)",
                    (
                        crown["target"],
                        crown["contribution_id"],
                        crown["hotkey"],
                        crown["arena_id"],
                        arena_id,
                        json.dumps(_pins_of(con, crown["arena_id"]), sort_keys=True)
                        if _pins_of(con, crown["arena_id"])
                        else None,
                        json.dumps(dict(pins), sort_keys=True),
                        time.time(),
                    ),
                )
            b = open_bump(con, crown["target"])
            assert b is not None
            why = f"{b.head}: re-measured against the new stock on {b.target}"
            if crownrows.send_back(db, con, crown["contribution_id"], crown["target"], why):
                out.append((crown["target"], crown["contribution_id"], "re-measure"))
                continue
            c = db.contribution(crown["contribution_id"], con)
            reason = f"{b.head}: retired, the holder cannot be re-measured ({c.state}, rule {c.rule}: {c.reason})"
            crownrows.remove(con, crown, reason)
            _close(con, b, BumpState.RETIRED, reason)
            out.append((crown["target"], crown["contribution_id"], "retired"))
    return out


def holder_busy(db: StateDB, con: sqlite3.Connection, b: Bump) -> bool:
    """The holder may still bring its measurement in the new arena: settlement waits for it
    (bounded: the pipeline ends every contribution's stages in a bounded number of attempts)."""
    c = db.contribution(b.contribution_id, con)
    return c.state in ACTIVE and (c.state != "verified" or b.target in c.todo)


def _measured(holder_rows: Sequence[sqlite3.Row], arena: str) -> float | None:
    passes = [r["speedup"] for r in holder_rows if r["verdict"] == "PASS" and r["arena_id"] == arena]
    return min(passes) if passes else None


def resolve(
    db: StateDB,
    con: sqlite3.Connection,
    b: Bump,
    result: Settlement,
    rows: Sequence[sqlite3.Row],
    sid: int,
) -> tuple[Crown | None, str | None]:
    """After settling `b.target` against the new stock: keep, hand over, retire or try again.
    Returns the crown now in force (None: none) and the contribution to measure again, if any."""
    old = crownrows.crown_row(con, b.target)
    holder = old["contribution_id"] if old is not None else b.contribution_id
    d = next((x for x in result.decisions if x.contribution_id == holder), None)
    x = _measured([r for r in rows if r["contribution_id"] == holder], b.new_arena)
    at = f"re-measured at C/B {x:.4f} against the new stock" if x is not None else "not re-measured"
    new = result.crown
    if new is not None and new.contribution_id == holder:
        was = f" (was x{old['speedup_vs_stock']:.4f} in {old['arena_id']})" if old is not None else ""
        reason = f"{b.head}: {at}; crown kept in arena {new.arena_id}{was}"
        crownrows.write_crown(con, new, sid, reason)
        _close(con, b, BumpState.KEPT, reason, x)
        return new, None
    if new is None and (d is None or d.outcome == "no_decision") and b.tries < MAX_TRIES:
        c = db.contribution(holder, con)
        if c.rule is None and c.state in ("qualified", "verified"):  # verified under the new pins already
            crownrows.requeue(db, con, b.target, [holder], f"{b.head}: {_why(db, con, holder, d)}")
            con.execute("UPDATE pin_bumps SET tries=tries+1 WHERE id=?", (b.id,))
            return None, holder  # kept as it is, labelled with its old arena, until a verdict
    reason = f"{b.head}: {at}; {_why(db, con, holder, d)}"
    if new is not None:
        reason += f"; the crown goes to {new.contribution_id[:12]} at x{new.speedup_vs_stock:.4f} over the new stock"
    if old is not None:
        crownrows.remove(con, old, "crown retired: " + reason)
    if new is not None:
        crownrows.write_crown(con, new, sid, _won(result, new))
    _close(con, b, BumpState.RETIRED, reason, x)
    return new, None


def _why(db: StateDB, con: sqlite3.Connection, holder: str, d: Decision | None) -> str:
    if d is not None:
        return f"{d.outcome}: {d.reason}"
    c = db.contribution(holder, con)
    return f"no measurement in the new arena ({c.state}: {c.reason})"


def _won(result: Settlement, new: Crown) -> str:
    return next((d.reason for d in result.decisions if d.contribution_id == new.contribution_id), "crowned")


def stranded(db: StateDB, con: sqlite3.Connection) -> list[str]:
    """Targets with an open re-measure whose holder will bring no evidence any more (it failed
    verification under the new pins, or gave up): settlement must close them without evidence."""
    out = []
    for r in con.execute("SELECT * FROM pin_bumps WHERE state='open' ORDER BY target").fetchall():
        if not holder_busy(db, con, Bump.from_row(r)):
            out.append(str(r["target"]))
    return out


def report(con: sqlite3.Connection, limit: int = 50) -> list[dict[str, Any]]:
    """The newest re-measures, each with one line for `cacheon status` and the page."""
    out = []
    for r in con.execute("SELECT * FROM pin_bumps ORDER BY id DESC LIMIT ?", (limit,)).fetchall():
        b = Bump.from_row(r)
        line = (
            f"{b.head}: re-measuring against the new stock (crown kept, labelled {b.old_arena}, until the verdict)"
            if r["state"] == BumpState.OPEN
            else r["reason"]
        )
        out.append(
            {
                "target": b.target,
                "contribution_id": b.contribution_id,
                "hotkey": r["hotkey"],
                "state": r["state"],
                "old_arena": b.old_arena,
                "new_arena": b.new_arena,
                "speedup": r["speedup"],
                "line": line,
            }
        )
    return out
