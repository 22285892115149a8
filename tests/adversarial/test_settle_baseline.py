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

from settle_ledger import T, commit, db, record_pass, to_verified  # noqa: F401 - db: the fixture

from cacheon_subnet.scoring.settle import SpeedPolicy
from cacheon_subnet.validator import ledger


def _commit(db, hotkey: str, block: int) -> str:
    cid = commit(db, hotkey, hotkey, block)
    to_verified(db, cid)
    return cid


_record = record_pass


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
    assert {d.contribution_id: d.outcome for d in out.decisions}[
        slow
    ] == "no_decision" and slow in out.remeasure  # measured again against the crown
