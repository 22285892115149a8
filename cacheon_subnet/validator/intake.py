"""Intake: revealed commitments -> contribution rows, with the rules that keep the queue honest.

Rules, applied in this order, each commitment in its own transaction:

1. parse: a malformed commitment is recorded `failed` with the parser's reason (never a crash).
2. rate limit: at most `max_per_window` contributions per hotkey per `window_blocks` of commit
   blocks; extra ones are `failed` "rate_limited" (they never claim content).
3. dedup by content digest, earliest commit wins ((commit_block, id) order): a later copy is
   `failed` "duplicate of <id> (committed earlier at block N)". If the earlier one shows up
   later in the stream, roles swap: the former claimant becomes the duplicate, its unsettled
   evidence is voided (kept, never deleted) and any crown it holds moves to the earlier commit.
4. supersede: a hotkey's newer accepted commitment replaces its older one for future work only;
   the older one's unfinished work becomes `no_decision` (done evidence and crowns stay).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cacheon_subnet.chain.backend import Commitment
from cacheon_subnet.chain.commitment import CommitmentError, parse
from cacheon_subnet.netpolicy import STRICT, UrlPolicy
from cacheon_subnet.validator.state import ACTIVE, Contribution, StateDB
from cacheon_subnet.validator.storable import storable


@dataclass(frozen=True)
class IntakePolicy:
    """Per-hotkey rate limit: at most max_per_window contributions per window_blocks."""

    max_per_window: int = 4
    window_blocks: int = 360

    def __post_init__(self) -> None:
        if self.max_per_window < 1 or self.window_blocks < 1:
            raise ValueError(f"IntakePolicy: max_per_window and window_blocks must be >= 1, got {self}")


@dataclass(frozen=True)
class IntakeEvent:
    """What intake did with one commitment (for logs and the pass summary)."""

    contribution_id: str
    hotkey: str
    outcome: str  # queued | malformed | rate_limited | duplicate | superseded | swapped
    reason: str


def malformed_id(c: Commitment) -> str:
    """A stable id for a commitment that has no valid bound digest."""
    raw = f"{c.hotkey}\n{c.commit_block}\n{c.data}".encode("utf-8", "replace")
    return "malformed:" + hashlib.sha256(raw).hexdigest()[:40]


def _malformed(db: StateDB, c: Commitment, block: int, why: str) -> list[IntakeEvent]:
    cid = malformed_id(c)
    if db.find(cid) is not None:
        return []
    why = storable(why)[:2000]
    with db.tx() as con:
        db.insert(
            con,
            cid=cid,
            hotkey=storable(c.hotkey),
            uid=c.uid,
            commit_block=c.commit_block,
            reveal_block=c.reveal_block,
            url=None,
            digest=None,
            state="failed",
            reason=f"malformed commitment: {why}",
            rule="malformed",
            seen_block=block,
        )
    return [IntakeEvent(cid, c.hotkey, "malformed", why)]


def intake(
    db: StateDB, commitments: Sequence[Commitment], policy: IntakePolicy, block: int, urls: UrlPolicy = STRICT
) -> list[IntakeEvent]:
    """Record every commitment not seen before; returns one event per new row. `urls`: which
    fetch URLs a commitment may name (loopback only on a local chain)."""
    events: list[IntakeEvent] = []
    for c in sorted(commitments, key=lambda c: (c.commit_block, c.hotkey)):
        try:
            payload = parse(c.data, c.hotkey, urls)
        except CommitmentError as exc:
            events.extend(_malformed(db, c, block, str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - a parser bug on hostile bytes: this row fails, not intake
            events.extend(_malformed(db, c, block, f"parser error {type(exc).__name__}: {exc}"))
            continue
        if db.find(payload.bound) is not None:
            continue  # same hotkey, same content: the earliest sighting already holds it
        with db.tx() as con:
            events.extend(_admit(db, con, c, payload.bound, payload.digest, payload.url, policy, block))
    return events


def _admit(
    db: StateDB, con: sqlite3.Connection, c: Commitment, cid: str, digest: str, url: str, policy: IntakePolicy, block: int
) -> list[IntakeEvent]:
    row: dict[str, Any] = dict(
        cid=cid,
        hotkey=c.hotkey,
        uid=c.uid,
        commit_block=c.commit_block,
        reveal_block=c.reveal_block,
        url=url,
        digest=digest,
        seen_block=block,
    )
    lo = c.commit_block - policy.window_blocks
    used = con.execute(
        "SELECT COUNT(*) FROM contributions WHERE hotkey=? AND commit_block>? AND commit_block<=?"
        " AND (rule IS NULL OR rule!='rate_limited')",
        (c.hotkey, lo, c.commit_block),
    ).fetchone()[0]
    if used >= policy.max_per_window:
        reason = (
            f"rate_limited: hotkey already has {used} contributions committed in blocks "
            f"({lo}, {c.commit_block}]; at most {policy.max_per_window} per "
            f"{policy.window_blocks} blocks"
        )
        db.insert(con, state="failed", reason=reason, rule="rate_limited", **row)
        return [IntakeEvent(cid, c.hotkey, "rate_limited", reason)]
    claim = con.execute(
        "SELECT * FROM contributions WHERE digest=? AND id!=? AND (rule IS NULL OR"
        " rule='superseded') ORDER BY commit_block, id LIMIT 1",
        (digest, cid),
    ).fetchone()
    if claim is not None and (claim["commit_block"], claim["id"]) < (c.commit_block, cid):
        reason = f"duplicate of {claim['id']} (committed earlier at block {claim['commit_block']})"
        db.insert(con, state="failed", reason=reason, rule="duplicate", duplicate_of=claim["id"], **row)
        return [IntakeEvent(cid, c.hotkey, "duplicate", reason)]
    events: list[IntakeEvent] = []
    newer = con.execute(
        "SELECT id, commit_block FROM contributions WHERE hotkey=? AND commit_block>? AND rule IS NULL"
        " ORDER BY commit_block DESC LIMIT 1",
        (c.hotkey, c.commit_block),
    ).fetchone()
    if newer is not None:  # arrived out of order: already replaced by the hotkey's newer commit
        reason = f"superseded by {newer['id']} (committed at block {newer['commit_block']})"
        db.insert(con, state="no_decision", reason=reason, rule="superseded", superseded_by=newer["id"], **row)
        events.append(IntakeEvent(cid, c.hotkey, "superseded", reason))
    else:
        db.insert(con, state="queued", reason="", **row)
        events.append(IntakeEvent(cid, c.hotkey, "queued", url))
        events.extend(_supersede_older(db, con, c, cid))
    if claim is not None:
        events.append(_swap(db, con, Contribution.from_row(claim), cid, c.commit_block))
    return events


def _supersede_older(db: StateDB, con: sqlite3.Connection, c: Commitment, cid: str) -> list[IntakeEvent]:
    marks = ",".join("?" * len(ACTIVE))
    older = con.execute(
        f"SELECT id FROM contributions WHERE hotkey=? AND commit_block<? AND state IN ({marks})",
        (c.hotkey, c.commit_block, *ACTIVE),
    ).fetchall()
    out = []
    for r in older:
        reason = f"superseded by {cid} (committed at block {c.commit_block})"
        db.move(con, r["id"], "no_decision", reason, rule="superseded", superseded_by=cid)
        out.append(IntakeEvent(r["id"], c.hotkey, "superseded", reason))
    return out


def _swap(db: StateDB, con: sqlite3.Connection, old: Contribution, cid: str, block: int) -> IntakeEvent:
    """`cid` committed the same content before `old`: old becomes the duplicate."""
    reason = f"duplicate of {cid} (committed earlier at block {block})"
    if old.state == "failed":  # failed on its own already: keep the state, record the rule
        db.update(con, old.id, {"rule": "duplicate", "duplicate_of": cid, "reason": f"{reason}; was: {old.reason}"})
    else:
        db.move(con, old.id, "failed", reason, rule="duplicate", duplicate_of=cid)
    con.execute(
        "UPDATE evidence SET settled=1, outcome='voided', outcome_reason=? WHERE contribution_id=? AND settled=0",
        (reason, old.id),
    )
    new = db.contribution(cid, con)
    now = time.time()
    for crown in con.execute("SELECT * FROM crowns WHERE contribution_id=?", (old.id,)).fetchall():
        con.execute(
            "UPDATE crowns SET hotkey=?, contribution_id=?, commit_block=?, updated_at=? WHERE target=?",
            (new.hotkey, cid, new.commit_block, now, crown["target"]),
        )
        con.execute(
            "INSERT INTO crown_history(target, hotkey, contribution_id, commit_block, crowned_block,"
            " measured_speedup, speedup_vs_stock, arena_id, settlement_id, reason, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                crown["target"],
                new.hotkey,
                cid,
                new.commit_block,
                crown["crowned_block"],
                crown["measured_speedup"],
                crown["speedup_vs_stock"],
                crown["arena_id"],
                crown["settlement_id"],
                f"transferred from {old.id}: same content committed earlier",
                now,
            ),
        )
    return IntakeEvent(old.id, old.hotkey, "swapped", reason)
