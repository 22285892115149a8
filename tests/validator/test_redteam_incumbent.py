"""Red team: an incumbent that makes every challenger's baseline unestablishable.

arena/run.py charges a write into engine state to the route in force: the challenger's is its
FAIL, the incumbent's is NO_DECISION for the challenger ("the incumbent baseline could not be
established"). Nothing used to look at the incumbent afterwards: each challenger ended
no_decision (one re-measure, again against the same incumbent), the crown stood for good. Now
such evidence retires the crown and sends its holder back to be measured against stock, where
its own writes are the challenger's (FAIL); the challenger is re-measured against stock too.
"""

from __future__ import annotations

from dataclasses import dataclass

from test_redteam_path import NOOP, SRC, archive, config, outcomes
from validator_fakes import FakeQualifier, commit, fake_screener, make_chain

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.records import EvidenceSummary, GpuDetail, QualifyResult
from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.loop import Validator

BLAME = (
    "rank 0, between decode-3 and decode-4 (route incumbent): static input model.norm.weight changed: "
    "the incumbent wrote into engine state every kernel reads"
)


def evidence(problems: tuple[str, ...] = (), baseline_problems: tuple[str, ...] = ()) -> GpuDetail:
    """A GPU verdict's detail carrying only the execution evidence's findings (what blame reads)."""
    found = EvidenceSummary(False, problems, baseline_problems, (), ())
    return GpuDetail(None, "measured vs the incumbent", found, None, None, None, None, None)


@dataclass(frozen=True)
class TamperingIncumbent(FakeQualifier):
    """The bundle with speed 1.2 writes engine state once it is the incumbent (a conditional
    tamper); measured as a challenger against stock its writes are its own FAIL."""

    def qualify(self, bundle: Bundle, op: OpEntry, incumbent: Crown | None) -> QualifyResult:
        evil = bundle.files.get("speed.txt", b"").strip() == b"1.2"
        if incumbent is not None and not evil:
            ev = evidence(baseline_problems=(BLAME,))
            return QualifyResult(
                op.slot,
                "NO_DECISION",
                True,
                1.0,
                1.0,
                0.0,
                self.arena_id,
                self.label,
                "the incumbent baseline could not be established: " + BLAME,
                ev,
            )
        if evil and getattr(self, "_crowned", None) is None and incumbent is None:
            object.__setattr__(self, "_crowned", True)  # first measurement: behaves
            return super().qualify(bundle, op, incumbent)
        if evil:
            ev = evidence(problems=(BLAME.replace("incumbent", "challenger"),))
            return QualifyResult(
                op.slot,
                "FAIL",
                True,
                1.0,
                1.0,
                0.0,
                self.arena_id,
                self.label,
                "execution evidence: wrote engine state",
                ev,
            )
        return super().qualify(bundle, op, incumbent)


def test_an_incumbent_that_poisons_every_baseline_is_re_judged_not_kept(tmp_path):
    from validator_fakes import FileServer

    with FileServer() as srv:
        chain = make_chain(tmp_path / "chain.db", miners=2)
        a, da = archive(tmp_path, "evil", SRC, "1.2")
        commit(chain, "m0", da, srv.add(f"{tmp_path.name}-e", a))
        chain.advance(2)
        q = TamperingIncumbent()
        v = Validator(config(tmp_path), chain, q, screener=fake_screener())
        v.run_once()
        assert ledger.crown_of(v.db, "norm.rmsnorm").hotkey == "m0"
        b, db_ = archive(tmp_path, "honest", NOOP, "1.5")
        commit(chain, "m1", db_, srv.add(f"{tmp_path.name}-h", b))
        for _ in range(4):
            chain.advance(2)
            v.run_once()
        crown = ledger.crown_of(v.db, "norm.rmsnorm")
        history = [r[0] for r in v.db.con.execute("SELECT reason FROM crown_history ORDER BY id")]
        v.close()
        assert any("incumbent wrote into engine state" in h for h in history), history
        assert crown is not None and crown.hotkey == "m1", (crown, outcomes(v), history)
