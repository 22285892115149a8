"""Hostile input and chain faults never stall or crash the loop (issue 16 item 8), kept as tests:
undecodable / surrogate commitments, a definitive set_weights refusal, a set_weights that landed
and then raised, and how chain errors are classified."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from validator_fakes import (
    EXAMPLES,
    NETUID,
    VALIDATOR,
    FakeQualifier,
    FileServer,
    commit,
    fake_screener,
    make_archive,
    make_chain,
)

from cacheon_subnet.chain.backend import ChainError, ChainUnavailable, NotRegistered, RateLimited, classify
from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.validator import ledger, status
from cacheon_subnet.validator.chainguard import ChainDown, GuardedChain
from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.validator.state import StateDB

TARGETS = ("norm.rmsnorm",)


class Recording:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def call(*a: Any, **kw: Any) -> Any:
            self.calls.append(name)
            return fn(*a, **kw)

        return call

    def count(self, name: str) -> int:
        return self.calls.count(name)


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


@pytest.fixture
def world(tmp_path, srv):
    chain = make_chain(tmp_path / "chain.db", rate_limit=5, miners=4)
    a, da = make_archive(EXAMPLES / "norm.rmsnorm", tmp_path, "a", {"speed.txt": "1.2"})
    return {"chain": chain, "tmp": tmp_path, "archive": a, "digest": da, "url": srv.add(f"{tmp_path.name}-a.tar.gz", a)}


def make(world, backend=None, **cfg) -> Validator:
    opts = {
        "interval_s": 0,
        "targets": TARGETS,
        "retry_base_s": 0.0,
        "retry_max_s": 0.0,
        "chain_backoff_base_s": 0.01,
        "chain_call_retry_s": 0.0,
        "url_policy": LOCAL,
        **cfg,
    }
    config = ValidatorConfig(netuid=NETUID, hotkey=VALIDATOR, state_dir=world["tmp"] / "state", **opts)
    return Validator(config, backend or world["chain"], FakeQualifier(), screener=fake_screener())


def _raw_commitment(chain, hotkey: str, data: bytes) -> None:
    """Write bytes the chain API would never produce (invalid UTF-8) straight into the store."""
    chain.commit(hotkey, NETUID, "placeholder", 1)
    con = sqlite3.connect(chain.path)
    con.execute("UPDATE commitments SET data=CAST(? AS TEXT) WHERE hotkey=?", (data, hotkey))
    con.commit()
    con.close()


def test_undecodable_and_surrogate_commitments_are_failed_rows_while_others_flow(world):
    chain = world["chain"]
    _raw_commitment(chain, "m0", b'{"v":1,"d":"\xff\xfe broken utf-8"}')
    commit(chain, "m1", world["digest"], world["url"])
    chain.advance(2)
    v = make(world)
    s = v.run_once()
    assert s.chain_error is None
    rows = {c.hotkey: c for c in v.db.contributions()}
    assert rows["m0"].state == "failed" and rows["m0"].rule == "malformed" and "[encoding]" in rows["m0"].reason
    assert rows["m1"].state == "qualified"  # the good miner was not held up
    # a lone surrogate reaching intake (an SDK could hand one over) is a row, not an exception
    from cacheon_subnet.chain.backend import Commitment
    from cacheon_subnet.validator.intake import IntakePolicy, intake

    (ev,) = intake(v.db, [Commitment("m2", 4, 9, 10, '{"v":1,"u":"\udcff"}')], IntakePolicy(), 10, LOCAL)
    assert ev.outcome == "malformed" and "encoding" in ev.reason
    assert v.db.find(ev.contribution_id).state == "failed"


def test_a_parser_crash_is_one_failed_row(world, monkeypatch):
    from cacheon_subnet.chain.backend import Commitment
    from cacheon_subnet.validator import intake as intake_mod

    def boom(data, hotkey, urls):
        raise IndexError("parser bug")

    monkeypatch.setattr(intake_mod, "parse", boom)
    db = StateDB(world["tmp"] / "db")
    (ev,) = intake_mod.intake(db, [Commitment("m0", 2, 3, 4, "x")], intake_mod.IntakePolicy(), 5, LOCAL)
    assert ev.outcome == "malformed" and "IndexError" in ev.reason


def test_surrogates_in_the_hotkey_or_the_parsers_message_are_stored_escaped(world, monkeypatch):
    """SQLite cannot store a lone surrogate (UnicodeEncodeError): the failed row's hotkey and
    reason are stored escaped, so hostile bytes still cost one row and never the intake."""
    from cacheon_subnet.chain.backend import Commitment
    from cacheon_subnet.validator import intake as intake_mod

    db = StateDB(world["tmp"] / "db")
    (ev,) = intake_mod.intake(db, [Commitment("m\udcff", 2, 3, 4, '{"v":1}')], intake_mod.IntakePolicy(), 5, LOCAL)
    assert ev.outcome == "malformed" and db.find(ev.contribution_id).hotkey == "m\\udcff"

    def boom(data, hotkey, urls):
        raise ValueError(f"bad input {data}")  # a parser bug that echoes the hostile bytes

    monkeypatch.setattr(intake_mod, "parse", boom)
    (ev,) = intake_mod.intake(db, [Commitment("m1", 2, 3, 4, "x\udcff")], intake_mod.IntakePolicy(), 5, LOCAL)
    assert ev.outcome == "malformed" and "x\\udcff" in db.find(ev.contribution_id).reason


def test_definitive_refusal_is_not_retried_and_status_says_so(world):
    chain = world["chain"]
    chain.set_stake(VALIDATOR, 1000.0, validator_permit=False)
    rec = Recording(chain)
    v = make(world, rec)
    results = []
    for _ in range(12):
        results.append(v.run_once().weights)
        chain.advance(1)
    assert rec.count("set_weights") == 1, rec.count("set_weights")  # issue 16 saw 36 calls in 12 passes
    assert results[0] == "refused" and set(results[1:]) == {"blocked"}
    rep = status.collect(v.db.dir)
    assert rep["weights_blocked"]["reason"] == "no_validator_permit"
    assert any("set_weights refused" in r for r in status.health(rep))
    chain.set_stake(VALIDATOR, 1000.0, validator_permit=True)  # the cause is gone: sent at once
    assert v.run_once().weights == "verified" and rec.count("set_weights") == 2
    assert status.collect(v.db.dir)["weights_blocked"] is None


class LandsThenRaises(Recording):
    """set_weights reaches the chain, then the connection drops before the answer."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        if name == "set_weights":

            def send(*a: Any, **kw: Any) -> Any:
                self.calls.append(name)
                receipt = self.inner.set_weights(*a, **kw)
                if self.armed:
                    self.armed = False
                    raise ChainUnavailable("connection reset after submit")
                return receipt

            return send
        return super().__getattr__(name)


def test_a_set_weights_that_landed_then_raised_is_read_back_not_resent(world):
    chain = world["chain"]
    chain.advance(3)  # LocalChain reads LastUpdate 0 as "never"; a real chain is never at block 0
    rec = LandsThenRaises(chain)
    v = make(world, rec, chain_call_retries=3)
    s = v.run_once()
    assert s.chain_error is not None and "set_weights" in s.chain_error
    assert rec.count("set_weights") == 1  # never retried in place
    for _ in range(3):
        chain.advance(6)  # past the rate limit: a blind resend would land a second time
        v.run_once()
    assert rec.count("set_weights") == 1
    (row,) = ledger.weights_rows(v.db)
    assert row.state == "verified" and row.attempts <= 1


def test_chain_errors_are_classified():
    assert classify(ChainUnavailable("down")) == "transient"
    assert classify(TimeoutError()) == "transient"
    assert classify(RateLimited("slow down")) == "wait"
    assert classify(NotRegistered("who")) == "definitive"
    assert classify(ChainError("no permit", "no_validator_permit")) == "definitive"
    assert classify(ChainError("x", "sdk:NeuronNoValidatorPermit")) == "definitive"
    assert classify(ChainError("x", "sdk:SomethingNew")) == "transient"


class Counting:
    def __init__(self, exc: BaseException) -> None:
        self.exc, self.n = exc, 0

    def current_block(self) -> int:
        self.n += 1
        raise self.exc


@pytest.mark.parametrize(
    "exc, calls, kind", [(ChainUnavailable("down"), 3, "transient"), (NotRegistered("gone"), 1, "definitive")]
)
def test_guard_retries_only_transient_reads(tmp_path, exc, calls, kind):
    backend = Counting(exc)
    seen: list[str] = []
    guard = GuardedChain(backend, StateDB(tmp_path), retries=2, retry_s=0.0, on_error=lambda op, e, k: seen.append(k))
    with pytest.raises(ChainDown) as e:
        guard.current_block()
    assert backend.n == calls and e.value.kind == kind and set(seen) == {kind}
