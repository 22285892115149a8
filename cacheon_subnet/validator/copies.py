"""Copies beyond the byte digest: a contribution whose normalized identity (what it runs, with
names, comments, docstrings and formatting stripped: cacheon_subnet/bundle/identity/normalize.py) equals
an earlier commit's is settled from that commit's verdict, without spending GPU time on it.

Same rule as intake's byte-digest dedup, earliest commit first ((commit_block, id) order): the
later one is `failed` with rule "duplicate" and `duplicate_of` the earlier. If the earlier
commit is screened after the later one (it was fetched late), roles swap exactly as for byte
copies (intake._swap: the later one's unsettled evidence is voided, its crown moves).

The identity parses hostile source like the policy scan, so it is computed in the same bounded
child (verify/static/bound.py) by the static screen, which runs just before; here it is read
back by digest, never computed in the validator's own process.
"""

from __future__ import annotations

import sqlite3

from cacheon_subnet.bundle import Bundle
from cacheon_subnet.validator.intake import IntakeEvent, _swap
from cacheon_subnet.validator.state import Contribution, StateDB
from cacheon_subnet.verify.static import bound as policy_bound


def settle_copy(db: StateDB, con: sqlite3.Connection, c: Contribution, bundle: Bundle) -> IntakeEvent | None:
    """Record c's normalized identity and settle it (or its later twin) as a copy; inside the
    caller's transaction. Returns what happened, or None when no other commit runs the same code."""
    static = policy_bound.static_check(bundle, identity=True)  # the screen's child, remembered by digest
    nid = static.norm_id
    if nid is None:
        return None  # sources that do not parse (or a scan that failed): the byte digest is all we have
    db.update(con, c.id, {"norm_id": nid})
    claim = con.execute(
        "SELECT * FROM contributions WHERE norm_id=? AND id!=? AND (rule IS NULL OR rule='superseded')"
        " ORDER BY commit_block, id LIMIT 1",
        (nid, c.id),
    ).fetchone()
    if claim is None:
        return None
    other = Contribution.from_row(claim)
    if (other.commit_block, other.id) < (c.commit_block, c.id):
        reason = (
            f"duplicate of {other.id} (committed earlier at block {other.commit_block}): the same code up to "
            f"names, comments and formatting ({nid[:17]}); settled from its verdict, not re-timed "
            f"(it is {other.state}{': ' + other.reason[:200] if other.reason else ''})"
        )
        db.move(con, c.id, "failed", reason[:2000], rule="duplicate", duplicate_of=other.id)
        return IntakeEvent(c.id, c.hotkey, "duplicate", reason)
    return _swap(db, con, other, c.id, c.commit_block)
