"""Shared set-up of the settlement red-team tests: commitments through intake, moved to verified,
and PASS evidence recorded in one transaction as the validator's qualify stage does."""

from __future__ import annotations

import hashlib

import pytest

from cacheon_subnet.bundle import hotkey_bound_digest
from cacheon_subnet.chain.backend import Commitment
from cacheon_subnet.chain.commitment import encode
from cacheon_subnet.records import QualifyResult
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.intake import IntakePolicy, intake
from cacheon_subnet.validator.state import StateDB

URL = "https://bundles.example.org/b.tar.gz"
T = "norm.rmsnorm"


def commit(db: StateDB, hotkey: str, content: str, block: int) -> str:
    """One commitment of `content` by `hotkey` at `block`, through intake; its contribution id."""
    d = hashlib.sha256(content.encode()).hexdigest()
    intake(db, [Commitment(hotkey, 5, block, block, encode(d, hotkey, URL))], IntakePolicy(), block)
    return hotkey_bound_digest(d, hotkey)


def to_verified(db: StateDB, cid: str) -> None:
    for to in ("fetched", "screened", "verified"):
        db.transition(cid, to, todo=(T,) if to == "verified" else ())


def record_pass(db: StateDB, cid: str, speedup: float, block: int, incumbent_id: str | None = None) -> None:
    """A speed PASS of `speedup` measured against `incumbent_id` (None: stock), evaluated at `block`."""
    with db.tx() as con:
        r = QualifyResult(T, "PASS", True, speedup, speedup, 0.001, "arena-x", "fake", "ok")
        ledger.record_evidence(con, cid, r, block, incumbent_id)
        db.move(con, cid, "qualified", "ok", todo=())


@pytest.fixture
def db(tmp_path):
    d = StateDB(tmp_path / "state")
    yield d
    d.close()
