"""state.py + intake.py + ledger.py: transitions, schema, dedup/earliest-wins, rate limit,
supersede, and settlement exactly once."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from cacheon_subnet.chain.backend import Commitment
from cacheon_subnet.chain.commitment import encode
from cacheon_subnet.records import QualifyResult
from cacheon_subnet.scoring.settle import SpeedPolicy
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.intake import IntakePolicy, intake, malformed_id
from cacheon_subnet.validator.state import SCHEMA_VERSION, TRANSITIONS, StateDB, StateError

URL = "https://bundles.example.org/b.tar.gz"
T = "norm.rmsnorm"


def digest(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()


def cm(hotkey: str, content: str, block: int, uid: int = 5, data: str | None = None) -> Commitment:
    return Commitment(hotkey, uid, block, block + 1, data if data is not None else encode(digest(content), hotkey, URL))


def bound(hotkey: str, content: str) -> str:
    from cacheon_subnet.bundle import hotkey_bound_digest

    return hotkey_bound_digest(digest(content), hotkey)


@pytest.fixture
def db(tmp_path):
    d = StateDB(tmp_path / "state")
    yield d
    d.close()


def qualify(db: StateDB, cid: str, vs_stock: float, block: int, target: str = T) -> None:
    """Drive a queued contribution to `qualified` with one PASS evidence row."""
    for to in ("fetched", "screened", "verified"):
        db.transition(cid, to, todo=(target,) if to == "verified" else ())
    with db.tx() as con:
        r = QualifyResult(target, "PASS", True, vs_stock, vs_stock, 0.001, "arena-x", "fake", "ok")
        ledger.record_evidence(con, cid, r, block, None)
        db.move(con, cid, "qualified", "ok", todo=())


def test_schema_wal_and_migrations(tmp_path):
    db = StateDB(tmp_path / "s")
    assert db.schema_version() == SCHEMA_VERSION
    assert db.con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    again = StateDB(tmp_path / "s")  # reopening applies nothing twice
    assert again.con.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
    with again.tx() as con:
        con.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    again.close()
    with pytest.raises(StateError, match="newer than this code"):
        StateDB(tmp_path / "s")
    with pytest.raises(StateError, match="no validator state"):
        StateDB(tmp_path / "missing", readonly=True)


def test_transitions_follow_the_table_and_are_logged(db):
    intake(db, [cm("hk", "a", 10)], IntakePolicy(), 10)
    cid = bound("hk", "a")
    with pytest.raises(StateError, match="queued -> qualified is not allowed"):
        db.transition(cid, "qualified")
    c = db.retry_later(cid, "fetch: connect (attempt 1)", 60)
    assert c.attempts == 1 and c.next_try_at > 0 and c.state == "queued"
    assert db.due("queued") == []  # backing off
    for to in ("fetched", "screened", "verified", "qualified"):
        c = db.transition(cid, to, f"-> {to}")
        assert c.state == to and c.attempts == 0  # a successful stage resets the retry count
    log = [
        tuple(r)
        for r in db.con.execute("SELECT from_state, to_state FROM transitions WHERE contribution_id=? ORDER BY id", (cid,))
    ]
    assert log == [
        (None, "queued"),
        ("queued", "fetched"),
        ("fetched", "screened"),
        ("screened", "verified"),
        ("verified", "qualified"),
    ]
    assert TRANSITIONS["failed"] == frozenset()  # terminal


def test_a_failed_transition_leaves_nothing_behind(db):
    intake(db, [cm("hk", "a", 10)], IntakePolicy(), 10)
    cid = bound("hk", "a")
    with pytest.raises(sqlite3.IntegrityError):
        with db.tx() as con:
            db.move(con, cid, "fetched", "half")
            con.execute("INSERT INTO contributions(id) VALUES (NULL)")  # fails: rolls back the move
    assert db.contribution(cid).state == "queued"


def test_malformed_commitment_recorded_with_parser_reason(db):
    bad = cm("hk", "a", 7, data='{"v":1}')
    events = intake(db, [bad], IntakePolicy(), 8)
    c = db.contribution(malformed_id(bad))
    assert c.state == "failed" and c.rule == "malformed" and "missing_key" in c.reason
    assert events[0].outcome == "malformed"
    assert intake(db, [bad], IntakePolicy(), 9) == []  # seen once, recorded once


def test_copy_committed_later_is_a_duplicate(db):
    intake(db, [cm("alice", "x", 10), cm("bob", "x", 12)], IntakePolicy(), 12)
    a, b = db.contribution(bound("alice", "x")), db.contribution(bound("bob", "x"))
    assert a.state == "queued" and a.rule is None
    assert b.state == "failed" and b.rule == "duplicate"
    assert b.reason == f"duplicate of {a.id} (committed earlier at block 10)"


def test_earlier_commit_arriving_later_swaps_roles_and_takes_the_crown(db):
    intake(db, [cm("bob", "x", 12)], IntakePolicy(), 13)
    bob = bound("bob", "x")
    qualify(db, bob, 1.2, 14)
    out = ledger.settle(db, T, SpeedPolicy(), 15)
    assert out.crown.contribution_id == bob
    with db.tx() as con:  # bob re-measured, not settled yet: that row must be voided on the swap
        ledger.record_evidence(con, bob, QualifyResult(T, "PASS", True, 1.0, 1.2, 0.001, "arena-x", "f", "r"), 16, bob)
    # alice's commitment (block 10) was timelocked longer and reveals now
    events = intake(db, [cm("alice", "x", 10)], IntakePolicy(), 30)
    alice = bound("alice", "x")
    assert {e.outcome for e in events} == {"queued", "swapped"}
    b = db.contribution(bob)
    assert b.state == "failed" and b.rule == "duplicate"
    assert b.reason == f"duplicate of {alice} (committed earlier at block 10)"
    assert db.contribution(alice).state == "queued"
    crown = ledger.crown_of(db, T)
    assert (crown.contribution_id, crown.hotkey, crown.commit_block) == (alice, "alice", 10)
    assert crown.speedup_vs_stock == pytest.approx(1.2)  # the measurement stays; only the owner moves
    rows = ledger.evidence_rows(db, bob)
    assert [r["outcome"] for r in rows] == ["crowned", "voided"] and all(r["settled"] for r in rows)
    history = db.con.execute("SELECT contribution_id, reason FROM crown_history ORDER BY id").fetchall()
    assert [h[0] for h in history] == [bob, alice] and "transferred" in history[1][1]
    # a third copy, later than both, is a duplicate of the earliest
    intake(db, [cm("carol", "x", 11)], IntakePolicy(), 31)
    assert db.contribution(bound("carol", "x")).duplicate_of == alice


def test_rate_limit_per_hotkey_per_window(db):
    policy = IntakePolicy(max_per_window=2, window_blocks=10)
    intake(db, [cm("hk", c, b) for c, b in (("a", 100), ("b", 104), ("c", 108))], policy, 108)
    states = {c: db.contribution(bound("hk", c)) for c in "abc"}
    assert states["c"].state == "failed" and states["c"].rule == "rate_limited"
    assert states["c"].reason.startswith("rate_limited")
    intake(db, [cm("hk", "d", 115), cm("other", "e", 108)], policy, 115)  # window moved on; other hotkey
    assert db.contribution(bound("hk", "d")).rule is None
    assert db.contribution(bound("other", "e")).rule is None


def test_new_commitment_supersedes_unfinished_work_only(db):
    intake(db, [cm("hk", "a", 10)], IntakePolicy(), 10)
    qualify(db, bound("hk", "a"), 1.2, 11)
    intake(db, [cm("hk", "b", 20)], IntakePolicy(), 20)  # b queued, then replaced by c
    intake(db, [cm("hk", "c", 30)], IntakePolicy(), 30)
    a, b, c = (db.contribution(bound("hk", x)) for x in "abc")
    assert a.state == "qualified" and len(ledger.evidence_rows(db, a.id)) == 1  # done work stays
    assert b.state == "no_decision" and b.rule == "superseded" and b.superseded_by == c.id
    assert c.state == "queued"
    intake(db, [cm("hk", "old", 5)], IntakePolicy(), 31)  # an older one arriving late is born superseded
    assert db.contribution(bound("hk", "old")).state == "no_decision"


def test_settlement_exactly_once_and_crown_in_same_transaction(db):
    intake(db, [cm("a", "a", 10), cm("b", "b", 11)], IntakePolicy(), 11)
    qualify(db, bound("a", "a"), 1.10, 12)
    qualify(db, bound("b", "b"), 1.20, 12)
    out = ledger.settle(db, T, SpeedPolicy(), 13)
    assert out.crown.contribution_id == bound("b", "b") and out.changed
    assert {d.outcome for d in out.decisions} == {"superseded", "crowned"}
    assert ledger.settle(db, T, SpeedPolicy(), 14) is None  # nothing unsettled: no second settlement
    rows = ledger.evidence_rows(db)
    assert all(r["settled"] == 1 and r["settlement_id"] == out.settlement_id for r in rows)
    assert db.con.execute("SELECT COUNT(*) FROM settlements").fetchone()[0] == 1


def test_settlement_waits_for_an_earlier_commit_still_in_progress(db):
    intake(db, [cm("early", "e", 10), cm("late", "l", 11)], IntakePolicy(), 11)
    qualify(db, bound("late", "l"), 1.2, 12)
    held = ledger.settle(db, T, SpeedPolicy(), 13, hold_blocks=100)
    assert held == [bound("early", "e")]
    assert ledger.settle(db, T, SpeedPolicy(), 200, hold_blocks=100).crown is not None  # bounded wait


def test_stale_measurement_is_sent_back_for_remeasurement(db):
    intake(db, [cm("a", "a", 10), cm("b", "b", 11)], IntakePolicy(), 11)
    qualify(db, bound("a", "a"), 1.2, 12)
    ledger.settle(db, T, SpeedPolicy(), 20)  # a crowned at block 20
    qualify(db, bound("b", "b"), 1.3, 20)  # measured in the crown's block: stale
    out = ledger.settle(db, T, SpeedPolicy(), 21)
    assert out.remeasure == (bound("b", "b"),) and not out.changed
    b = db.contribution(bound("b", "b"))
    assert b.state == "verified" and b.todo == (T,) and b.remeasures == 1
