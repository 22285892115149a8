"""Red team, settlement: a ratio measured against one baseline settled against another.

`speedup` is C/B against the stack the arena ran as B. With a pool of arenas (validator/dispatch.py)
two challengers are measured at once against stock; the first result crowns its kernel, and the
second is recorded afterwards with `evaluated_block` = the block it came back (after the crown), so
staleness by block does not see it. Settlement then read its C/stock ratio as C/incumbent: a
kernel slower than the new crown dethroned it, with an invented speedup_vs_stock. The evidence
row knows what it was measured against (`incumbent_id`); only a ratio against the current holder
may decide.
"""

from __future__ import annotations

import hashlib

import pytest

from cacheon_subnet.bundle import hotkey_bound_digest
from cacheon_subnet.chain.backend import Commitment
from cacheon_subnet.chain.commitment import encode
from cacheon_subnet.scoring.settle import SpeedPolicy
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.intake import IntakePolicy, intake
from cacheon_subnet.validator.qualify import QualifyResult
from cacheon_subnet.validator.state import StateDB

URL = "https://bundles.example.org/b.tar.gz"
T = "norm.rmsnorm"


def _commit(db: StateDB, hotkey: str, block: int) -> str:
    d = hashlib.sha256(hotkey.encode()).hexdigest()
    intake(db, [Commitment(hotkey, 5, block, block, encode(d, hotkey, URL))], IntakePolicy(), block)
    cid = hotkey_bound_digest(d, hotkey)
    for to in ("fetched", "screened", "verified"):
        db.transition(cid, to, todo=(T,) if to == "verified" else ())
    return cid


def _record(db: StateDB, cid: str, speedup: float, block: int, incumbent_id: str | None) -> None:
    with db.tx() as con:
        r = QualifyResult(T, "PASS", True, speedup, speedup, 0.001, "arena-x", "fake", "ok")
        ledger.record_evidence(con, cid, r, block, incumbent_id)
        db.move(con, cid, "qualified", "ok", todo=())


@pytest.fixture
def db(tmp_path):
    d = StateDB(tmp_path / "state")
    yield d
    d.close()


def test_a_ratio_against_stock_never_dethrones_a_crown_settled_meanwhile(db):
    fast = _commit(db, "fast", 10)
    slow = _commit(db, "slow", 11)  # both dispatched against stock, to two arenas
    _record(db, fast, 1.50, 12, None)
    out = ledger.settle(db, T, SpeedPolicy(), 13, hold_blocks=1)  # the slow one committed later: no hold
    assert out.crown.contribution_id == fast
    _record(db, slow, 1.10, 14, None)  # its arena comes back after the crown: 1.10 over *stock*
    out = ledger.settle(db, T, SpeedPolicy(), 15)
    crown = ledger.crown_of(db, T)
    assert crown.contribution_id == fast, f"1.10x over stock dethroned a 1.50x crown: {out.decisions}"
    assert {d.contribution_id: d.outcome for d in out.decisions}[slow] == "no_decision" and slow in out.remeasure  # measured again against the crown
