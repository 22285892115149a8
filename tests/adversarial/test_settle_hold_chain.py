"""Red team, settlement liveness: chained holds.

A settlement waits for in-progress contributions that committed no later than the newest
unsettled evidence row (earlier-commit priority), each for at most `hold_blocks` after its own
intake. The newest row is not the oldest: a Sybil hotkey's fast bundle (any verify-clean kernel,
below the bar) measured after the honest winner raises that horizon, while a second Sybil's slow
bundle (a trickling archive server) committed just before it holds for another `hold_blocks`.
Alternating the two, an attacker (the incumbent, say) keeps an honest winner's crown unsettled for
as long as it likes, at a few commitments per `hold_blocks`, well inside the rate limit. Busy
honest traffic does the same by accident: evidence arrives out of commit order all the time.
"""

from __future__ import annotations

from settle_ledger import T, commit, db, record_pass, to_verified  # noqa: F401 - db: the fixture

from cacheon_subnet.scoring.settle import SpeedPolicy
from cacheon_subnet.validator import ledger

HOLD = 100
_commit = commit


def _measure(db, cid: str, speedup: float, block: int) -> None:
    to_verified(db, cid)
    record_pass(db, cid, speedup, block)


def test_chained_holds_cannot_keep_an_honest_crown_unsettled(db):
    honest = _commit(db, "honest", "fast-kernel", 10)
    _measure(db, honest, 1.30, 12)
    # Sybils: "slow*" bundles never leave the fetch stage (their server trickles); "fast*" bundles
    # are measured at once, below the bar, each after the slow one committed just before it
    _commit(db, "slow-a", "s0", 9)  # an earlier commit: a legitimate hold, at first
    settled_at = None
    for i, block in enumerate(range(12, 12 + 10 * HOLD, HOLD // 2)):
        if block > 12:
            _commit(db, f"slow-{'ab'[i % 2]}", f"s{i}", block - 2)
            fast = _commit(db, f"fast-{'ab'[i % 2]}", f"f{i}", block - 1)
            _measure(db, fast, 1.0, block)
        out = ledger.settle(db, T, SpeedPolicy(), block + 1, hold_blocks=HOLD)
        if isinstance(out, ledger.SettleOutcome):
            settled_at = block + 1
            break
    assert settled_at is not None and settled_at - 12 <= 2 * HOLD, (
        f"the honest winner measured at block 12 is still unsettled at block {block + 1}"
    )
    crown = ledger.crown_of(db, T)
    assert crown is not None and crown.contribution_id == honest
