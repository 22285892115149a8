"""Words that match the numbers on every screen (issue 34): a below-bar verdict never reads as PASS
or `qualified` (page, API labels, `cacheon status`, `miner status`), while the stored strings stay
as they were; and every slot the validator judges is on the page, crowned or not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from board_fixtures import cid, make_state

from cacheon_subnet.miner.verdicts import ValidatorVerdicts
from cacheon_subnet.miner.verdicts import render as miner_render
from cacheon_subnet.records import CpuDetail, QualifyResult
from cacheon_subnet.scoring.settle import SpeedPolicy
from cacheon_subnet.slots import all_slots
from cacheon_subnet.validator import ledger, status
from cacheon_subnet.validator.state import TARGETS_KEY, StateDB
from cacheon_subnet.validator.web import data, page
from cacheon_subnet.webapi import SCHEMA, check_contributions
from cacheon_subnet.words import state_label, verdict_label

SLOW = 1 / 590  # the kernel: 590x slower than the reference, PASS (correct and timed)


def _slow_state(root: Path, targets: list[str] | None = None) -> Path:
    state = root / "state"
    db = StateDB(state)
    with db.tx() as con:
        db.insert(
            con,
            cid=cid("slow"),
            hotkey="alice",
            uid=1,
            commit_block=10,
            reveal_block=11,
            url="http://127.0.0.1:8787/x.tar.gz",
            digest=cid("dslow"),
            state="qualified",
            reason="norm.rmsnorm verified: C/B 0.0017",  # what stages/qualify.py writes
        )
        result = QualifyResult(
            "norm.rmsnorm", "PASS", True, SLOW, SLOW, 0.01, "cpu-abc", "cpu-timing", "C/B 0.0017", CpuDetail(())
        )
        ledger.record_evidence(con, cid("slow"), result, 20, None)
        db.put("last_sync_block", 40, con)
        if targets is not None:
            db.put(TARGETS_KEY, '["norm.rmsnorm", "rope.neox"]', con)
    ledger.settle(db, "norm.rmsnorm", SpeedPolicy(), 30)
    db.close()
    return state


@pytest.fixture()
def slow(tmp_path) -> Path:
    return _slow_state(tmp_path)


def _table(html: str, table_id: str) -> str:
    return re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S).group(1)


def test_the_stored_strings_stay_and_the_labels_say_below_the_bar(slow):
    doc = data.contributions(slow)
    [c] = check_contributions(doc)  # the API still decodes for an older reader
    [e] = c["evidence"]
    assert (c["state"], e["verdict"], e["outcome"]) == ("qualified", "PASS", "below_bar")  # old rows read
    assert (c["state_label"], e["verdict_label"]) == ("below the bar", "below the bar")


def test_the_page_never_shows_a_below_bar_verdict_as_pass_or_qualified(slow):
    html = page.index(data.crowns(slow), data.contributions(slow), SCHEMA)
    rows = _table(html, "contributions")
    assert "below the bar" in rows and "590.0× slower" in rows and "vs the fp32 reference" in rows
    assert "PASS" not in rows and "qualified" not in rows and 'class="crowned"' not in rows
    detail = page.detail(data.contribution(slow, cid("slow")), SCHEMA)
    body = detail.split("<h2>Verdicts</h2>", 1)[1]
    assert "below the bar" in body and "PASS" not in body and "qualified" not in body, body


def test_cacheon_status_and_miner_status_say_below_the_bar(slow):
    text = status.render(status.collect(slow))
    assert "below the bar" in text and "PASS" not in text and "qualified" not in text, text
    [c] = data.contributions(slow)["contributions"]
    lines = "\n".join(miner_render([ValidatorVerdicts(1, "v", "http://v", None, (c,), 1)]))
    assert "below the bar" in lines and "PASS" not in lines and "qualified" not in lines, lines
    assert "vs the fp32 reference" in lines  # a cpu-timing row is not against stock


def test_labels_for_every_stored_verdict_and_state():
    assert verdict_label("PASS", "crowned") == "crowned" and verdict_label("PASS", None) == "timed, not settled yet"
    assert verdict_label("FAIL", "failed") == "FAIL" and verdict_label("NO_DECISION", None) == "no decision"
    assert state_label("qualified", ["below_bar", "crowned"]) == "crowned"
    assert state_label("qualified", [None]) == "timed, not settled yet" and state_label("failed", []) == "failed"
    assert all("PASS" not in verdict_label("PASS", o) for o in (None, "crowned", "below_bar", "superseded"))


def test_every_slot_is_on_the_page_crowned_or_not(tmp_path):
    state = make_state(tmp_path)  # one crown (norm.rmsnorm); no targets stored: the catalogue
    crowns = data.crowns(state)
    assert crowns["slots"] == sorted(s.id for s in all_slots())
    html = _table(page.index(crowns, data.contributions(state), SCHEMA), "crowns")
    shown = re.findall(r'<tr class="(crown|uncrowned)" data-slot="([^"]+)">', html)
    assert sorted(s for _, s in shown) == crowns["slots"]
    assert [s for kind, s in shown if kind == "crown"] == ["norm.rmsnorm"]


def test_the_slots_shown_are_the_ones_the_validator_stored(tmp_path):
    state = _slow_state(tmp_path, targets=["norm.rmsnorm", "rope.neox"])
    assert data.crowns(state)["slots"] == ["norm.rmsnorm", "rope.neox"]
    html = page.index(data.crowns(state), data.contributions(state), SCHEMA)
    assert re.findall(r'<tr class="uncrowned" data-slot="([^"]+)">', html) == ["norm.rmsnorm", "rope.neox"]


def test_the_web_processs_snapshot_carries_the_slots(tmp_path):
    from cacheon_subnet.validator.web import snapshot

    state = _slow_state(tmp_path, targets=["norm.rmsnorm", "rope.neox"])
    out = tmp_path / "snap"
    out.mkdir()
    snapshot.write(state, out)
    assert data.crowns(data.Source(out, snapshot=True))["slots"] == ["norm.rmsnorm", "rope.neox"]
