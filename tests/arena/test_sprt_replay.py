"""scripts/sprt_replay.py on recorded H200 runs: the SPRT stops a real no-gain run early with FAIL
and crowns the real champions early, as docs/benchmarks.md records (post-hoc readings)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import sprt_replay  # noqa: E402

RESULTS = REPO / "docs" / "results"


@pytest.mark.parametrize(
    "name,decision,at_most",
    [
        ("2026-12-03/h200-s10-h2h-onepass.json", "PASS", 3),  # +1.8 % head-to-head
        ("2026-12-02/h200-s8-arena-attention.decode.json", "FAIL", 2),  # stock against stock, in effect
        ("2026-12-01/h200-wall-rolebias.json", "FAIL", 2),  # the stock-as-candidate control
    ],
)
def test_replay_decides_recorded_runs_early(capsys, name: str, decision: str, at_most: int) -> None:
    """With a PASS allowed to stop (`--stop-on-pass`, the SPRT as Wald wrote it)."""
    assert sprt_replay.main([str(RESULTS / name), "--json", "--stop-on-pass"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["decision"] == decision and row["stopped_at"] <= at_most, row
    assert row["fixed"] == decision  # the early decision agrees with the full run's verdict


def test_under_the_shipped_config_a_pass_runs_every_cycle_and_a_loser_still_stops(capsys) -> None:
    """stop_on_pass off (every shipped config): the champion's run is not cut short; the no-gain run is."""
    files = [
        str(RESULTS / "2026-12-03/h200-s10-h2h-onepass.json"),
        str(RESULTS / "2026-12-02/h200-s8-arena-attention.decode.json"),
    ]
    assert sprt_replay.main([*files, "--json"]) == 0
    win, lose = json.loads(capsys.readouterr().out)
    assert win["decision"] == "CONTINUE" and win["stopped_at"] == win["cycles"] and win["fixed"] == "PASS", win
    assert lose["decision"] == "FAIL" and lose["stopped_at"] <= 2, lose


def test_a_stricter_policy_needs_more_cycles(tmp_path: Path, capsys) -> None:
    """The replay reads the config's [sequential] policy (a broken control: a far smaller alpha)."""
    cfg = (REPO / "configs/arena/dense.toml").read_text().replace("alpha = 0.005", "alpha = 0.0000001")
    assert "alpha = 0.0000001" in cfg
    (tmp_path / "strict.toml").write_text(cfg)
    assert (
        sprt_replay.main(
            [
                str(RESULTS / "2026-12-03/h200-s10-h2h-onepass.json"),
                "--json",
                "--stop-on-pass",
                "--config",
                str(tmp_path / "strict.toml"),
            ]
        )
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)
    assert row["stopped_at"] > 3
