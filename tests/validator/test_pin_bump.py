"""A pin bump on the validator side (issue 33 item 4): every crown measured in the old arena is
re-measured against the new stock; one that still wins stays with its new arena id, one that no
longer wins is retired with the number that lost it; nothing is dropped silently, and a kill -9 in
the middle resumes where it was. CPU only: the fake qualifier stands in for the arena, its "new
stock" scaling every kernel's gain by `factor`."""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from validator_fakes import EXAMPLES, NETUID, VALIDATOR, FakeQualifier, FileServer, commit, fake_screener, make_archive
from validator_fakes import make_chain as _make_chain

from cacheon_subnet import pins
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.netpolicy import LOCAL
from cacheon_subnet.records import QualifyResult
from cacheon_subnet.scoring.settle import Crown, SpeedPolicy
from cacheon_subnet.validator import bumps, ledger, status
from cacheon_subnet.validator.loop import Validator, ValidatorConfig
from cacheon_subnet.validator.screen import ScreenResult
from cacheon_subnet.validator.state import StateDB
from cacheon_subnet.validator.web import data, page
from cacheon_subnet.webapi import SCHEMA

NORM, SILU = "norm.rmsnorm", "activation.silu_and_mul"
NEW_PIN = "0.5.14"
HEAD = f"pin bump sglang {pins.SGLANG_PIN} -> {NEW_PIN}"


@dataclass(frozen=True)
class NewStock(FakeQualifier):
    """The new pins' stock is faster: every kernel's gain over it is `factor` of the old one;
    `verdict` NO_DECISION plays a box that cannot judge."""

    factor: float = 1.0
    verdict: str = "PASS"

    def qualify(self, bundle: Bundle, op: OpEntry, incumbent: Crown | None) -> QualifyResult:
        r = FakeQualifier.qualify(self, bundle, op, incumbent)
        x = round(r.speedup * self.factor, 6)
        return replace(r, speedup=x, speedup_vs_stock=round(r.speedup_vs_stock * self.factor, 6), verdict=self.verdict)


def config(tmp: Path) -> ValidatorConfig:
    return ValidatorConfig(
        netuid=NETUID,
        hotkey=VALIDATOR,
        state_dir=tmp / "state",
        interval_s=0,
        targets=(NORM, SILU),
        retry_base_s=0.0,
        retry_max_s=0.0,
        chain_backoff_base_s=0.01,
        chain_call_retry_s=0.0,
        url_policy=LOCAL,
    )


@pytest.fixture(scope="module")
def srv():
    with FileServer() as s:
        yield s


def crowned_in_old_arena(tmp: Path, srv: FileServer):
    """m0 holds norm.rmsnorm at 2.0x, m1 holds silu_and_mul at 1.2x, both in arena-old."""
    chain = _make_chain(tmp / "chain.db", miners=2)
    a, da = make_archive(EXAMPLES / NORM, tmp, "norm", {"speed.txt": "2.0"})
    b, db_ = make_archive(EXAMPLES / SILU, tmp, "silu", {"speed.txt": "1.2"})
    commit(chain, "m0", da, srv.add(f"{tmp.name}-n", a))
    commit(chain, "m1", db_, srv.add(f"{tmp.name}-s", b))
    chain.advance(2)
    v = Validator(config(tmp), chain, FakeQualifier(arena_id="arena-old"), screener=fake_screener())
    v.run_once()
    assert {(c.target, c.arena_id) for c in ledger.crowns(v.db)} == {(NORM, "arena-old"), (SILU, "arena-old")}
    v.close()
    chain.advance(1)
    return chain


def bump_rows(db: StateDB) -> list[dict]:
    """Ordered by slot: silu_and_mul (activation.*) first, then norm.rmsnorm."""
    return [dict(r) for r in db.con.execute("SELECT * FROM pin_bumps ORDER BY target")]


def test_a_pin_bump_keeps_the_crown_that_still_wins_and_retires_the_one_that_lost(tmp_path, srv, monkeypatch):
    chain = crowned_in_old_arena(tmp_path, srv)
    monkeypatch.setattr(pins, "SGLANG_PIN", NEW_PIN)
    v = Validator(config(tmp_path), chain, NewStock(arena_id="arena-new", factor=0.825), screener=fake_screener())
    # until the verdict: both crowns kept (still paid), labelled with the old arena, nobody's baseline
    assert {(c.target, c.arena_id) for c in ledger.crowns(v.db)} == {(NORM, "arena-old"), (SILU, "arena-old")}
    assert ledger.crown_of(v.db, NORM) is None and ledger.crown_of(v.db, SILU) is None
    assert [r["state"] for r in bump_rows(v.db)] == ["open", "open"]
    report = status.collect(tmp_path / "state")
    assert [b["line"] for b in report["remeasured"]] == [
        f"{HEAD}: re-measuring against the new stock (crown kept, labelled arena-old, until the verdict)"
    ] * 2
    assert "re-measured after a pin bump (2):" in status.render(report)
    v.run_once()
    kept = ledger.crown_of(v.db, NORM)  # 2.0 * 0.825 = 1.65 over the new stock: still wins
    assert kept is not None and (kept.hotkey, kept.arena_id, kept.speedup_vs_stock) == ("m0", "arena-new", 1.65)
    assert ledger.crown_of(v.db, SILU) is None and [c.target for c in ledger.crowns(v.db)] == [NORM]
    silu, norm = bump_rows(v.db)
    assert norm["state"] == "kept" and norm["reason"] == (
        f"{HEAD}: re-measured at C/B 1.6500 against the new stock; crown kept in arena arena-new (was x2.0000 in arena-old)"
    )
    assert silu["state"] == "retired" and silu["speedup"] == pytest.approx(0.99)
    assert silu["reason"].startswith(f"{HEAD}: re-measured at C/B 0.9900 against the new stock; below_bar: ")
    history = v.db.con.execute("SELECT reason FROM crown_history WHERE target=? ORDER BY id DESC", (SILU,)).fetchone()
    assert history[0] == "crown retired: " + silu["reason"]  # never dropped silently
    lines = status.render(status.collect(tmp_path / "state"))
    assert "re-measured after a pin bump (2):" in lines and "C/B 0.9900 against the" in lines
    html = page.index(data.crowns(tmp_path / "state"), data.contributions(tmp_path / "state"), SCHEMA)
    assert html.count('<tr class="remeasure"') == 2 and "crown kept in arena arena-new" in html
    v.close()
    v = Validator(config(tmp_path), chain, NewStock(arena_id="arena-new", factor=0.825), screener=fake_screener())
    assert ledger.crown_of(v.db, NORM) == kept and len(bump_rows(v.db)) == 2  # the same arena: nothing re-opened
    v.close()


def test_settlement_waits_for_the_holders_re_measure(tmp_path, srv, monkeypatch):
    """A challenger timed against the new stock first must not take a slot whose holder is still
    being verified again: the holder (earlier commit) is measured, then both are settled together."""
    chain = crowned_in_old_arena(tmp_path, srv)
    monkeypatch.setattr(pins, "SGLANG_PIN", NEW_PIN)
    v = Validator(config(tmp_path), chain, NewStock(arena_id="arena-new"), screener=fake_screener())
    holder = next(c for c in v.db.contributions() if c.hotkey == "m0")
    assert holder.state == "screened"
    with v.db.tx() as con:  # a later challenger's row against the new stock, the holder not timed yet
        v.db.insert(con, cid="c" * 64, hotkey="m9", uid=9, commit_block=50, reveal_block=51, url=None,
                    digest=None, state="qualified")  # fmt: skip
        r = QualifyResult(NORM, "PASS", True, 3.0, 3.0, 0.001, "arena-new", "fake", "x")
        ledger.record_evidence(con, "c" * 64, r, 60, None)
    assert ledger.settle(v.db, NORM, SpeedPolicy(max_speedup=5.0), 70, hold_blocks=1) == [holder.id]
    assert ledger.crowns(v.db)[1].contribution_id == holder.id  # still the old crown (norm), still open
    v.close()


def test_a_holder_that_fails_verification_under_the_new_pins_is_retired_with_its_reason(tmp_path, srv, monkeypatch):
    chain = crowned_in_old_arena(tmp_path, srv)
    monkeypatch.setattr(pins, "SGLANG_PIN", NEW_PIN)

    def broken(bundle: Bundle) -> ScreenResult:
        return ScreenResult(False, ("imports a module SGLang 0.5.14 removed (fake screener)",), {"fake": True})

    v = Validator(config(tmp_path), chain, NewStock(arena_id="arena-new"), screener=broken)
    v.run_once()
    v.run_once()  # no evidence at all: the open re-measures close as stranded
    assert ledger.crowns(v.db) == []
    rows = bump_rows(v.db)
    assert [r["state"] for r in rows] == ["retired", "retired"]
    assert all(r["reason"].startswith(f"{HEAD}: not re-measured; no measurement in the new arena (failed:") for r in rows)
    assert all("SGLang 0.5.14 removed" in r["reason"] for r in rows)
    v.close()


def test_a_re_measure_that_cannot_judge_is_repeated_then_retired(tmp_path, srv, monkeypatch):
    chain = crowned_in_old_arena(tmp_path, srv)
    monkeypatch.setattr(pins, "SGLANG_PIN", NEW_PIN)
    v = Validator(config(tmp_path), chain, NewStock(arena_id="arena-new", verdict="NO_DECISION"), screener=fake_screener())
    v.run_once()
    norm = bump_rows(v.db)[1]
    assert (norm["state"], norm["tries"]) == ("open", 1)  # kept as it was, measured again
    assert [c.arena_id for c in ledger.crowns(v.db)] == ["arena-old", "arena-old"]
    for _ in range(bumps.MAX_TRIES + 1):
        chain.advance(1)
        v.run_once()
    norm = bump_rows(v.db)[1]
    assert norm["state"] == "retired" and "no_decision" in norm["reason"] and ledger.crowns(v.db) == []
    v.close()


KILLED = """
import os, signal, sys
sys.path[:0] = [{tests!r}, {repo!r}]
from cacheon_subnet import pins
pins.SGLANG_PIN = {pin!r}
from test_pin_bump import NewStock, config
from validator_fakes import fake_screener
from cacheon_subnet.chain import LocalChain
from cacheon_subnet.validator.loop import Validator
from pathlib import Path
v = Validator(config(Path({tmp!r})), LocalChain.open({chain!r}), NewStock(arena_id="arena-new", factor=0.825),
              screener=fake_screener())
from cacheon_subnet.validator.stages.passstate import PassState
ps = PassState(drain=True)
for stage in v.order[:{stages}]:  # 4: sync, fetch, screen, verify+time; killed before settle
    stage.run(ps)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("stages", [0, 4])
def test_kill_9_in_the_middle_of_a_re_measure_loses_nothing(tmp_path, srv, monkeypatch, stages):
    chain = crowned_in_old_arena(tmp_path, srv)
    here = Path(__file__).resolve().parent
    code = KILLED.format(
        tests=str(here), repo=str(here.parents[1]), pin=NEW_PIN, tmp=str(tmp_path), chain=str(tmp_path / "chain.db"),
        stages=stages,
    )  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    monkeypatch.setattr(pins, "SGLANG_PIN", NEW_PIN)
    v = Validator(config(tmp_path), chain, NewStock(arena_id="arena-new", factor=0.825), screener=fake_screener())
    rows = bump_rows(v.db)
    assert [r["state"] for r in rows] == ["open", "open"]  # opened once, before the kill; not again
    assert {c.arena_id for c in ledger.crowns(v.db)} == {"arena-old"}  # both still held
    assert all(c.remeasures == 1 for c in v.db.contributions())  # sent back once, not twice
    v.run_once()
    assert [r["state"] for r in bump_rows(v.db)] == ["retired", "kept"]
    assert [(c.target, c.arena_id) for c in ledger.crowns(v.db)] == [(NORM, "arena-new")]
    v.close()
