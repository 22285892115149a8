"""The archive cache keeps what a stage may still read, and nothing else (stages/prune.py). Red
team 2026-12-05: nothing ever removed an archive, so worthless commits inside the intake rate
limit filled the validator's disk (8 commits of 64 MiB: 510 MiB)."""

from __future__ import annotations

import pytest
from validator_fakes import EXAMPLES, FakeQualifier, FileServer, commit, fake_screener, fast_config, make_archive, make_chain

from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.loop import Validator
from cacheon_subnet.validator.stages.passstate import PassState

TARGET = "norm.rmsnorm"


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


def cached(v: Validator) -> set[str]:
    return {p.name.removesuffix(".tar.gz") for p in v.cfg.cache_dir.glob("*.tar.gz")}


def test_only_the_crown_and_the_unfinished_keep_their_archives(tmp_path, srv):
    chain = make_chain(tmp_path / "chain.db", rate_limit=5, miners=4)
    digests = {}
    for miner, speed in (("m0", "1.2"), ("m1", "0.5"), ("m2", "0.6")):
        arch, digests[miner] = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, miner, {"speed.txt": speed})
        commit(chain, miner, digests[miner], srv.add(f"{tmp_path.name}-{miner}.tar.gz", arch))
    chain.advance(2)
    cfg = fast_config(tmp_path / "state", (TARGET,), settle_hold_blocks=0)
    v = Validator(cfg, chain, FakeQualifier(), screener=fake_screener())
    try:
        v.run_once()  # fetched, screened, qualified and settled in one drained pass
        assert v.db.counts()["qualified"] == 3
        crown = ledger.crown_of(v.db, TARGET)
        assert crown is not None and v.db.contribution(crown.contribution_id).digest == digests["m0"]
        assert cached(v) == {digests["m0"]}  # the beaten ones' went; the incumbent of every head-to-head stays

        arch, late = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "m3", {"speed.txt": "0.7"})
        commit(chain, "m3", late, srv.add(f"{tmp_path.name}-m3.tar.gz", arch))
        chain.advance(2)
        ps = PassState()
        for stage in (v.stages.sync, v.stages.fetch, v.stages.prune):  # fetched, not yet screened
            stage.run(ps)
        assert cached(v) == {digests["m0"], late}
        v.run_once()
        assert cached(v) == {digests["m0"]}
        v.db.con.execute(
            "UPDATE evidence SET settled=0 WHERE contribution_id IN (SELECT id FROM contributions WHERE digest=?)",
            (digests["m1"],),
        )  # settlement may still re-measure it
        assert ledger.archives_in_use(v.db) == {digests["m0"], digests["m1"]}
    finally:
        v.close()
